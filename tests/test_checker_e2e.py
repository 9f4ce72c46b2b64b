"""End-to-end: ``pytest --msprobe-api-info dump.json`` on msprobe's sample dumps, run through pytester.

A conftest registers a ``planted`` backend through the ``pytest_msprobe_register_devices`` hook: a CPU
backend that, for one API chosen by environment variables, perturbs the output, sleeps, or SIGKILLs its
own process (once, guarded by a marker file).
"""
from __future__ import annotations

import csv
import glob
import io
import json
import os
import shutil
from xml.etree import ElementTree

import pytest
import torch  # imported before pytester snapshots sys.modules: torch cannot be imported twice

import generators.inputs  # noqa: F401 - the same, and keeps in-process runs fast
import pytest_msprobe.precision.compare  # noqa: F401
from pytest_msprobe.report import acc_csv

PLANTED = '''
import os, signal, time
from pytest_msprobe.devices import CpuBackend


class Planted(CpuBackend):
    name = "planted"

    def call(self, func, args, kwargs):
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name == os.environ.get("PLANT_KILL_API"):
            marker = os.environ["PLANT_MARKER"]
            if not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
        if name == os.environ.get("PLANT_API", "gelu"):
            action = os.environ.get("PLANT_ACTION", "perturb")
            if action == "perturb":
                out = out * 1.01
            elif action == "sleep":
                time.sleep(float(os.environ.get("PLANT_SLEEP", "3")))
            elif action == "kill":
                marker = os.environ["PLANT_MARKER"]
                if not os.path.exists(marker):
                    open(marker, "w").close()
                    os.kill(os.getpid(), signal.SIGKILL)
        return out


def pytest_msprobe_register_devices(registry):
    registry.register(Planted())
'''

def _read_bytes(path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _read_text(path) -> str:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return fh.read()


SAMPLE_APIS = [
    "Functional.linear.0", "Torch.relu.0", "Functional.layer_norm.0", "Functional.gelu.0", "Tensor.__mul__.0",
    "Tensor.softmax.0", "Tensor.__add__.0", "Functional.linear.1", "Functional.cross_entropy.0",
    "Tensor.add_.0", "Tensor.add_.1", "Tensor.add_.2", "Tensor.add_.3", "Tensor.add_.4", "Tensor.add_.5",
]


@pytest.fixture
def project(pytester, data_dir, monkeypatch):
    """pytester dir with the fp32 tensor dump in dump/, the planted backend, and a clean environment."""
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(PLANTED)
    shutil.copytree(data_dir / "mlp_fp32_tensor_L1" / "step0" / "rank", pytester.path / "dump")
    for var in ("PLANT_API", "PLANT_ACTION", "PLANT_SLEEP", "PLANT_MARKER", "PLANT_KILL_API"):
        monkeypatch.delenv(var, raising=False)
    return pytester


@pytest.fixture
def fp16_project(project):
    """The same dump converted to fp16 (tensors and dtype strings)."""
    d = project.path / "dump"
    for pt in (d / "dump_tensor_data").glob("*.pt"):
        t = torch.load(pt, weights_only=True)
        if t.is_floating_point():
            torch.save(t.half(), pt)
    j = d / "dump.json"
    j.write_text(j.read_text().replace('"torch.float32"', '"torch.float16"'))
    return project


def result_rows(path) -> dict:
    files = glob.glob(str(path / "accuracy_checking_result_*.csv"))
    assert len(files) == 1, files
    rows = acc_csv.read_result_csv(files[0])
    names = [r.name for r in rows]
    assert len(names) == len(set(names)), f"duplicate rows: {names}"
    return {r.name: r for r in rows}


def details_names(path) -> list:
    files = glob.glob(str(path / "accuracy_checking_details_*.csv"))
    assert len(files) == 1, files
    return [r[0] for r in acc_csv.read_details_csv(files[0])[1]]


def test_sample_dump_matches_msprobe_statuses(project, data_dir):
    res = project.runpytest("--msprobe-api-info", "dump/dump.json")
    res.assert_outcomes(passed=15)
    res.stdout.fnmatch_lines(["*msprobe accuracy check*", "forward:  pass 15", "result CSV:*"])
    ours = result_rows(project.path)
    ref_file = glob.glob(str(data_dir / "mlp_fp32_tensor_L1_acc_check" / "accuracy_checking_result_*.csv"))[0]
    ref = {r.name: r for r in acc_csv.read_result_csv(ref_file)}
    assert list(ours) == list(ref) == SAMPLE_APIS           # every entry once, in dump order
    for name, r in ref.items():
        assert (ours[name].forward.lower(), ours[name].backward.strip().lower()) == \
            (r.forward.lower(), r.backward.strip().lower()), name
    ref_details = [r[0] for r in acc_csv.read_details_csv(acc_csv.details_path_for(ref_file))[1]]
    assert sorted(details_names(project.path)) == sorted(ref_details)


def test_node_ids_are_call_names_in_dump_order_and_k_selects(project):
    res = project.runpytest("--msprobe-api-info", "dump", "--collect-only", "-q")
    assert [ln for ln in res.outlines if "::" in ln] == [f"dump/dump.json::{n}" for n in SAMPLE_APIS]
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", "-k", "Functional.gelu.0", "--collect-only",
                            "-q")
    assert [ln for ln in res.outlines if "::" in ln] == ["dump/dump.json::Functional.gelu.0"]


