"""Reflected operators (a Python scalar on the left) are named, numbered and replayed as msprobe 26.2 does."""
from __future__ import annotations

import json
import math
import os
import shutil

import pytest
import torch

import generators.inputs  # noqa: F401 - imported before pytester snapshots sys.modules
import pytest_msprobe.precision.compare  # noqa: F401
import zoo
from dumpers.torch_dump import wrap_lists
from pytest_msprobe import PrecisionDebugger

# what msprobe 26.2 records for each expression (seen with mindstudio-probe 26.2.0): name, non-tensor args
MSPROBE_26_2 = [
    ("0.5 * x", [("Tensor.__rmul__", [None, 0.5])]),
    ("1 - x", [("Tensor.__rsub__", [None, 1])]),
    ("2 ** x", [("Tensor.__rpow__", [None, 2])]),
    ("1 / x", [("Tensor.reciprocal", [None]), ("Tensor.__mul__", [None, 1])]),
    ("1 + x", [("Tensor.__radd__", [None, 1])]),
    ("7 % x", [("Tensor.__rmod__", [None, 7])]),
    ("7 // x", [("Torch.floor_divide", [7, None])]),
    ("5 | i", [("Tensor.__ror__", [None, 5])]),
    ("5 ^ i", [("Tensor.__rxor__", [None, 5])]),
    ("5 & i", []),
    ("x * 0.5", [("Tensor.__mul__", [None, 0.5])]),
    ("x.__rsub__(2)", [("Tensor.__rsub__", [None, 2])]),
    ("math.sqrt(2.0 / math.pi) * (x + 1.0)", [("Tensor.__add__", [None, 1.0]),
                                             ("Tensor.__rmul__", [None, math.sqrt(2.0 / math.pi)])]),
    ("scale * x", [("Tensor.__rmul__", [None, 2.0])]),
    ("x * y", [("Tensor.__mul__", [None, None])]),
]


@pytest.fixture(autouse=True)
def fresh_debugger():
    PrecisionDebugger.reset()
    yield
    PrecisionDebugger.reset()


def dumped(tmp_path, fn, task="statistics"):
    dbg = PrecisionDebugger(dump_path=str(tmp_path), task=task)
    dbg.start()
    fn()
    dbg.stop()
    dbg.step()
    dbg.flush()
    return json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]


def _plain(item):
    return None if item.get("type") == "torch.Tensor" else item.get("value")


@pytest.mark.parametrize("source, expected", MSPROBE_26_2, ids=[s for s, _ in MSPROBE_26_2])
def test_each_operator_form_is_named_as_msprobe_names_it(source, expected, tmp_path):
    scope = {"x": torch.tensor([1.5, 2.0, 3.0]), "y": torch.tensor([2.0, 1.0, 0.5]), "i": torch.tensor([1, 2, 3]),
             "scale": 2.0, "math": math}
    data = dumped(tmp_path, lambda: eval(source, scope))
    got = [(k.rsplit(".", 2)[0], [_plain(a) for a in v["input_args"]]) for k, v in data.items()
           if k.endswith(".forward")]
    assert got == expected


def test_reflected_slots_are_wrapped_only_while_dumping(tmp_path):
    before = {name: torch.Tensor.__dict__.get(name) for name in wrap_lists.REFLECTED_SLOTS}
    dbg = PrecisionDebugger(dump_path=str(tmp_path))
    dbg.start()
    assert all(getattr(torch.Tensor.__dict__.get(n), "__msprobe_original__", None) for n in before)
    dbg.stop()
    assert {name: torch.Tensor.__dict__.get(name) for name in before} == before
    x = torch.tensor([1.0, 2.0])
    assert torch.equal(0.5 * x, torch.tensor([0.5, 1.0])) and torch.equal(5 | torch.tensor([2]), torch.tensor([7]))


