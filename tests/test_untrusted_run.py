"""A dump is untrusted input, at the level of a whole ``pytest --msprobe-api-info`` run.

The loader's own rules are tested in test_untrusted_dump.py; here hostile and damaged dumps go through
collection, the items, the reporter and the CSV files: no INTERNALERROR, an exit status of 0 or 1 (or one
usage error naming the file when the file is unreadable as a whole), every entry exactly once in the result
CSV, nothing run from a tensor file, nothing read from outside the dump, nothing written with wider
permissions than asked.
"""
from __future__ import annotations

import csv
import glob
import json
import os
import pathlib
import pickle
import resource
import shutil
import stat

import numpy as np
import pytest
import torch  # before pytester snapshots sys.modules: torch cannot be imported twice
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import generators.inputs  # noqa: F401 - the same, and keeps in-process runs fast
import pytest_msprobe.precision.compare  # noqa: F401
from dumpers import format as fmt
from generators.loader import printable_name
from pytest_msprobe.report import acc_csv

DATA = pathlib.Path(__file__).parent / "data"
TENSOR_STEP = DATA / "mlp_fp32_tensor_L1" / "step0" / "rank"
STATS_STEP = DATA / "mlp_fp32_statistics_L1" / "step0" / "rank"
FORMULA_LEAD = ("=", "+", "-", "@", "\t", "\r")
INTERNAL_ERROR = "INTERNALERROR"

PERTURB = '''
from pytest_msprobe.devices import CpuBackend


class Perturbed(CpuBackend):
    name = "perturbed"

    def call(self, func, args, kwargs):
        out = func(*args, **kwargs)
        return out * 1.05 if getattr(func, "__name__", "") == "gelu" else out


def pytest_msprobe_register_devices(registry):
    registry.register(Perturbed())
'''


