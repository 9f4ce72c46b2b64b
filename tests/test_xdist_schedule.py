"""xdist's first distribution deals the largest calls out one per worker; under ``load`` a worker starts as soon
as it has collected and keeps its queue fed (real xdist workers and real dumps, and the scheduler itself)."""
from __future__ import annotations

import json

import pytest
import torch

from pytest_msprobe import PrecisionDebugger

pytest_plugins = ["pytester"]

WHERE = '''
import json, os


def pytest_runtest_logreport(report):
    node = getattr(report, "node", None)
    if report.when == "call" and node is not None:
        with open(os.path.join(os.path.dirname(__file__), "where.jsonl"), "a") as fh:
            fh.write(json.dumps([report.nodeid, node.gateway.id]) + "\\n")
'''

HOLD = '''
import os, pathlib, time

HERE = pathlib.Path(__file__).parent


def pytest_runtest_call(item):
    # each worker says it runs, then runs nothing until the other one does: both start with work left,
    # however late the second one collects
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker in ("gw0", "gw1"):
        (HERE / f"running.{worker}").write_text("")
        other = HERE / ("running.gw1" if worker == "gw0" else "running.gw0")
        deadline = time.time() + 120
        while not other.exists() and time.time() < deadline:
            time.sleep(0.01)
'''


def _dump(path) -> None:
    """A step of 12 small matmuls, then two large ones (the costliest calls come last in dump order)."""
    PrecisionDebugger.reset()
    dbg = PrecisionDebugger(dump_path=str(path), task="statistics", level="L1")
    small, big = torch.randn(4, 4), torch.randn(256, 256)
    dbg.start()
    for _ in range(12):
        torch.matmul(small, small)
    torch.matmul(big, big)
    torch.matmul(big, big)
    dbg.stop()
    dbg.step()
    dbg.flush()
    PrecisionDebugger.reset()


@pytest.mark.parametrize("dist", ["load"])
def test_the_two_largest_calls_run_on_different_workers(pytester, dist):
    """Each worker starts on one of the two largest calls, whichever worker collects first (each waits in its
    first call until the other runs, so that how far apart they start cannot decide it)."""
    _dump(pytester.path / "dump")
    pytester.makeconftest(WHERE + HOLD)
    res = pytester.runpytest("--msprobe-api-info", str(pytester.path / "dump" / "step0"), "--msprobe-random",
                             "-n", "2", "--dist", dist, "-p", "no:randomly")
    assert res.parseoutcomes().get("passed") == 14, res.stdout.str()
    where = dict(json.loads(line) for line in (pytester.path / "where.jsonl").read_text().splitlines())
    big = [worker for nodeid, worker in where.items() if nodeid.endswith(("Torch.matmul.12", "Torch.matmul.13"))]
    assert len(big) == 2 and big[0] != big[1], where
    assert set(where.values()) == {"gw0", "gw1"}


CONTROLLER_IMPORTS = '''
import os, sys


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):        # before xdist starts any worker
        with open(os.path.join(os.path.dirname(__file__), "controller.txt"), "w") as fh:
            fh.write(str("torch" in sys.modules))
'''


def test_the_controller_starts_the_workers_without_importing_torch(pytester):
    """With a CPU build of torch and the cpu device, the controller has nothing to learn from ``import torch``
    before its workers start (they import it in parallel)."""
    if torch.version.cuda is not None or torch.version.hip is not None:
        pytest.skip("a GPU build of torch: the controller asks torch.cuda whether a GPU is there")
    import subprocess
    import sys

    _dump(pytester.path / "dump")
    pytester.makeconftest(CONTROLLER_IMPORTS)
    res = subprocess.run([sys.executable, "-m", "pytest", "--msprobe-api-info", str(pytester.path / "dump" / "step0"),
                          "--msprobe-random", "-n", "2", "-p", "no:randomly", "-q"], cwd=pytester.path,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (pytester.path / "controller.txt").read_text() == "False"


class _Node:
    """What xdist's schedulers use of a worker: the items sent to it, and whether it was told to stop."""

    def __init__(self, name: str) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.sent: list = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def _scheduler(pytester, n_items: int):
    """A dealt ``load`` scheduler over two fake workers that collected ``n_items`` items, after its first
    distribution."""
    from pytest_msprobe.schedule import DealtLoad
    sched = DealtLoad(pytester.parseconfig("--tx", "2*popen", "-p", "xdist"))
    nodes = [_Node("gw0"), _Node("gw1")]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, [f"dump.json::Api.{i}" for i in range(n_items)])
    sched.schedule()
    return sched, nodes


