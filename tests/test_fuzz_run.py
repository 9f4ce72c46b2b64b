"""Fuzz at the level of a whole check: a few hundred mutated copies of real dumps (tests/data) in one run.

Each copy carries one to three mutations drawn with a fixed seed (values replaced by junk, keys deleted,
numbers, shapes and dtypes made absurd, entry keys renamed to hostile or aliasing names, a forward or backward
entry dropped, an entry key repeated in the text). All copies are checked by one ``pytest --msprobe-api-info``
run: no INTERNALERROR, no traceback anywhere (output, CSV messages), exit 0 or 1, and every call of every copy
reported exactly once in the result CSV, under its copy's label. A copy unreadable as a whole (cut text) is
one usage error naming the file, run on its own.
"""
from __future__ import annotations

import copy
import json
import pathlib
import random
import shutil

import pytest
import torch  # noqa: F401 - before pytester snapshots sys.modules: torch cannot be imported twice

import generators.inputs  # noqa: F401 - keeps in-process runs fast
from dumpers import format as fmt
from generators.loader import SOURCE_SEPARATOR, printable_name
from pytest_msprobe.report import acc_csv

DATA = pathlib.Path(__file__).parent / "data"
SOURCES = [DATA / "mlp_fp32_statistics_L1" / "step0" / "rank", DATA / "mlp_fp32_statistics_L1" / "step1" / "rank",
           DATA / "mlp_fp32_statistics_mix" / "step0" / "rank", DATA / "mlp_fp32_tensor_L1" / "step0" / "rank"]
COPIES = 300
SEED = 20261203
JUNK = [None, True, "big", "", {}, [], [[]], {"type": "torch.Tensor"}, -1, 1.5, 10 ** 30, float("nan"),
        float("inf"), "torch.Tensor", "../x.pt", {"value": {"value": None}}]
NUMBERS = [float("nan"), float("inf"), -float("inf"), -1, -(10 ** 12), 1e308, 10 ** 40, 0.5, "1.0"]
SHAPES = [[10 ** 12], [-1, 3], [10 ** 6, 10 ** 6], "big", [1.5], [1] * 100, [2 ** 62, 2 ** 62], None, [[2]],
          [True], []]
DTYPES = ["torch.float99", "torch.complex256", "", "float32", 7, None, "torch.qint8", "<class 'evil'>"]
DATA_NAMES = ["../../../../etc/passwd", "/etc/passwd", "sub/dir/x.pt", "x\x00.pt", "..", "a" * 300, "missing.pt",
              42, None]
RENAMES = ["=HYPERLINK(\"http://x\").relu.0.forward", "Torch.no_such_api.0.forward", "Torch.load.0.forward",
           "Torch.relu.x.forward", "no dots at all", "", "Tensor.__reduce_ex__.0.forward", "Torch.relu.0.sideways",
           "Distributed.all_reduce.0.forward", "Jit.f.forward", "Torch.relu.0\n.forward", "Torch.relu.0.forward\n",
           "Torch.relu.01.forward", "Functional.linear.0 .forward", "Torch.save.0.forward", "Module.x.forward.0"]
KINDS = ["drop", "junk", "number", "shape", "dtype", "data_name", "rename", "orphan", "dup_entry"]


def _tensors(obj, found: list, depth: int = 0) -> list:
    if depth < 12 and isinstance(obj, dict):
        if "dtype" in obj or "shape" in obj:
            found.append(obj)
        for v in obj.values():
            _tensors(v, found, depth + 1)
    elif depth < 12 and isinstance(obj, list):
        for v in obj:
            _tensors(v, found, depth + 1)
    return found


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