class WritesAFile:
    """Unpickling this creates a file: the stand-in for code execution from a tensor file."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


# --- helpers ------------------------------------------------------------------------------------------------
def result_csv(out: pathlib.Path) -> str:
    files = glob.glob(str(out / "accuracy_checking_result_*.csv"))
    assert len(files) == 1, files
    return files[0]


def rows_of(out: pathlib.Path) -> dict:
    rows = acc_csv.read_result_csv(result_csv(out))
    names = [r.name for r in rows]
    assert len(names) == len(set(names)), f"an API appears more than once: {names}"
    return {r.name: r for r in rows}


def raw_cells(path: str) -> list:
    """Every row after the header, cells exactly as written."""
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return list(csv.reader(fh))[1:]


def assert_clean_run(res, out: pathlib.Path) -> dict:
    """Exit 0/1, no internal error, no crash rows, cells from the dump neutralised; returns the rows."""
    text = res.stdout.str() + res.stderr.str()
    assert INTERNAL_ERROR not in text, text[-3000:]
    assert res.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), (res.ret, text[-3000:])
    outcomes = res.parseoutcomes()
    assert not outcomes.get("errors") and not outcomes.get("error"), outcomes
    rows = rows_of(out)
    for r in rows.values():
        assert r.forward in ("pass", "Warning", "warning", "error", "SKIP"), r
        msg = r.message or ""
        assert "Traceback" not in msg and not msg.startswith("internal error"), r
        if r.forward == "SKIP":
            assert msg.strip(), f"SKIP without a reason: {r}"
    result = result_csv(out)
    for cells in raw_cells(result):
        for cell in (cells[0], cells[3] if len(cells) > 3 else ""):
            assert not cell.startswith(FORMULA_LEAD), cells
    for cells in raw_cells(acc_csv.details_path_for(result)):
        for cell in (cells[0], cells[22] if len(cells) > 22 else ""):
            assert not cell.startswith(FORMULA_LEAD), cells
    failed = outcomes.get("failed", 0)
    failing_rows = [n for n, r in rows.items() if acc_csv.is_failing(r.forward, r.backward)]
    assert failed == len(failing_rows), (outcomes, failing_rows)
    return rows


class _Pairs(dict):
    """A JSON object that remembers every (key, value) pair, repeated keys included."""

    pairs: list


def _pairs_hook(pairs: list) -> dict:
    obj = _Pairs(pairs)
    obj.pairs = list(pairs)
    return obj


def expected_calls(text: str) -> list | None:
    """The API calls a dump's text holds, in dump order (None: the file is not readable as a whole).

    Computed here from the format's grammar, independently of the loader: every key of ``data`` that is
    not a Module/Cell or parameters_grad entry is part of one call, named by its key without the direction
    (a key that follows no grammar is a call of its own name)."""
    try:
        doc = json.loads(text, object_pairs_hook=_pairs_hook)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or len(doc.pairs) != len(doc) or not isinstance(doc.get("data"), dict):
        return None
    names: dict = {}
    for key, _ in doc["data"].pairs:
        try:
            parsed = fmt.parse_entry_key(key)
        except ValueError:
            names.setdefault(printable_name(key) or "(empty entry key)")
            continue
        if parsed.kind not in ("module", "parameters_grad"):
            names.setdefault(printable_name(parsed.api_call))
    return list(names)


# --- the dumps the fuzz test mutates ------------------------------------------------------------------------
@pytest.fixture(scope="session")
def our_dump(tmp_path_factory) -> pathlib.Path:
    """A tensor dump of one training step of a tiny MLP, written by our own PrecisionDebugger."""
    from pytest_msprobe import PrecisionDebugger
    root = tmp_path_factory.mktemp("ours")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))
    PrecisionDebugger.reset()
    dbg = PrecisionDebugger(task="tensor", dump_path=str(root), level="L1")
    try:
        dbg.start(model)
        model(torch.randn(4, 8)).pow(2).mean().backward()
        dbg.stop()
        dbg.step()
    finally:
        PrecisionDebugger.reset()
    step = root / "step0" / "rank"
    assert (step / "dump.json").is_file() and any((step / fmt.TENSOR_DIR).iterdir())
    return step


@pytest.fixture
def sources(our_dump) -> dict:
    return {"tensor": TENSOR_STEP, "stats": STATS_STEP, "ours": our_dump}


def _tensor_items(obj, found: list, depth: int = 0) -> None:
    if depth > 8:
        return
    if isinstance(obj, dict):
        if "dtype" in obj or "shape" in obj:
            found.append(obj)
        for v in obj.values():
            _tensor_items(v, found, depth + 1)
    elif isinstance(obj, list):
        for v in obj:
            _tensor_items(v, found, depth + 1)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


JUNK = st.sampled_from([None, True, "big", "", {}, [], [[]], {"type": "torch.Tensor"}, -1, 1.5, 10 ** 30,
                        float("nan"), float("inf"), "torch.Tensor", "../x.pt", {"value": {"value": None}}])
NUMBERS = st.sampled_from([float("nan"), float("inf"), -float("inf"), -1, -(10 ** 12), 1e308, 10 ** 40, 0.5])
SHAPES = st.sampled_from([[10 ** 12], [-1, 3], [10 ** 6, 10 ** 6], "big", [1.5], [float("nan")], [1] * 100,
                          [2 ** 62, 2 ** 62], None, [[2]], [True]])
DTYPES = st.sampled_from(["torch.float99", "torch.complex256", "", "float32", 7, None, "torch.qint8",
                          "<class 'evil'>"])
DATA_NAMES = st.sampled_from(["../../../../etc/passwd", "/etc/passwd", "sub/dir/x.pt", "x\x00.pt", "..", ".",
                              "a" * 300, "missing.pt", "C:\\x.pt", 42, None])
RENAMES = st.sampled_from(["=HYPERLINK(\"http://x\").relu.0.forward", "+cmd|' /C calc'!A0.relu.0.backward",
                           "Torch.no_such_api.0.forward", "Torch.load.0.forward", "Torch.relu.x.forward",
                           "no dots at all", "", "Module.fc.Linear.forward.0", "Tensor.__reduce_ex__.0.forward",
                           "Torch.relu.0.sideways", "Distributed.all_reduce.0.forward", "Jit.f.forward",
                           "Torch.relu.999.forward\n,evil", "Torch.save.0.forward"])
TOP_VALUES = st.sampled_from([None, "/home/victim", "../..", 3, "mindspore", "", [], {}])
KINDS = ["drop", "junk", "number", "shape", "dtype", "data_name", "rename", "orphan", "dup_entry", "truncate",
         "dup_top", "top"]


def mutate_text(text: str, data, first: str) -> str:
    """Apply the mutation ``first`` and up to two more drawn from ``data`` to the text of a dump.json."""
    doc = json.loads(text)
    entries = doc["data"]
    kinds = [first, *data.draw(st.lists(st.sampled_from(KINDS), max_size=2), label="more kinds")]
    dup_entry = dup_top = truncate = False
    for kind in kinds:
        event(f"mutation {kind}")
        keys = list(entries)
        if not keys:
            break
        key = data.draw(st.sampled_from(keys), label="entry")
        items: list = []
        _tensor_items(entries[key], items)
        if kind in ("drop", "junk"):
            paths = [p for p in _paths(entries[key])]
            path = data.draw(st.sampled_from(paths), label="path")
            if not path:
                if kind == "drop":
                    del entries[key]
                else:
                    entries[key] = data.draw(JUNK, label="junk")
                continue
            parent = entries[key]
            for step in path[:-1]:
                parent = parent[step]
            if kind == "drop":
                del parent[path[-1]]
            else:
                parent[path[-1]] = data.draw(JUNK, label="junk")
        elif kind in ("number", "shape", "dtype", "data_name") and items:
            item = data.draw(st.sampled_from(items), label="item")
            field = {"number": data.draw(st.sampled_from(["Max", "Min", "Mean", "Norm", "value"])),
                     "shape": "shape", "dtype": "dtype", "data_name": "data_name"}[kind]
            strategy = {"number": NUMBERS, "shape": SHAPES, "dtype": DTYPES, "data_name": DATA_NAMES}[kind]
            item[field] = data.draw(strategy, label=kind)
        elif kind == "rename":
            entries[data.draw(RENAMES, label="new name")] = entries.pop(key)
        elif kind == "orphan":            # forward without backward or the reverse
            call = key.rsplit(".", 1)[0]
            for direction in data.draw(st.sampled_from([("forward",), ("backward",)]), label="direction"):
                entries.pop(f"{call}.{direction}", None)
        elif kind == "dup_entry":
            dup_entry = key
        elif kind == "dup_top":
            dup_top = True
        elif kind == "top":
            top = data.draw(st.sampled_from(["dump_data_dir", "framework", "task", "level", "data"]), label="top")
            if data.draw(st.booleans(), label="delete"):
                doc.pop(top, None)
            else:
                doc[top] = data.draw(TOP_VALUES, label="top value")
            entries = doc["data"] if isinstance(doc.get("data"), dict) else {}
        elif kind == "truncate":
            truncate = True
    out = json.dumps(doc, allow_nan=True)
    if dup_entry and dup_entry in entries and '"data": {' in out:
        marker = '"data": {'
        at = out.index(marker) + len(marker)
        extra = json.dumps({dup_entry: entries[dup_entry]}, allow_nan=True)[1:-1]
        out = out[:at] + extra + ", " + out[at:]
    if dup_top:
        out = '{"task": "tensor", ' + out[1:]
    if truncate:
        out = out[:data.draw(st.integers(0, len(out) - 1), label="cut at")]
    return out


_counter = iter(range(10 ** 9))
SOURCES = ["tensor", "stats", "ours"]
FUZZ_EXAMPLES = int(os.environ.get("MSPROBE_FUZZ_EXAMPLES", "2"))    # per mutation kind; raise it to hunt


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_fuzz_mutated_dumps_run_cleanly(pytester, sources, kind, data):
    """Mutated real dumps through a whole run: exit 0/1, every entry once in the CSV, or one usage error."""
    n = next(_counter)
    at = KINDS.index(kind) % len(SOURCES)           # each kind starts from another dump
    source = data.draw(st.sampled_from(SOURCES[at:] + SOURCES[:at]), label="source")
    event(f"source {source}")
    step = sources[source]
    dump = pytester.path / f"d{n}"
    dump.mkdir()
    if (step / fmt.TENSOR_DIR).is_dir():
        shutil.copytree(step / fmt.TENSOR_DIR, dump / fmt.TENSOR_DIR)
    text = mutate_text((step / "dump.json").read_text(), data, kind)
    (dump / "dump.json").write_text(text)
    out = pytester.path / f"out{n}"
    res = pytester.runpytest_inprocess(f"--msprobe-api-info={dump / 'dump.json'}", f"--msprobe-out={out}",
                                       "--msprobe-max-bytes", "64MB", "-p", "no:cacheprovider")
    expected = expected_calls(text)
    event("unreadable as a whole" if expected is None else "run")
    if expected is None:       # unreadable as a whole: one usage error naming the file, no CSV
        assert res.ret == pytest.ExitCode.USAGE_ERROR, (res.ret, res.stdout.str()[-2000:])
        assert str(dump / "dump.json") in res.stderr.str()
        assert INTERNAL_ERROR not in res.stdout.str() + res.stderr.str()
        return
    rows = assert_clean_run(res, out)
    assert list(rows) == expected             # every call once, in dump order
    o = res.parseoutcomes()
    assert sum(o.get(k, 0) for k in ("passed", "failed", "skipped")) == len(expected), o


# --- the acceptance list, at run level ----------------------------------------------------------------------
@pytest.fixture
def project(pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\n")
    shutil.copytree(TENSOR_STEP, pytester.path / "dump")
    return pytester


def _edit(dump_json: pathlib.Path, edit) -> None:
    doc = json.loads(dump_json.read_text())
    edit(doc["data"])
    dump_json.write_text(json.dumps(doc))


def test_pickled_tensor_files_run_nothing_and_skip_naming_the_file(project, tmp_path):
    tensors = project.path / "dump" / fmt.TENSOR_DIR
    pt_marker, npy_marker = tmp_path / "pwned_pt", tmp_path / "pwned_npy"
    evil_pt = tensors / "Torch.relu.0.forward.input.0.pt"
    torch.save({"x": WritesAFile(pt_marker)}, evil_pt)
    torch.load(evil_pt, weights_only=False)             # the payload is real: an unsafe load runs it
    assert pt_marker.exists()
    pt_marker.unlink()
    evil_npy = tensors / "evil.npy"
    np.save(evil_npy, np.array([WritesAFile(npy_marker)], dtype=object), allow_pickle=True)
    with open(evil_npy, "rb") as fh:                      # the same for the .npy: its pickle writes a file
        fh.read(128)
        pickle.loads(fh.read())
    assert npy_marker.exists()
    npy_marker.unlink()

    def point_gelu_at_npy(data):
        data["Functional.gelu.0.forward"]["input_args"][0]["data_name"] = "evil.npy"
    _edit(project.path / "dump" / "dump.json", point_gelu_at_npy)
    res = project.runpytest("--msprobe-api-info", "dump/dump.json")
    rows = assert_clean_run(res, project.path)
    assert not pt_marker.exists() and not npy_marker.exists()
    assert rows["Torch.relu.0"].forward == "SKIP" and str(evil_pt) in rows["Torch.relu.0"].message
    assert rows["Functional.gelu.0"].forward == "SKIP" and "evil.npy" in rows["Functional.gelu.0"].message
    assert [n for n, r in rows.items() if r.forward != "pass"] == ["Torch.relu.0", "Functional.gelu.0"]
    res.assert_outcomes(passed=13, skipped=2)


def test_paths_outside_the_dump_are_refused_per_entry(project, tmp_path):
    """Traversal, absolute names and a symlink out of the tensor directory: those calls SKIP, the rest run,
    and the file outside is never read."""
    secret = tmp_path / "secret.pt"
    torch.save(torch.full((8, 32), 7.0), secret)
    tensors = project.path / "dump" / fmt.TENSOR_DIR
    link = tensors / "Functional.gelu.0.forward.input.0.pt"
    link.unlink()
    link.symlink_to(secret)
    bad = {"Torch.relu.0": "../../../../etc/passwd", "Functional.layer_norm.0": "/etc/passwd",
           "Tensor.softmax.0": "sub/dir/x.pt"}

    def traverse(data):
        for call, name in bad.items():
            data[f"{call}.forward"]["input_args"][0]["data_name"] = name
    _edit(project.path / "dump" / "dump.json", traverse)
    res = project.runpytest("--msprobe-api-info", "dump/dump.json")
    rows = assert_clean_run(res, project.path)
    for call, name in bad.items():
        assert rows[call].forward == "SKIP" and name in rows[call].message, rows[call]
    gelu = rows["Functional.gelu.0"]
    assert gelu.forward == "SKIP" and "outside the tensor directory" in gelu.message, gelu
    res.assert_outcomes(passed=11, skipped=4)


def test_tensor_directory_linked_outside_skips_every_call(project, tmp_path):
    moved = tmp_path / "elsewhere"
    shutil.move(project.path / "dump" / fmt.TENSOR_DIR, moved)
    (project.path / "dump" / fmt.TENSOR_DIR).symlink_to(moved, target_is_directory=True)
    res = project.runpytest("--msprobe-api-info", "dump/dump.json")
    rows = assert_clean_run(res, project.path)
    assert len(rows) == 15 and all(r.forward == "SKIP" and "outside the dump directory" in r.message
                                   for r in rows.values())


def test_absurd_shape_skips_with_the_numbers_without_allocating(project):
    """A 1e12-element entry (4 TB of float32) under the default budget: SKIP with the numbers, fast, and
    the process's peak memory does not move by anything near that."""
    def huge(data):
        entry = json.loads(json.dumps(data["Torch.relu.0.forward"]))
        for item in (entry["input_args"][0], entry["output"][0]):
            item["shape"] = [10 ** 6, 10 ** 6]
            del item["data_name"]            # no tensor file: random data from the statistics
        data["Torch.relu.9.forward"] = entry
    _edit(project.path / "dump" / "dump.json", huge)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", "-k", "relu")
    rows = assert_clean_run(res, project.path)
    msg = rows["Torch.relu.9"].message
    assert rows["Torch.relu.9"].forward == "SKIP"
    assert "4000000000000 bytes (1000000000000 elements), over the budget of" in msg, msg
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 512 * 1024      # KiB: < 512 MiB
    res.assert_outcomes(passed=1, skipped=1, deselected=14)