def _run_queue(sched, node, duration: float) -> list:
    """Complete ``node``'s items one at a time, each taking ``duration``: after each, its queue length and how
    many items were still unsent."""
    steps = []
    while sched.queued_by_worker[node]:
        sched.mark_test_complete(node, sched.queued_by_worker[node][0], duration)
        steps.append((len(sched.queued_by_worker[node]), len(sched.pending)))
    return steps


def test_a_load_worker_on_short_items_keeps_enough_queued_to_cover_the_round_trip(pytester):
    """xdist refills a queue below a quarter of the fair share, down to two items near the end: a worker then
    waits for the controller after every item. Items of 2 ms keep 50 ms of work queued instead (25 items),
    never more than a fair share of what is left, and every item still runs exactly once."""
    from pytest_msprobe.schedule import QUEUED_S
    sched, (a, b) = _scheduler(pytester, 400)
    want = round(QUEUED_S / 0.002)
    steps = _run_queue(sched, a, 0.002)
    refilled = [(queued, left) for queued, left in steps if left > 0]
    assert len(refilled) > 100
    assert all(queued >= min(want, 1 + left // 2) for queued, left in refilled), steps
    assert any(queued == want for queued, _ in refilled)      # xdist's own refill would have left 2 near the end
    assert all(queued <= max(want, 400 // 4) for queued, _ in steps)
    _run_queue(sched, b, 0.002)
    assert not sched.pending and sched.tests_finished     # the session stops both (xdist's tests_finished)
    assert sorted(a.sent + b.sent) == list(range(400))


def test_a_load_worker_on_long_items_keeps_three_queued(pytester):
    """Items of 200 ms cover any round trip; the queue keeps three items (the one running, the next one its
    teardown needs, one in flight) while enough are left to send (never more than a fair share of the rest),
    and never more than xdist's own refill."""
    sched, (a, b) = _scheduler(pytester, 400)
    steps = _run_queue(sched, a, 0.2)
    assert all(queued >= min(3, 1 + left // 2) for queued, left in steps if left > 0), steps
    assert all(queued <= max(3, 400 // 2 // 2) for queued, _ in steps), steps
    _run_queue(sched, b, 0.2)
    assert sorted(a.sent + b.sent) == list(range(400))


def test_the_first_worker_to_collect_starts_and_a_late_one_gets_its_dealt_share(pytester):
    """xdist waits for every worker's collection; here the first one starts on the largest item at once, the
    second one's share (the second largest, ...) is held back while other items remain, and is handed out when
    that worker collects."""
    from pytest_msprobe.schedule import DealtLoad
    sched = DealtLoad(pytester.parseconfig("--tx", "2*popen", "-p", "xdist"))
    a, b = _Node("gw0"), _Node("gw1")
    ids = [f"dump.json::Api.{i}" for i in range(40)]
    sched.add_node(a)
    sched.add_node(b)
    sched.add_node_collection(b, ids)
    assert sched.collection_is_completed
    sched.schedule()
    assert b.sent == [0, 2, 4, 6, 8] and a.sent == []        # share 0 of the dealt window (2 x 5 items)
    for _ in range(10):                                       # b runs on: items beyond the window, not a's
        sched.mark_test_complete(b, sched.queued_by_worker[b][0], 0.2)
    assert not set(b.sent) & {1, 3, 5, 7, 9}
    sched.add_node_collection(a, ids)
    sched.schedule()
    assert a.sent[:5] == [1, 3, 5, 7, 9]
    assert not sched.tests_finished


def test_a_late_worker_s_share_goes_to_the_started_ones_when_nothing_else_is_left(pytester):
    from pytest_msprobe.schedule import DealtLoad
    sched = DealtLoad(pytester.parseconfig("--tx", "2*popen", "-p", "xdist"))
    a, b = _Node("gw0"), _Node("gw1")
    sched.add_node(a)
    sched.add_node(b)
    sched.add_node_collection(a, [f"dump.json::Api.{i}" for i in range(40)])
    sched.schedule()
    assert not sched.tests_finished
    _run_queue(sched, a, 0.01)                                # b never collects
    assert sorted(a.sent) == list(range(40))
    assert sched.tests_finished and not sched.has_pending


def test_a_worker_that_collected_other_items_gets_nothing_and_is_a_collection_error(pytester):
    from pytest_msprobe.schedule import DealtLoad
    config = pytester.parseconfig("--tx", "2*popen", "-p", "xdist")
    errors = []

    class Recorder:
        def pytest_collectreport(self, report):
            errors.append(report)

    config.pluginmanager.register(Recorder())
    sched = DealtLoad(config)
    a, b = _Node("gw0"), _Node("gw1")
    sched.add_node(a)
    sched.add_node(b)
    sched.add_node_collection(a, [f"dump.json::Api.{i}" for i in range(40)])
    sched.schedule()
    sched.add_node_collection(b, [f"dump.json::Api.{i}" for i in range(39)])
    sched.schedule()
    assert b.sent == [] and b.shutting_down
    assert len(errors) == 1 and errors[0].failed and errors[0].nodeid == "gw1"
    assert "Api.39" in str(errors[0].longrepr)
    _run_queue(sched, a, 0.01)
    assert sorted(a.sent) == list(range(40))


EARLY = """
import json, os, pathlib, time

HERE = pathlib.Path(__file__).parent


def pytest_collection_finish(session):
    # gw1 finishes its collection only once gw0 has run three calls (or after 120 s: then the check fails)
    if os.environ.get("PYTEST_XDIST_WORKER") == "gw1":
        deadline = time.time() + 120
        while len(list(HERE.glob("ran.gw0.*"))) < 3 and time.time() < deadline:
            time.sleep(0.01)
        (HERE / "gw1_collected_after.txt").write_text(str(len(list(HERE.glob("ran.gw0.*")))))


def pytest_runtest_logreport(report):
    if report.when == "call" and os.environ.get("PYTEST_XDIST_WORKER") == "gw0":
        (HERE / f"ran.gw0.{report.nodeid.rsplit('.', 1)[-1]}").write_text("")
"""


def test_a_worker_runs_calls_before_the_other_has_collected(pytester):
    """A real run: gw1's collection waits for gw0 to run three calls, which xdist's own ``load`` never lets it
    do (it waits for every collection first); every call still runs once and the run passes."""
    _dump(pytester.path / "dump")
    pytester.makeconftest(EARLY)
    res = pytester.runpytest("--msprobe-api-info", str(pytester.path / "dump" / "step0"), "--msprobe-random",
                             "-n", "2", "-p", "no:randomly")
    assert res.parseoutcomes().get("passed") == 14, res.stdout.str()
    assert int((pytester.path / "gw1_collected_after.txt").read_text()) >= 3


def test_with_workers_on_other_hosts_the_run_starts_once_all_have_collected(pytester):
    """Hosts come up seconds apart: as xdist does, nothing starts before every worker has collected, and then
    each gets its dealt share."""
    from pytest_msprobe.schedule import DealtLoad
    sched = DealtLoad(pytester.parseconfig("--tx", "2*socket=10.0.0.2:8888", "--dist", "load", "-p", "xdist"))
    a, b = _Node("gw0"), _Node("gw1")
    ids = [f"dump.json::Api.{i}" for i in range(40)]
    sched.add_node(a)
    sched.add_node(b)
    sched.add_node_collection(a, ids)
    assert not sched.collection_is_completed
    sched.add_node_collection(b, ids)
    assert sched.collection_is_completed
    sched.schedule()
    assert a.sent == [0, 2, 4, 6, 8] and b.sent == [1, 3, 5, 7, 9]


def test_a_check_without_a_duration_tops_a_queue_up_to_its_minimum_only(pytester):
    """schedule() and a lost worker check every worker with no duration: near the end of a run (where xdist
    itself sends nothing to a worker holding two) that is no reason to queue more than the minimum."""
    from pytest_msprobe.schedule import MIN_QUEUED
    sched, (a, _) = _scheduler(pytester, 400)
    del sched.pending[12:]                      # 12 items left to send: xdist keeps two queued
    del sched.queued_by_worker[a][2:]               # a holds two
    sched.check_schedule(a)
    assert len(sched.queued_by_worker[a]) == MIN_QUEUED
    sched.check_schedule(a, 0.002)              # a known 2 ms item: 50 ms of them, within a fair share
    assert len(sched.queued_by_worker[a]) == 1 + (12 - 1) // 2       # the fair share of the 11 then left


def test_calls_of_a_worker_lost_after_the_queue_emptied_go_to_a_worker_still_there(pytester):
    """xdist stops a worker as soon as nothing is left to send; a worker lost after that (a host gone) left
    its calls to no one ("no active workers"). Here the drained worker waits at its last call and takes them."""
    sched, (a, b) = _scheduler(pytester, 40)
    while sched.pending or len(sched.queued_by_worker[a]) > 1:
        sched.mark_test_complete(a, sched.queued_by_worker[a][0], 0.01)
    assert not a.shutting_down and len(sched.queued_by_worker[b]) >= 2 and not sched.tests_finished
    held = list(sched.queued_by_worker[b])
    crashed = sched.remove_node(b)
    assert crashed == f"dump.json::Api.{held[0]}"
    assert len(sched.queued_by_worker[a]) >= 2 and not a.shutting_down      # it goes on, with b's calls
    _run_queue(sched, a, 0.01)
    assert set(held[1:]) <= set(a.sent) and not sched.pending and sched.tests_finished


PARSED = '''
import json, os


def pytest_sessionfinish(session):
    config = session.config
    if not hasattr(config, "workerinput"):
        return
    from pytest_msprobe.api_items import SESSION_KEY
    sess = config.stash[SESSION_KEY]
    parsed = sorted(c.name for p in sess.dump_paths for c in sess.cases_of(p) if c._parts is not None)
    order = [item.name for item in session.items]
    with open(os.path.join(os.path.dirname(__file__), config.workerinput["workerid"] + ".json"), "w") as fh:
        from pytest_msprobe.brief import WorkerBrief
        json.dump({"parsed": parsed, "order": order, "costs": bool(WorkerBrief.read(config).costs)}, fh)
'''


def test_workers_order_their_calls_by_the_controllers_costs_and_parse_only_what_they_run(pytester):
    """The controller works out each call's cost once; a worker orders its collection by it (the largest
    first, as before) and parses the entries of the calls it runs, not of all of them."""
    _dump(pytester.path / "dump")
    pytester.makeconftest(PARSED)
    res = pytester.runpytest("--msprobe-api-info", str(pytester.path / "dump" / "step0"), "--msprobe-random",
                             "-n", "2", "-p", "no:randomly")
    assert res.parseoutcomes().get("passed") == 14, res.stdout.str()
    workers = [json.loads((pytester.path / f"gw{i}.json").read_text()) for i in (0, 1)]
    for worker in workers:
        assert worker["costs"]
        assert worker["order"][:2] == ["Torch.matmul.12", "Torch.matmul.13"]       # the largest first
    parsed = [set(w["parsed"]) for w in workers]
    assert parsed[0] | parsed[1] == {f"Torch.matmul.{i}" for i in range(14)}
    assert len(parsed[0]) + len(parsed[1]) == 14, parsed          # each call's entries parsed by one worker


def test_a_narrowed_run_leaves_each_worker_to_order_the_few_calls_it_keeps(pytester):
    """With ``-k`` the workers may keep a few calls of a large dump: the controller parses nothing to order
    them, and each worker parses the entries of the calls it keeps only."""
    _dump(pytester.path / "dump")
    pytester.makeconftest(PARSED)
    res = pytester.runpytest("--msprobe-api-info", str(pytester.path / "dump" / "step0"), "--msprobe-random",
                             "-n", "2", "-p", "no:randomly", "-k", "matmul.13 or matmul.3")
    assert res.parseoutcomes().get("passed") == 2, res.stdout.str()
    workers = [json.loads((pytester.path / f"gw{i}.json").read_text()) for i in (0, 1)]
    assert not any(w["costs"] for w in workers)
    for worker in workers:
        assert worker["order"] == ["Torch.matmul.13", "Torch.matmul.3"]
        assert set(worker["parsed"]) <= {"Torch.matmul.13", "Torch.matmul.3"}
