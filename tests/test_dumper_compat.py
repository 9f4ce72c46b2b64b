"""The PyTorch dumper against msprobe's own dumps of the same MLP (tests/data/mlp_fp32_*).

examples/mlp_train.py is the sample's training script (same model, seed, data order and loop), so our
dump must have the same keys in the same order, the same entry structure, construct.json and stack
grouping, and statistics equal up to float rounding (msprobe's machine summed in another order).
"""
from __future__ import annotations

import importlib.util
import json
import math
import pathlib

import pytest
import torch

from dumpers import format as fmt

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_example():
    spec = importlib.util.spec_from_file_location("mlp_train_example", ROOT / "examples" / "mlp_train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def fresh_debugger():
    from dumpers.torch_dump import PrecisionDebugger

    PrecisionDebugger.reset()
    yield
    PrecisionDebugger.reset()


def read(path: pathlib.Path) -> dict:
    return json.loads(path.read_text())


def same_structure(ours, ref, where="") -> list:
    """Differences in keys, lengths, types, dtypes, shapes and requires_grad; statistics within rounding."""
    if isinstance(ref, dict):
        if not isinstance(ours, dict):
            return [f"{where}: expected an object"]
        out = [] if list(ours) == list(ref) else [f"{where}: keys {list(ours)} != {list(ref)}"]
        for key in ref:
            if key in ours:
                out += same_structure(ours[key], ref[key], f"{where}.{key}")
        return out
    if isinstance(ref, list):
        if not isinstance(ours, list) or len(ours) != len(ref):
            return [f"{where}: list {ours!r:.60} != {ref!r:.60}"]
        return [d for i, (a, b) in enumerate(zip(ours, ref)) for d in same_structure(a, b, f"{where}[{i}]")]
    if isinstance(ref, float) and isinstance(ours, (int, float)) and not isinstance(ours, bool):
        ok = math.isclose(ours, ref, rel_tol=1e-5, abs_tol=1e-6) or (math.isnan(ref) and math.isnan(ours))
        return [] if ok else [f"{where}: {ours} != {ref}"]
    if type(ours) is not type(ref) or (ours != ref and where.rsplit(".", 1)[-1] != "dump_data_dir"):
        return [f"{where}: {ours!r} != {ref!r}"]
    return []


@pytest.mark.parametrize("level, sample", [("L1", "mlp_fp32_statistics_L1"), ("mix", "mlp_fp32_statistics_mix")])
def test_statistics_dump_matches_msprobe_sample(tmp_path, data_dir, level, sample):
    example = load_example()
    example.train(str(tmp_path / "dump"), "statistics", level, steps=2)
    for step in ("step0", "step1"):
        ours_dir, ref_dir = tmp_path / "dump" / step / "rank", data_dir / sample / step / "rank"
        ours, ref = read(ours_dir / "dump.json"), read(ref_dir / "dump.json")
        assert list(ours) == list(fmt.TOP_LEVEL_KEYS)
        assert list(ours["data"]) == list(ref["data"])
        assert same_structure(ours, ref) == []
        assert read(ours_dir / "construct.json") == read(ref_dir / "construct.json")
        ours_stack, ref_stack = read(ours_dir / "stack.json"), read(ref_dir / "stack.json")
        assert [g[0] for g in ours_stack.values()] == [g[0] for g in ref_stack.values()]
        for sid, (_keys, lines) in ref_stack.items():
            # the innermost frame is the same source line (the script's frames differ only in function names)
            assert ours_stack[sid][1][0].split("\n")[1] == lines[0].split("\n")[1]
        for key in ours["data"]:
            fmt.parse_entry_key(key)
        assert not (ours_dir / fmt.JOURNAL).exists()


def test_tensor_dump_matches_msprobe_sample(tmp_path, data_dir):
    example = load_example()
    example.train(str(tmp_path / "dump"), "tensor", "L1", steps=1)
    ours_dir = tmp_path / "dump" / "step0" / "rank"
    ref_dir = data_dir / "mlp_fp32_tensor_L1" / "step0" / "rank"
    ours = read(ours_dir / "dump.json")
    assert same_structure(ours, read(ref_dir / "dump.json")) == []
    assert ours["dump_data_dir"] == str(ours_dir / "dump_tensor_data")
    files = sorted(p.name for p in (ours_dir / "dump_tensor_data").iterdir())
    assert files == sorted(p.name for p in (ref_dir / "dump_tensor_data").iterdir())
    # every tensor file holds the tensor its item describes
    items = []

    def walk(v):
        if isinstance(v, dict):
            if "data_name" in v:
                items.append(v)
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(ours["data"])
    assert len(items) == len(files)
    for item in items:
        t = torch.load(ours_dir / "dump_tensor_data" / item["data_name"])
        assert list(t.shape) == item["shape"] and str(t.dtype) == item["dtype"]
        if t.is_floating_point():
            assert t.max().item() == item["Max"] and t.min().item() == item["Min"]
            # the file is a contiguous copy: sums over a transposed view may round differently
            assert math.isclose(t.mean().item(), item["Mean"], rel_tol=1e-5, abs_tol=1e-7)
            assert math.isclose(torch.linalg.vector_norm(t).item(), item["Norm"], rel_tol=1e-6)