def test_several_dumps_with_shared_call_names_get_labels(pytester, data_dir):
    pytester.makeini("[pytest]\n")
    shutil.copytree(data_dir / "mlp_fp32_statistics_L1", pytester.path / "st")
    res = pytester.runpytest("--msprobe-api-info", "st", "--collect-only", "-q")
    ids = [ln for ln in res.outlines if "::" in ln]
    assert len(ids) == len(set(ids)) == 30
    assert ids[0] == "st/step0/rank/dump.json::step0/rank::Functional.linear.0"
    assert ids[15] == "st/step1/rank/dump.json::step1/rank::Functional.linear.0"


def test_planted_fp16_error_fails_exactly_that_api(fp16_project):
    res = fp16_project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "planted",
                                 "--junitxml", "junit.xml")
    res.assert_outcomes(passed=14, failed=1)
    res.stdout.fnmatch_lines(["*failing APIs (1):*", "FAILED dump/dump.json::Functional.gelu.0*"])
    assert res.ret == 1
    rows = result_rows(fp16_project.path)
    assert [n for n, r in rows.items() if r.forward == "error" or r.backward == "error"] == ["Functional.gelu.0"]
    # junitxml: each test case's statuses as plain properties, the worst row of a failing one; not the payload
    # that carries the CSV rows to the controller
    cases = {c.get("name"): {p.get("name"): p.get("value") for p in c.iter("property")}
             for c in ElementTree.parse(str(fp16_project.path / "junit.xml")).iter("testcase")}
    assert len(cases) == 15 and all(set(props) >= {"msprobe_forward", "msprobe_backward", "msprobe_data_mode"}
                                    and "msprobe" not in props for props in cases.values())
    assert cases["Torch.relu.0"]["msprobe_forward"] == "pass" and "msprobe_worst" not in cases["Torch.relu.0"]
    gelu = cases["Functional.gelu.0"]
    assert gelu["msprobe_forward"] == rows["Functional.gelu.0"].forward == "error"
    assert gelu["msprobe_data_mode"] == "real_data"
    assert gelu["msprobe_worst"].startswith("Functional.gelu.0.")


def test_a_dump_outside_the_rootdir_is_named_by_its_path_and_a_killed_worker_still_gets_its_row(
        fp16_project, tmp_path_factory, monkeypatch):
    """pytest names a file outside the rootdir after the argument that holds it, which for a dump given by its
    own path is empty (``::Torch.relu.0``). Such a dump is named by its real path: a call whose worker was
    killed still gets its error row, ``-n 2``'s rows go back into dump order, and ``--lf`` reruns the calls
    that failed."""
    p = fp16_project
    outside = tmp_path_factory.mktemp("elsewhere") / "dump"
    shutil.move(str(p.path / "dump"), str(outside))
    dump = str(outside / "dump.json")
    monkeypatch.setenv("PLANT_KILL_API", "relu")
    monkeypatch.setenv("PLANT_MARKER", str(p.path / "killed"))
    # one argument: pytest then takes the rootdir from the project, not from the dump's path
    res = p.runpytest_subprocess(f"--msprobe-api-info={dump}", "-n", "2", "--msprobe-device-type", "planted")
    res.assert_outcomes(passed=13, failed=2)
    res.stdout.fnmatch_lines(["FAILED *elsewhere*/dump/dump.json::Functional.gelu.0*"])     # cwd-relative
    rows = result_rows(p.path)
    assert list(rows) == SAMPLE_APIS                 # put back in dump order after the parallel run
    assert "crashed" in rows["Torch.relu.0"].message
    res = p.runpytest(f"--msprobe-api-info={dump}", "--msprobe-device-type", "planted", "--lf")
    res.assert_outcomes(passed=1, failed=1, deselected=13)
    rows = result_rows(p.path)
    assert sorted(rows) == sorted(SAMPLE_APIS) and rows["Torch.relu.0"].forward == "pass"