def mutate(doc: dict, rng: random.Random) -> str:
    """The text of ``doc`` with one to three mutations (JSON that stays readable as a whole)."""
    entries = doc["data"]
    dup = None
    for kind in rng.sample(KINDS, rng.randint(1, 3)):
        if not entries:
            break
        key = rng.choice(list(entries))
        items = _tensors(entries[key], [])
        if kind in ("drop", "junk"):
            path = rng.choice(list(_paths(entries[key])))
            if not path:                # the whole entry
                if kind == "drop":
                    del entries[key]
                else:
                    entries[key] = rng.choice(JUNK)
                continue
            parent = entries[key]
            for step in path[:-1]:
                parent = parent[step]
            if kind == "drop":
                del parent[path[-1]]
            else:
                parent[path[-1]] = rng.choice(JUNK)
        elif kind in ("number", "shape", "dtype", "data_name") and items:
            item = rng.choice(items)
            field = {"number": rng.choice(["Max", "Min", "Mean", "Norm", "value"]), "shape": "shape",
                     "dtype": "dtype", "data_name": "data_name"}[kind]
            item[field] = rng.choice({"number": NUMBERS, "shape": SHAPES, "dtype": DTYPES,
                                      "data_name": DATA_NAMES}[kind])
        elif kind == "rename":
            entries[rng.choice(RENAMES)] = entries.pop(key)
        elif kind == "orphan":
            entries.pop(f"{key.rsplit('.', 1)[0]}.{rng.choice(['forward', 'backward'])}", None)
        elif kind == "dup_entry":
            dup = key
    text = json.dumps(doc, allow_nan=True)
    if dup is not None and dup in entries:
        at = text.index('"data": {') + len('"data": {')
        text = text[:at] + json.dumps({dup: entries[dup]}, allow_nan=True)[1:-1] + ", " + text[at:]
    return text


def expected_calls(text: str) -> list:
    """The call names a readable dump's text holds, in dump order, from the format's grammar (independently of
    the loader): every key of ``data`` but module entries, named without its direction."""
    pairs = json.loads(text, object_pairs_hook=lambda p: p)
    data = dict(pairs)["data"]
    names: dict = {}
    for key, _ in data:
        try:
            parsed = fmt.parse_entry_key(key)
        except ValueError:
            names.setdefault(printable_name(key) or "(empty entry key)")
            continue
        if parsed.kind not in fmt.MODULE_KINDS:
            names.setdefault(printable_name(parsed.api_call))
    return list(names)


@pytest.fixture(scope="module")
def mutated(tmp_path_factory) -> tuple:
    """(folder of COPIES mutated dumps, label -> expected call names)."""
    root = tmp_path_factory.mktemp("fuzz")
    rng = random.Random(SEED)
    docs = [json.loads((s / "dump.json").read_text()) for s in SOURCES]
    expected = {}
    for i in range(COPIES):
        at = rng.randrange(len(SOURCES))
        label = f"c{i:03d}"
        d = root / "dumps" / label
        d.mkdir(parents=True)
        if (SOURCES[at] / fmt.TENSOR_DIR).is_dir():
            shutil.copytree(SOURCES[at] / fmt.TENSOR_DIR, d / fmt.TENSOR_DIR)
        text = mutate(copy.deepcopy(docs[at]), rng)
        (d / "dump.json").write_text(text)
        expected[label] = expected_calls(text)
    return root, expected


def test_a_few_hundred_mutated_dumps_in_one_check(pytester: pytest.Pytester, mutated) -> None:
    root, expected = mutated
    res = pytester.runpytest_inprocess(f"--msprobe-api-info={root / 'dumps'}", "--msprobe-out=out", "-p",
                                       "no:randomly", "-p", "no:cacheprovider", "--msprobe-max-bytes=64MB",
                                       "--tb=line", "-q")
    text = res.stdout.str() + res.stderr.str()
    assert res.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), text[-3000:]
    assert "INTERNALERROR" not in text and "Traceback" not in text, text[-3000:]
    (result,) = (pytester.path / "out").glob("accuracy_checking_result_*.csv")
    rows = acc_csv.read_result_csv(str(result))
    names = [r.name for r in rows]
    assert len(names) == len(set(names)), "an API reported twice"
    want = [f"{label}{SOURCE_SEPARATOR}{name}" for label, calls in expected.items() for name in calls]
    assert sorted(names) == sorted(want)
    for r in rows:
        assert "Traceback" not in (r.message or "") and not (r.message or "").startswith("internal error"), r
        if r.forward == "SKIP":
            assert (r.message or "").strip(), r


@pytest.mark.parametrize("cut", [0, 1, 57, 400, -3])
def test_a_dump_cut_short_is_one_usage_error(pytester: pytest.Pytester, cut: int) -> None:
    text = (SOURCES[0] / "dump.json").read_text()
    d = pytester.path / "dump"
    d.mkdir()
    (d / "dump.json").write_text(text[:cut])
    res = pytester.runpytest_inprocess(f"--msprobe-api-info={d}", "--msprobe-out=out", "-p", "no:cacheprovider")
    err = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str()[-2000:]
    assert str(d / "dump.json") in err and "Traceback" not in err + res.stdout.str(), err