def test_reflected_calls_replay_with_the_scalar_on_the_left(tmp_path, pytester):
    x = torch.tensor([1.5, 2.0, 3.0], requires_grad=True)
    i = torch.tensor([1, 2, 6])

    def run():
        out = [0.5 * x, 1 - x, 2 ** x, 1 / x, 1 + x, 7 % x.detach(), 7 // x.detach(), 5 | i, 5 ^ i, 3.0 - x * 2]
        sum(v.sum() for v in out if v.requires_grad).backward()

    data = dumped(tmp_path / "d", run, task="tensor")
    assert {"Tensor.__rsub__.0.forward", "Tensor.__rsub__.1.forward", "Tensor.__rpow__.0.forward"} <= set(data)
    shutil.copytree(tmp_path / "d" / "step0" / "rank", pytester.path / "dump")
    pytester.makeini("[pytest]\n")
    res = pytester.runpytest("--msprobe-api-info", "dump/dump.json", "-p", "no:randomly")
    calls = len([k for k in data if k.endswith(".forward")])
    res.assert_outcomes(passed=calls)   # a swapped operand order (x - 1 for 1 - x) would fail the compare


def _tensors(value, path=""):
    if isinstance(value, dict):
        if value.get("type") == "torch.Tensor":
            yield path, value
        else:
            for k in value:
                yield from _tensors(value[k], f"{path}.{k}")
    elif isinstance(value, list):
        for n, v in enumerate(value):
            yield from _tensors(v, f"{path}[{n}]")


def _layout(value):
    """The entry with the tensors' statistics taken out: argument layout, dtypes, shapes, plain values."""
    if isinstance(value, dict):
        if value.get("type") == "torch.Tensor":
            return {k: v for k, v in value.items() if k in ("type", "dtype", "shape", "requires_grad")}
        return {k: _layout(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_layout(v) for v in value]
    return value


# where ours differs from msprobe 26.2's on this model (docs/dump.md): msprobe sets dropout to p=0, which leaves
# a p=0 dropout without a backward pass
OURS_ONLY = ("Functional.dropout.",)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """msprobe 26.2's dump of the GPT-2 step (reference.json) and ours of the same step."""
    from pathlib import Path

    ref = json.loads((Path(__file__).parent / "data" / "gpt2_msprobe_26_2" / "reference.json").read_text())
    out = tmp_path_factory.mktemp("gpt2")
    config = out / "config.json"            # msprobe's reference was made with risk_level "ALL"
    config.write_text(json.dumps({"task": "statistics", "dump_path": str(out), "risk_level": "ALL"}))
    PrecisionDebugger.reset()
    loss, params = zoo.train_step("gpt2", PrecisionDebugger(config_path=str(config)))
    PrecisionDebugger.reset()
    ours = json.loads((out / "step0" / "rank" / "dump.json").read_text())["data"]
    theirs = ref["data"]
    return {"ours": ours, "theirs": theirs, "loss": loss.item(), "ref_loss": ref["loss"],
            "updated": {(float(v.max()), float(v.min())) for v in params.values() if v.is_floating_point()}}


def test_gpt2_step_is_named_as_msprobe_26_2_names_it(gpt2):
    ours, theirs = gpt2["ours"], gpt2["theirs"]
    extra = [k for k in ours if k not in theirs]
    assert all(k.startswith(OURS_ONLY) for k in extra), extra
    assert [k for k in ours if k in theirs] == list(theirs)          # every call, same name, same order
    assert sum(k.startswith("Tensor.__rmul__.") for k in ours) == 12   # NewGELU's three scalars, 2 layers
    for key, entry in theirs.items():
        assert _layout(ours[key]) == _layout(entry), key             # argument layout, dtypes, shapes, values


def _same_statistics(gpt2, keys, roundings: int = 0) -> int:
    """Assert the statistics of every tensor of these entries equal, msprobe's and ours: Max and Min exactly (the
    same tensor on the same machine) or, with ``roundings``, within that many float32 roundings of the tensor's
    magnitude; Norm and Mean up to the rounding of two float32 summations; how many."""
    eps = torch.finfo(torch.float32).eps
    compared = 0
    for key in keys:
        for (path, a), (_, b) in zip(_tensors(gpt2["theirs"][key]), _tensors(gpt2["ours"][key])):
            n = math.prod(a["shape"]) if a["shape"] else 1
            if roundings and isinstance(a["Max"], float) and isinstance(a["Min"], float):
                tol = roundings * eps * max(abs(a["Max"]), abs(a["Min"]))
                assert abs(a["Max"] - b["Max"]) <= tol and abs(a["Min"] - b["Min"]) <= tol, (key, path)
            else:
                assert (a["Max"], a["Min"]) == (b["Max"], b["Min"]), (key, path)
            compared += 1
            if a["Norm"] is None:
                assert b["Norm"] is None and a["Mean"] == b["Mean"], (key, path)
                continue
            # two float32 summations of n terms differ by at most 2 n eps of the sum of magnitudes
            # (Norm: of the sum of squares; Mean: sum |x| <= sqrt(n) Norm), plus the final roundings
            assert abs(a["Norm"] - b["Norm"]) <= (2 * n + 1) * eps * a["Norm"], (key, path)
            assert abs(a["Mean"] - b["Mean"]) <= 2 * eps * math.sqrt(n) * a["Norm"] + eps * abs(a["Mean"]), \
                (key, path)
    assert compared == sum(len(list(_tensors(gpt2["theirs"][k]))) for k in keys)     # every tensor of them
    return compared


def _phases(gpt2) -> tuple:
    """(the model's forward calls, then the backward pass and the optimizer's): msprobe's dump order is the order
    of execution, and the forward pass ends where the first backward entry comes."""
    keys = list(gpt2["theirs"])
    first_backward = next(i for i, k in enumerate(keys) if k.endswith(".backward"))
    return keys[:first_backward], keys[first_backward:]


def test_gpt2_forward_statistics_equal_msprobe_26_2s(gpt2):
    """Where this CPU computes the forward pass as the machine of msprobe's reference did (the same loss, bit
    for bit), every statistic of the forward calls is msprobe's: Max and Min exactly where this CPU rounds every
    forward tensor as that machine did. A CPU whose fp32 GEMMs and reductions sum in another order (seen on an
    AVX2-only CPU: the same loss, a residual sum one rounding apart at its minimum) rounds some tensors otherwise;
    there Max and Min are compared within the rounding of the longest reduction of the forward pass (2k
    roundings of the tensor's magnitude, k the MLP's inner width), far below any other tensor's difference."""
    if gpt2["loss"] != gpt2["ref_loss"]:
        pytest.skip(f"this CPU computes the step differently from the one msprobe's reference was made on "
                    f"(loss {gpt2['loss']!r} vs {gpt2['ref_loss']!r}): statistics cannot be compared value "
                    f"for value; the names are compared by the test above")
    forward, _ = _phases(gpt2)
    rounded_alike = all((a["Max"], a["Min"]) == (b["Max"], b["Min"]) for key in forward
                        for (_, a), (_, b) in zip(_tensors(gpt2["theirs"][key]), _tensors(gpt2["ours"][key])))
    roundings = 0 if rounded_alike else 2 * zoo.GPT2_INNER
    assert _same_statistics(gpt2, forward, roundings) > 150


def test_gpt2_backward_and_optimizer_statistics_equal_msprobe_26_2s(gpt2):
    """Where this CPU computes the whole step as the reference machine did, the statistics of the backward pass
    and of AdamW's in-place updates are msprobe's too. The witness does not involve the dumper: the updated
    parameters (their max and min, from torch) are those msprobe recorded as AdamW's last update of each
    (``Tensor.addcdiv_``). A CPU whose kernels sum the gradients in another order (seen: forward and loss equal,
    backward GEMMs a rounding apart) fails the witness and cannot compare these values one for one."""
    recorded = {(v["output"][0]["Max"], v["output"][0]["Min"]) for k, v in gpt2["theirs"].items()
                if k.startswith("Tensor.addcdiv_.")}
    assert recorded, "msprobe's reference holds no AdamW update"
    if gpt2["loss"] != gpt2["ref_loss"] or recorded != gpt2["updated"]:
        pytest.skip("this CPU computes the backward pass differently from the one msprobe's reference was made "
                    "on (its updated parameters differ from those msprobe recorded): backward and optimizer "
                    "statistics cannot be compared value for value; the forward ones are, by the test above")
    _, rest = _phases(gpt2)
    assert _same_statistics(gpt2, rest) > 700


def test_python_operators_are_named_as_msprobe_26_2_names_them(tmp_path):
    """``a // 2``, ``<``, ``<=``, ``!=``, ``**``, ``**=``, ``t[i] = v``, ``a[i]``, reflected and transparent operators:
    the entry keys (forward and backward, in order) msprobe 26.2.0 writes for the same step."""
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).parent / "data" / "operator_names_msprobe_26_2"
    ref = json.loads((here / "reference.json").read_text())
    dump = tmp_path / "dump"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    res = subprocess.run([sys.executable, str(here / "ops.py"), "ours", str(dump)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    ours = list(json.loads((dump / "step0" / "rank" / "dump.json").read_text())["data"])
    assert ours == ref["keys"]