@pytest.mark.slow
def test_xdist_planted_error_and_killed_worker_then_lf_and_baseline(fp16_project, monkeypatch):
    """-n 2: the perturbed API fails, a worker SIGKILLed mid-item becomes an error row; --lf reruns both."""
    p = fp16_project
    monkeypatch.setenv("PLANT_KILL_API", "relu")
    monkeypatch.setenv("PLANT_MARKER", str(p.path / "killed"))
    res = p.runpytest_subprocess("--msprobe-api-info", "dump/dump.json", "-n", "2",
                                 "--msprobe-device-type", "planted")
    res.assert_outcomes(passed=13, failed=2)
    rows = result_rows(p.path)
    assert list(rows) == SAMPLE_APIS                 # put back in dump order after the parallel run
    det = [acc_csv.api_of_output(n) for n in details_names(p.path)]
    assert [a for i, a in enumerate(det) if i == 0 or det[i - 1] != a] == SAMPLE_APIS
    assert sorted(n for n, r in rows.items() if "error" in (r.forward, r.backward)) == [
        "Functional.gelu.0", "Torch.relu.0"]
    assert "crashed" in rows["Torch.relu.0"].message and rows["Functional.gelu.0"].message is None
    res = p.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "planted", "--lf",
                      "-k", "relu")
    res.assert_outcomes(passed=1, deselected=14)
    rows = result_rows(p.path)                 # the failing row of gelu, not selected, is kept
    assert sorted(rows) == sorted(SAMPLE_APIS) and rows["Torch.relu.0"].forward == "pass"
    assert rows["Functional.gelu.0"].forward == "error"
    res = p.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "planted", "--lf")
    res.assert_outcomes(failed=1, deselected=14)
    rows = result_rows(p.path)
    assert sorted(rows) == sorted(SAMPLE_APIS) and rows["Functional.gelu.0"].forward == "error"
    baseline = glob.glob(str(p.path / "accuracy_checking_result_*.csv"))[0]
    os.makedirs(p.path / "second")
    res = p.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "planted",
                      "--msprobe-baseline", baseline, "--msprobe-out", "second", "-k", "gelu or linear")
    res.assert_outcomes(passed=2, xfailed=1, deselected=12)
    assert res.ret == 0


@pytest.mark.slow
def test_sigkill_mid_run_then_lf_completes_the_csv(project, monkeypatch):
    monkeypatch.setenv("PLANT_API", "gelu")
    monkeypatch.setenv("PLANT_ACTION", "kill")
    monkeypatch.setenv("PLANT_MARKER", str(project.path / "killed"))
    res = project.runpytest_subprocess("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type",
                                       "planted")
    assert res.ret != 0 and (project.path / "killed").exists()
    before = result_rows(project.path)
    assert list(before) == SAMPLE_APIS[:3]             # linear.0, relu.0, layer_norm.0 finished
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "planted", "--lf")
    res.assert_outcomes(passed=12, deselected=3)       # only what never finished runs again
    after = result_rows(project.path)
    assert sorted(after) == sorted(SAMPLE_APIS)
    assert all(r.forward == "pass" for r in after.values())
    names = details_names(project.path)
    assert len(names) == len(set(names)) and {acc_csv.api_of_output(n) for n in names} == set(SAMPLE_APIS)


def test_timeout_is_an_error_and_the_run_goes_on(project, monkeypatch):
    monkeypatch.setenv("PLANT_API", "gelu")
    monkeypatch.setenv("PLANT_ACTION", "sleep")
    monkeypatch.setenv("PLANT_SLEEP", "20")
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "planted",
                            "--msprobe-timeout", "4")
    res.assert_outcomes(passed=14, failed=1)
    rows = result_rows(project.path)
    assert rows["Functional.gelu.0"].forward == "error" and "timeout" in rows["Functional.gelu.0"].message


def test_white_black_lists_skip_with_reason_and_every_entry_appears(project, tmp_path):
    cfg = project.path / "config.json"
    cfg.write_text('{"task": "acc_check", "acc_check": {"white_list": ["linear", "gelu"], "black_list": ["gelu"]}}')
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", f"--msprobe-config={cfg}")
    res.assert_outcomes(passed=2, skipped=13)
    rows = result_rows(project.path)
    assert sorted(rows) == sorted(SAMPLE_APIS)
    assert rows["Functional.gelu.0"].message == "API gelu in black list or not in white list. SKIP."
    assert rows["Functional.linear.1"].forward == "pass"


