"""A dump is untrusted input: no code runs from it, no path leaves it, no entry exhausts memory, and no
malformed entry takes the others down (unit level; the pytest-run level is tested with the checker)."""
from __future__ import annotations

import json
import math
import os
import pathlib
import shutil
import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dumpers import format as fmt
from generators.inputs import InputError, build_inputs
from generators.loader import DumpError, load_dump, printable_name
from generators.tensorfile import TensorFileError, load_tensor_file

DATA = pathlib.Path(__file__).parent / "data"
TENSOR_STEP = DATA / "mlp_fp32_tensor_L1" / "step0" / "rank"


def write_dump(path, data, **top):
    doc = {"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": None, **top, "data": data}
    path.mkdir(parents=True, exist_ok=True)
    (path / "dump.json").write_text(json.dumps(doc))
    return path / "dump.json"


def t(name=None, shape=(2, 3), dtype="torch.float32"):
    item = {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": 1.0, "Min": -1.0,
            "Mean": 0.0, "Norm": 1.0, "requires_grad": False}
    if name is not None:
        item["data_name"] = name
    return item


class WritesAFile:
    """Unpickling this creates a file: the stand-in for code execution from a tensor file."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


# --- no code execution --------------------------------------------------------------------------------
def test_pickled_pt_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    tensors = tmp_path / "dump" / fmt.TENSOR_DIR
    tensors.mkdir(parents=True)
    torch.save({"x": WritesAFile(marker)}, tensors / "Torch.relu.0.forward.input.0.pt")
    # the payload is real: an unsafe load would create the marker
    torch.load(tensors / "Torch.relu.0.forward.input.0.pt", weights_only=False)
    assert marker.exists()
    marker.unlink()
    write_dump(tmp_path / "dump", {"Torch.relu.0.forward": {
        "input_args": [t("Torch.relu.0.forward.input.0.pt")], "input_kwargs": {}}})
    case = load_dump(tmp_path / "dump").cases[0]
    with pytest.raises(InputError, match=r"Torch.relu.0.forward.input.0.pt was refused: it is not a plain tensor"):
        build_inputs(case)
    assert not marker.exists()


def test_pickled_npy_object_array_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    arr = np.empty(1, dtype=object)
    arr[0] = WritesAFile(marker)
    np.save(tmp_path / "x.npy", arr, allow_pickle=True)
    item = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [1], "data_name": "x.npy"}
    with pytest.raises(TensorFileError, match="x.npy was refused"):
        load_tensor_file(str(tmp_path), item, max_bytes=1 << 20)
    assert not marker.exists()


def test_pt_holding_a_non_tensor_is_refused(tmp_path):
    torch.save({"a": torch.zeros(2)}, tmp_path / "d.pt")
    item = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "data_name": "d.pt"}
    with pytest.raises(TensorFileError, match="holds a dict, not a tensor"):
        load_tensor_file(str(tmp_path), item, max_bytes=1 << 20)


# --- paths stay inside the dump -----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../secret.pt", "/etc/passwd", "sub/x.pt", "..", "a\\..\\b.pt", ""])
def test_traversal_in_data_name_is_refused_per_entry(tmp_path, name):
    path = write_dump(tmp_path, {"Torch.relu.0.forward": {"input_args": [t(name)], "input_kwargs": {}},
                                 "Torch.relu.1.forward": {"input_args": [t()], "input_kwargs": {}}})
    by = load_dump(path).by_name()
    assert "data_name" in by["Torch.relu.0"].problem
    assert by["Torch.relu.1"].problem is None            # the neighbour is unaffected


def test_symlink_escape_is_refused(tmp_path):
    outside = tmp_path / "outside.pt"
    torch.save(torch.zeros(2, 3), outside)
    tensors = tmp_path / "dump" / fmt.TENSOR_DIR
    tensors.mkdir(parents=True)
    os.symlink(outside, tensors / "Torch.relu.0.forward.input.0.pt")
    torch.save(torch.ones(2, 3), tmp_path / "dump" / fmt.TENSOR_DIR / "ok.pt")
    write_dump(tmp_path / "dump", {
        "Torch.relu.0.forward": {"input_args": [t("Torch.relu.0.forward.input.0.pt")], "input_kwargs": {}},
        "Torch.relu.1.forward": {"input_args": [t("ok.pt")], "input_kwargs": {}}})
    by = load_dump(tmp_path / "dump").by_name()
    with pytest.raises(InputError, match="outside the tensor directory"):
        build_inputs(by["Torch.relu.0"])
    assert torch.equal(build_inputs(by["Torch.relu.1"]).args[0], torch.ones(2, 3))


def test_tensor_dir_symlinked_outside_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    torch.save(torch.zeros(2, 3), elsewhere / "a.pt")
    (tmp_path / "dump").mkdir()
    os.symlink(elsewhere, tmp_path / "dump" / fmt.TENSOR_DIR)
    write_dump(tmp_path / "dump", {"Torch.relu.0.forward": {"input_args": [t("a.pt")], "input_kwargs": {}}})
    case = load_dump(tmp_path / "dump").cases[0]
    assert case.tensor_dir is None
    with pytest.raises(InputError, match="outside the dump directory"):
        build_inputs(case)


@pytest.mark.parametrize("dump_data_dir", ["/etc", "../../x", "./a/../../b"])
def test_dump_data_dir_outside_is_refused(tmp_path, dump_data_dir):
    path = write_dump(tmp_path, {"Torch.relu.0.forward": {"input_args": [t("a.pt")], "input_kwargs": {}}},
                      dump_data_dir=dump_data_dir)
    case = load_dump(path).cases[0]
    with pytest.raises(InputError, match="refused|outside"):
        build_inputs(case)


def test_msprobe_dump_data_dir_is_ignored_when_tensor_dir_is_beside(data_dir):
    doc = json.loads((data_dir / "mlp_fp32_tensor_L1" / "step0" / "rank" / "dump.json").read_text())
    assert doc["dump_data_dir"].startswith("./dump_tensor/")   # relative to the training cwd
    case = load_dump(data_dir / "mlp_fp32_tensor_L1" / "step0").cases[0]
    assert case.tensor_dir.endswith("step0/rank/dump_tensor_data")


# --- bounded resources --------------------------------------------------------------------------------
def test_over_budget_shape_is_refused_before_allocating(tmp_path):
    path = write_dump(tmp_path, {"Torch.relu.0.forward": {"input_args": [t(shape=(1_000_000, 1_000_000))],
                                                         "input_kwargs": {}}})
    case = load_dump(path).cases[0]
    assert case.problem is None
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"need 4000000000000 bytes \(1000000000000 elements\), over the budget"):
        build_inputs(case, random=True)
    assert time.perf_counter() - start < 5        # refused, not attempted
    with pytest.raises(InputError, match="over the budget of 1000 bytes"):
        build_inputs(load_dump(write_dump(tmp_path / "b", {"Torch.relu.0.forward": {
            "input_args": [t(shape=(100, 100))], "input_kwargs": {}}})).cases[0], max_bytes=1000)


@pytest.mark.parametrize(("item_patch", "match"), [
    ({"shape": [-1, 3]}, "shape must be a list of non-negative integers"),
    ({"shape": [2 ** 40, 2 ** 40]}, "absurd"),
    ({"shape": [float("nan")]}, "shape must be a list of non-negative integers"),
    ({"shape": "big"}, "shape must be a list"),
    ({"dtype": "torch.float128"}, "not a known dtype"),
    ({"dtype": None}, "not a known dtype"),
    ({"Max": "1.0"}, "Max must be a number or null"),
    ({"requires_grad": "yes"}, "requires_grad must be true or false"),
    ({"shape": [1] * 65}, "dimensions"),
])
def test_malformed_tensor_items_become_problems(tmp_path, item_patch, match):
    path = write_dump(tmp_path, {"Torch.relu.0.forward": {"input_args": [{**t(), **item_patch}],
                                                         "input_kwargs": {}},
                                 "Torch.relu.1.forward": {"input_args": [t()], "input_kwargs": {}}})
    by = load_dump(path).by_name()
    assert match in by["Torch.relu.0"].problem and "input_args[0]" in by["Torch.relu.0"].problem
    assert by["Torch.relu.1"].problem is None
    with pytest.raises(InputError, match=match):
        build_inputs(by["Torch.relu.0"])


def test_malformed_entries_become_problems(tmp_path):
    text = json.dumps({"task": "statistics", "level": "L1", "dump_data_dir": None, "data": {
        "Torch.relu.0.forward": 5,
        "Torch.relu.1.forward": {"input_args": {"a": 1}, "input_kwargs": {}},
        "Torch.relu.2.backward": {"input": [t()], "output": [t()]},
        "Torch.relu.3.forward": {"output": [t()]},
        "Torch.relu.4.forward": {"input_args": [t()], "input_kwargs": {}},
        "Torch.relu.4.backward": {"input": [5], "output": []},
        "not-an-entry": {},
        "Torch.relu.6.forward": {"input_args": [t()], "input_kwargs": {}},
    }})
    # a duplicated entry key and a duplicated key inside an entry
    text = text.replace('"Torch.relu.6.forward"', '"Torch.relu.5.forward": {"input_args": [], "input_args": []}, '
                                                  '"Torch.relu.6.forward": {}, "Torch.relu.6.forward"')
    (tmp_path / "dump.json").write_text(text)
    by = load_dump(tmp_path / "dump.json").by_name()
    assert "must be an object" in by["Torch.relu.0"].problem
    assert "input_args must be a list" in by["Torch.relu.1"].problem
    assert "no forward entry" in by["Torch.relu.2"].problem
    assert "no input_args" in by["Torch.relu.3"].problem
    assert "input[0]" in by["Torch.relu.4"].problem
    assert "must look like" in by["not-an-entry"].problem
    assert "'input_args' more than once" in by["Torch.relu.5"].problem
    assert "appears more than once" in by["Torch.relu.6"].problem


def test_nan_and_infinity_literals_parse(tmp_path):
    item = {**t(), "Max": float("inf"), "Min": float("nan"), "Max_except_inf_nan": 2.0, "Min_except_inf_nan": -2.0}
    path = write_dump(tmp_path, {"Torch.relu.0.forward": {"input_args": [item], "input_kwargs": {}}})
    assert "Infinity" in path.read_text() and "NaN" in path.read_text()
    case = load_dump(path).cases[0]
    x = build_inputs(case, random=True).args[0].reshape(-1)
    assert math.isnan(x[1].item()) and x[-1].item() == math.inf
    finite = x[torch.isfinite(x)]
    assert finite.min().item() >= -2.0 and finite.max().item() <= 2.0


# --- fuzz: mutated real dumps never crash the loader --------------------------------------------------
FUZZ_SOURCES = {
    "tensor": (TENSOR_STEP / "dump.json").read_text(),
    "stats": (DATA / "mlp_fp32_statistics_mix" / "step0" / "rank" / "dump.json").read_text(),
    "npu": (DATA / "msprobe_repo_fixtures" / "npu_megatron_pytorch" / "dump.json").read_text(),
    "run_ut": (DATA / "msprobe_repo_fixtures" / "run_ut_statistics_mix" / "dump.json").read_text(),
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8)
    | st.sampled_from(["torch.Tensor", "torch.float16", "torch.bool", "../x.pt", "int", "slice", "int8",
                       "torch.Size", "float16", "torch.dtype", "ellipsis", "torch.device", "bool_"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["type", "dtype", "shape", "Max", "Min", "value", "data_name", "input_args"]), inner,
        max_size=4),
    max_leaves=8)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated_dumps(draw):
    source = draw(st.sampled_from(sorted(FUZZ_SOURCES)))
    text = FUZZ_SOURCES[source]
    how = draw(st.sampled_from(["replace", "delete", "text"]))
    if how == "text":
        pos = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 40))
        insert = draw(st.sampled_from(["", "}", "]", ",", '"', "NaN", "-1", "{}", "[]", "\x00", "\u00e9", "1e999",
                                       '"shape": [-1], ', '"data_name": "../x.pt", ', '"dtype": "torch.evil", ',
                                       '"Max": "1", ', '"shape": [1000000, 1000000], ', '"type": "slice", ']))
        return source, text[:pos] + insert + text[pos + cut:]
    doc = json.loads(text)
    paths = [p for p in _paths(doc) if p]
    path = draw(st.sampled_from(paths))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if how == "delete":
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(json_values)
    return source, json.dumps(doc)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(TENSOR_STEP / fmt.TENSOR_DIR, root / fmt.TENSOR_DIR)   # so real mode is exercised too
    return root


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutated=mutated_dumps())
def test_fuzz_mutated_dumps_never_crash(fuzz_dir, mutated):
    _, text = mutated
    path = fuzz_dir / "dump.json"
    path.write_text(text)
    try:
        ds = load_dump(path)
    except DumpError as exc:
        assert str(path) in str(exc) or "JSON" in str(exc)
        return
    try:
        keys = list(json.loads(text)["data"])
    except (ValueError, TypeError, KeyError):
        keys = []
    names = {c.name for c in ds}
    for key in keys:                                  # every entry is accounted for
        try:
            call = printable_name(fmt.parse_entry_key(key).api_call)
        except ValueError:
            call = printable_name(key) or "(empty entry key)"
        assert key in ds.excluded or call in names, key
    for case in ds:
        assert case.problem is None or isinstance(case.problem, str)
        for random in (False, True):
            try:
                inputs = build_inputs(case, random=random, max_bytes=1 << 22)
            except InputError as exc:
                assert str(exc)
            else:
                assert inputs.mode in ("real", "random")


tensor_like = st.fixed_dictionaries(
    {"type": st.just("torch.Tensor"), "dtype": st.sampled_from(["torch.float32", "torch.int8", "torch.bool",
                                                                 "torch.bfloat16", "torch.complex64", "Float16"]),
     "shape": st.lists(st.integers(-1, 4), max_size=3)},
    optional={"Max": json_values, "Min": json_values, "Mean": json_values, "Norm": json_values,
              "Max_except_inf_nan": json_values, "data_name": st.sampled_from(["a.pt", "../a.pt", "", 3])})
arguments = st.lists(json_values | tensor_like | st.builds(
    lambda k, v: {"type": k, "value": v},
    st.sampled_from(["int", "float", "bool", "str", "slice", "ellipsis", "torch.Size", "torch.dtype", "int8",
                     "uint64", "float16", "bool_", "torch.device", "mystery"]), json_values), max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=arguments, kwargs=st.dictionaries(st.sampled_from(["dim", "dtype", "device", "out", "alpha"]),
                                               json_values | tensor_like, max_size=2))
def test_fuzz_random_arguments_never_crash(fuzz_dir, args, kwargs):
    path = write_dump(fuzz_dir / "args", {"Torch.add.0.forward": {"input_args": args, "input_kwargs": kwargs}})
    case = load_dump(path).cases[0]
    for random in (False, True):
        try:
            build_inputs(case, random=random, max_bytes=1 << 20)
        except InputError as exc:
            assert str(exc)