def test_oversized_dump_json_is_one_usage_error_before_reading(pytester):
    """A dump.json above the 2 GiB limit (a sparse file: no disk used) is refused by its size."""
    pytester.makeini("[pytest]\n")
    big = pytester.path / "dump" / "dump.json"
    big.parent.mkdir()
    with open(big, "wb") as fh:
        fh.truncate(3 * 1024 ** 3)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res = pytester.runpytest(f"--msprobe-api-info={big}")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"*{big} is {3 * 1024 ** 3} bytes, above the limit of*"])
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 256 * 1024
    assert not glob.glob(str(pytester.path / "accuracy_checking_*.csv"))


@pytest.mark.parametrize("text", ['{"task": "tensor", "data": {"Torch.relu.0.forward": {', "\x00\xff not json",
                                  '[1, 2]', '{"task": "tensor", "task": "statistics", "data": {}}',
                                  '{"data": "none"}', "[" * 100000])
def test_unreadable_dump_is_one_usage_error_naming_the_file(pytester, text):
    pytester.makeini("[pytest]\n")
    dump = pytester.path / "dump" / "dump.json"
    dump.parent.mkdir()
    dump.write_text(text, encoding="latin-1")
    res = pytester.runpytest("--msprobe-api-info", "dump/dump.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str()[-2000:]
    assert str(dump) in res.stderr.str() and "INTERNALERROR" not in res.stdout.str() + res.stderr.str()
    assert not glob.glob(str(pytester.path / "accuracy_checking_*.csv"))


def test_config_with_yaml_object_tag_is_a_usage_error_and_runs_nothing(project, tmp_path):
    marker = tmp_path / "pwned"
    cfg = project.path / "config.yaml"
    cfg.write_text(f'acc_check: !!python/object/apply:os.system ["touch {marker}"]\n')
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", f"--msprobe-config={cfg}")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in res.stdout.str() + res.stderr.str()
    res.stderr.fnmatch_lines(["*config.yaml: not valid YAML, or it uses a tag other than plain data*"])
    assert not marker.exists()
    cfg.write_text("acc_check:\n  white_list: [relu]\n")        # plain YAML data is fine
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", f"--msprobe-config={cfg}")
    res.assert_outcomes(passed=1, skipped=14)


@pytest.mark.parametrize("mask, file_mode, dir_mode", [(0o022, 0o640, 0o750), (0o077, 0o600, 0o700)])
def test_output_permissions_follow_msprobe_unless_umask_is_stricter(project, mask, file_mode, dir_mode):
    project.makeconftest(PERTURB)
    old = os.umask(mask)
    try:
        res = project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "perturbed",
                                "--msprobe-out", "out/nested", "--msprobe-save-error-data", "-k", "gelu or relu")
    finally:
        os.umask(old)
    res.assert_outcomes(passed=1, failed=1, deselected=13)
    out = project.path / "out" / "nested"
    result = result_csv(out)
    files = [result, acc_csv.details_path_for(result)]
    saved = glob.glob(str(out / "ut_error_data*" / "*.pt"))
    assert saved and all("gelu" in os.path.basename(p) for p in saved)
    for path in files + saved:
        assert stat.S_IMODE(os.stat(path).st_mode) == file_mode, path
    for path in (out, project.path / "out", *{os.path.dirname(p) for p in saved}):
        assert stat.S_IMODE(os.stat(path).st_mode) == dir_mode, path