def test_result_csv_continues_msprobe_file(project, data_dir):
    src = glob.glob(str(data_dir / "mlp_fp32_tensor_L1_acc_check" / "accuracy_checking_result_*.csv"))[0]
    for p in (src, acc_csv.details_path_for(src)):
        shutil.copy(p, project.path)
    target = project.path / os.path.basename(src)
    lines = _read_text(target).split("\r\n")
    with open(target, "w", encoding="utf-8-sig", newline="") as fh:      # drop the last two APIs
        fh.write("\r\n".join(lines[:-3]) + "\r\n")
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", f"--msprobe-result-csv={target}")
    res.assert_outcomes(passed=2, deselected=13)
    assert [r.name for r in acc_csv.read_result_csv(str(target))] == SAMPLE_APIS
    det = list(csv.reader(io.StringIO(_read_text(acc_csv.details_path_for(str(target))))))
    assert {len(r) for r in det} == {23}                # msprobe's file keeps msprobe's columns


def test_save_error_data_writes_loadable_tensors(fp16_project):
    res = fp16_project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "planted",
                                 "--msprobe-save-error-data", "-k", "gelu or relu")
    res.assert_outcomes(passed=1, failed=1, deselected=13)
    saved = sorted(os.path.basename(p) for p in glob.glob(str(fp16_project.path / "ut_error_data*" / "*.pt")))
    assert "Functional.gelu.0.forward.input.0.pt" in saved
    assert {"Functional.gelu.0.forward.output.bench.0.pt", "Functional.gelu.0.forward.output.device.0.pt"} <= set(saved)
    assert not any(s.startswith("Torch.relu") for s in saved)
    bench = torch.load(glob.glob(str(fp16_project.path / "ut_error_data*" / "*output.bench.0.pt"))[0],
                       weights_only=True)
    assert bench.dtype == torch.float32 and tuple(bench.shape) == (8, 32)


def test_usage_errors_say_what_to_do(project):
    res = project.runpytest("--msprobe-api-info", "nowhere/dump.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--msprobe-api-info*does not exist*"])
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "tpu")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*unknown device type 'tpu'*pytest_msprobe_register_devices*"])
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-max-bytes", "lots")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--msprobe-max-bytes*like 4GiB*"])


@pytest.mark.slow
def test_statistics_dump_runs_in_random_mode_reproducibly(pytester, data_dir):
    """msprobe's statistics-only sample: random data, every API checked or SKIP with a reason, the same
    rows on a second run under -n 2 (per-API seeds do not depend on the worker)."""
    pytester.makeini("[pytest]\n")
    shutil.copytree(data_dir / "mlp_fp32_statistics_L1" / "step0" / "rank", pytester.path / "dump")
    outs = []
    for i, extra in enumerate(([], ["-n", "2"])):
        os.makedirs(pytester.path / f"run{i}")
        args = ["--msprobe-api-info", "dump/dump.json", "--msprobe-out", f"run{i}", *extra]
        res = pytester.runpytest_subprocess(*args) if extra else pytester.runpytest(*args)
        o = res.parseoutcomes()
        assert o.get("passed", 0) + o.get("skipped", 0) + o.get("failed", 0) == 15, o
        rows = result_rows(pytester.path / f"run{i}")
        assert sorted(rows) == sorted(SAMPLE_APIS)
        for r in rows.values():
            assert r.forward != "SKIP" or r.message, r
        det = glob.glob(str(pytester.path / f"run{i}" / "accuracy_checking_details_*.csv"))[0]
        outs.append(sorted(acc_csv.read_details_csv(det)[1]))
        assert all(r[-3:-1] == ["random_data", ""] for r in outs[-1])    # Data Mode; no recording to judge
    assert outs[0] == outs[1]


def test_malformed_entries_skip_with_reason_and_nothing_crashes(project):
    dump = project.path / "dump" / "dump.json"
    doc = json.loads(dump.read_text())
    data = doc["data"]
    base = data["Torch.relu.0.forward"]

    def variant(mutate):
        entry = json.loads(json.dumps(base))
        mutate(entry["input_args"][0])
        return entry

    data["Torch.relu.10.forward"] = variant(lambda a: a.update(shape="eight"))
    data["Torch.relu.11.forward"] = variant(lambda a: a.update(dtype="torch.float99"))
    data["Torch.relu.12.forward"] = variant(lambda a: a.update(shape=[-8, 32]))
    data["Torch.relu.13.forward"] = variant(lambda a: a.update(data_name="../../../etc/passwd"))
    data["Torch.relu.14.forward"] = variant(lambda a: a.update(shape=[10 ** 6, 10 ** 6], data_name=None))
    data["Torch.relu.15.backward"] = {"input": [None], "output": [None]}          # backward without forward
    data["Distributed.all_reduce.0.forward"] = variant(lambda a: None)
    dump.write_text(json.dumps(doc))
    res = project.runpytest("--msprobe-api-info", "dump/dump.json")
    assert res.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), res.ret
    assert "INTERNALERROR" not in res.stdout.str() + res.stderr.str()
    rows = result_rows(project.path)
    extra = ["Torch.relu.10", "Torch.relu.11", "Torch.relu.12", "Torch.relu.13", "Torch.relu.14", "Torch.relu.15",
             "Distributed.all_reduce.0"]
    assert sorted(rows) == sorted(SAMPLE_APIS + extra)
    for name in extra:
        assert rows[name].forward == "SKIP" and rows[name].message.strip(), (name, rows[name])
    assert all(rows[n].forward == "pass" for n in SAMPLE_APIS)


def test_dump_written_by_our_dumper(pytester):
    """A tensor dump of a small bf16 MLP training step made with our PrecisionDebugger: every entry checked."""
    from pytest_msprobe import PrecisionDebugger
    pytester.makeini("[pytest]\n")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).bfloat16()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    PrecisionDebugger.reset()
    dbg = PrecisionDebugger(task="tensor", dump_path=str(pytester.path / "ours"), level="L1")
    try:
        dbg.start(model)
        loss = model(torch.randn(8, 16).bfloat16()).float().pow(2).mean()
        loss.backward()
        opt.step()
        dbg.stop()
        dbg.step()
    finally:
        PrecisionDebugger.reset()
    dump = pytester.path / "ours" / "step0" / "rank" / "dump.json"
    names = {k.rsplit(".", 1)[0] for k in json.loads(dump.read_text())["data"]}
    res = pytester.runpytest(f"--msprobe-api-info={dump}")
    o = res.parseoutcomes()
    assert o.get("passed", 0) + o.get("failed", 0) + o.get("skipped", 0) == len(names), o
    assert "INTERNALERROR" not in res.stdout.str()
    rows = result_rows(pytester.path)
    assert set(rows) == names
    assert rows["Functional.linear.0"].forward in ("pass", "Warning") and rows["Functional.gelu.0"].backward


def test_summary_counts_invalid_entries_apart_from_the_data_modes(project):
    dump = project.path / "dump" / "dump.json"
    doc = json.loads(dump.read_text())
    doc["data"]["VF.lstm.0.forward"] = {"input_args": [], "input_kwargs": {}, "output": []}
    dump.write_text(json.dumps(doc))
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", "-rs")
    res.assert_outcomes(passed=15, skipped=1)
    res.stdout.fnmatch_lines(["data: real_data 15, invalid 1"])
    assert result_rows(project.path)["VF.lstm.0"].forward == "SKIP"
    details = glob.glob(str(project.path / "accuracy_checking_details_*.csv"))[0]
    with open(details, encoding="utf-8-sig", newline="") as fh:
        modes = {r[0]: r[-3] for r in csv.reader(fh)}          # Data Mode, Replay Fidelity, Error / Expected
    assert modes["VF.lstm.0.forward.output.0"] == "random_data"      # the CSV's Data Mode column is unchanged


@pytest.mark.slow
def test_resume_keeps_its_own_record_and_leaves_pytest_lastfailed_alone(fp16_project, monkeypatch):
    p = fp16_project
    args = ("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "planted")
    p.runpytest(*args).assert_outcomes(passed=14, failed=1)             # gelu fails: both records have it
    monkeypatch.setenv("PLANT_KILL_API", "relu")
    monkeypatch.setenv("PLANT_MARKER", str(p.path / "killed"))
    res = p.runpytest_subprocess(*args)                                  # a fresh run, SIGKILLed at relu
    assert res.ret != 0 and (p.path / "killed").exists()
    cache = p.path / ".pytest_cache" / "v"
    pytest_lastfailed = json.loads((cache / "cache" / "lastfailed").read_text())
    assert any(k.endswith("::Functional.gelu.0") for k in pytest_lastfailed)     # pytest's own file untouched
    assert json.loads((cache / "msprobe" / "lastfailed").read_text()) == {}       # ours fits the new CSV
    res = p.runpytest(*args, "--lf")           # what the killed run never finished, not the stale failure
    res.assert_outcomes(passed=13, failed=1, deselected=1)
    continued = sorted(glob.glob(str(p.path / "accuracy_checking_result_*.csv")))[-1]    # the killed run's pair
    assert sorted(r.name for r in acc_csv.read_result_csv(continued)) == sorted(SAMPLE_APIS)