def test_error_data_of_labelled_calls_stays_in_its_directory(pytester):
    """With several dumps, call names carry a label with '/': the saved tensors are still flat files."""
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(PERTURB)
    shutil.copytree(DATA / "mlp_fp32_tensor_L1", pytester.path / "st")
    res = pytester.runpytest("--msprobe-api-info", "st", "--msprobe-device-type", "perturbed",
                             "--msprobe-save-error-data", "-k", "gelu")
    rows = assert_clean_run(res, pytester.path)
    assert sorted(n for n, r in rows.items() if r.forward == "error") == [
        "step0/rank::Functional.gelu.0", "step1/rank::Functional.gelu.0"]
    saved = [os.path.relpath(p, pytester.path) for p in glob.glob(str(pytester.path / "ut_error_data*" / "**"),
                                                                   recursive=True) if os.path.isfile(p)]
    assert saved and all(p.count(os.sep) == 1 for p in saved), saved
    assert any(p.endswith("step0_rank::Functional.gelu.0.forward.input.0.pt") for p in saved), saved


@pytest.mark.slow
def test_hostile_entries_under_xdist_each_appear_once(project):
    """Odd names (node-id separators, formula leads, long, non-ASCII), duplicates and orphans, on two
    workers: every call once in the CSV, in dump order, nothing lost in the controller's bookkeeping."""
    dump = project.path / "dump" / "dump.json"
    text = dump.read_text()
    doc = json.loads(text)
    data = doc["data"]
    entry = json.loads(json.dumps(data["Torch.relu.0.forward"]))
    for item in entry["input_args"] + entry["output"]:
        item.pop("data_name", None)
    odd = ["Torch.a::b.0", "Torch.a/b.0", "Torch.relu[x].0", "Torch.rel u.0", "Torch.\u00e9\u4e2d.0",
           "Torch." + "r" * 300 + ".0", "=1+2.relu.0", "-Torch.relu.0", "@SUM(A1).x.0", "Torch.relu.99"]
    for name in odd:
        data[f"{name}.forward"] = entry
    data["Torch.relu.98.backward"] = data["Torch.relu.0.backward"] if "Torch.relu.0.backward" in data else {}
    del data["Functional.gelu.0.forward"]                       # backward without its forward
    out = json.dumps(doc)
    dup = json.dumps({"Tensor.softmax.0.forward": data["Tensor.softmax.0.forward"]})[1:-1]
    dump.write_text(out.replace('"data": {', '"data": {' + dup + ", ", 1))
    expected = expected_calls(dump.read_text())
    res = project.runpytest_subprocess("--msprobe-api-info", "dump/dump.json", "-n", "2")
    rows = assert_clean_run(res, project.path)
    assert list(rows) == expected and len(rows) == 15 + len(odd) + 1     # dump order restored after -n 2
    assert expected[:3] == ["Tensor.softmax.0", "Functional.linear.0", "Torch.relu.0"]
    assert rows["Torch.relu.99"].forward == "pass"
    assert rows["Functional.gelu.0"].forward == "SKIP" and "no forward entry" in rows["Functional.gelu.0"].message
    assert rows["Tensor.softmax.0"].forward == "SKIP" and "more than once" in rows["Tensor.softmax.0"].message
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", "--lf")    # resume: nothing to rerun
    res.assert_outcomes(deselected=len(expected))
    assert list(rows_of(project.path)) == expected        # formula-like names keep their rows on resume
