"""Recorded outputs of a call (forward outputs, input gradients of its backward entry) as untrusted input."""
from __future__ import annotations

import json
import os
import pathlib
import shutil

import numpy as np
import pytest
import torch

from dumpers import format as fmt
from generators.inputs import build_inputs, resolve_api
from generators.loader import load_dump
from generators.recorded import (
    NotRecorded,
    RecordedError,
    has_recorded_files,
    load_recorded,
    match_gradients,
    recorded_problem,
    required_bytes,
)
from pytest_msprobe.precision.fidelity import CLOSE, DIFFERS, EXACT, compare_values

DATA = pathlib.Path(__file__).parent / "data"
STEP0 = ("mlp_fp32_tensor_L1", "step0")


class WritesAFile:
    """Unpickling this creates a file: the stand-in for code execution from a tensor file."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture
def dump(tmp_path):
    """A writable copy of msprobe's fp32 MLP tensor dump (step 0); returns its tensor directory."""
    shutil.copytree(DATA.joinpath(*STEP0), tmp_path / "step0")
    return tmp_path / "step0" / "rank" / fmt.TENSOR_DIR


def _cases(tensors):
    return load_dump(tensors.parent / fmt.DUMP_JSON).by_name()


def _file(tensors, name):
    return torch.load(tensors / name, weights_only=True)


def _replay(case):
    """The call re-run on the CPU from its recorded inputs, in the dumped dtype.

    Returns (forward output, gradients of the positional tensors, the input gradients of the output's autograd
    node: what the dumper records in the backward entry).
    """
    inputs = build_inputs(case)
    args = [a.detach().clone().requires_grad_(True) if isinstance(a, torch.Tensor) and a.is_floating_point()
            and (case.forward["input_args"][i] or {}).get("requires_grad") else a
            for i, a in enumerate(inputs.args)]
    out = resolve_api(case)(*args, **inputs.kwargs)
    grads, node = [], []
    if case.backward is not None and inputs.grad_output is not None:
        out.grad_fn.register_hook(lambda grad_inputs, grad_outputs: node.extend(grad_inputs))
        out.backward(inputs.grad_output)
        grads = [a.grad for a in args if isinstance(a, torch.Tensor)]
    return out.detach(), grads, node


# --- loading ------------------------------------------------------------------------------------------------
def test_forward_outputs_and_input_gradients_are_the_dumped_files(dump):
    cases = _cases(dump)
    rec = load_recorded(cases["Functional.gelu.0"])
    assert torch.equal(rec.forward[0], _file(dump, "Functional.gelu.0.forward.output.0.pt"))
    assert torch.equal(rec.backward[0], _file(dump, "Functional.gelu.0.backward.output.0.pt"))
    assert rec.has_backward and rec.problems() == {}
    # linear's backward entry lists the autograd node's input gradients: bias, (input: null), weight.T
    rec = load_recorded(cases["Functional.linear.0"])
    assert [None if g is None else tuple(g.shape) for g in rec.backward] == [(32,), None, (16, 32)]
    # forward only, when asked
    rec = load_recorded(cases["Functional.gelu.0"], directions=("forward",))
    assert rec.backward == [] and len(rec.forward) == 1


def test_every_call_of_the_sample_has_its_outputs(dump):
    for name, case in _cases(dump).items():
        rec = load_recorded(case)
        assert rec.problems() == {}, name
        assert all(isinstance(t, torch.Tensor) for t in rec.forward), name


def test_replay_on_this_cpu_reproduces_the_recorded_outputs(dump):
    """The sample was dumped on a CPU: every forward output replays faithfully, except that a GEMM may sum in
    another order; its difference then stays within the bound of two float32 dot products of length K,
    2 * K * eps * (|x| @ |w|.T) (the classical dot-product error bound)."""
    for name, case in _cases(dump).items():
        if name.startswith("Tensor.add_"):
            continue                      # in-place: see test_in_place_output_is_the_value_after_the_call
        out, _, _ = _replay(case)
        recorded = load_recorded(case).forward[0]
        fid = compare_values(out, recorded)
        if name.startswith("Functional.linear") and not fid.faithful:
            x, w = build_inputs(case).args[:2]
            bound = 2 * x.shape[-1] * torch.finfo(torch.float32).eps * (x.abs() @ w.abs().T)
            assert ((out - recorded).abs() <= bound).all(), (name, fid.text)
        else:
            assert fid.faithful, (name, fid.text)


def test_recorded_gradients_are_those_of_the_last_autograd_node(dump):
    """linear records (bias, input, weight.T); cross_entropy the gradient of its inner log_softmax step."""
    cases = _cases(dump)
    _, grads, node = _replay(cases["Functional.linear.1"])
    rec = load_recorded(cases["Functional.linear.1"])
    mapping = match_gradients(grads, node)
    assert mapping == [(1, False), (2, True), (0, False)]
    for (k, transposed), grad in zip(mapping, grads):
        recorded = rec.backward[k].t() if transposed else rec.backward[k]
        assert compare_values(grad, recorded).faithful or (grad - recorded).abs().max() < 1e-6
    _, grads, node = _replay(cases["Functional.cross_entropy.0"])
    assert match_gradients(grads, node) == [None, None]     # input: inner step; target: no gradient
    _, grads, node = _replay(cases["Functional.layer_norm.0"])
    assert match_gradients(grads, node) == [(0, False), (1, False), (2, False)]
    _, grads, node = _replay(cases["Tensor.__add__.0"])      # equal gradients: by position
    assert match_gradients(grads, node) == [(0, False), (1, False)]


def test_in_place_output_is_the_value_after_the_call(dump):
    case = _cases(dump)["Tensor.add_.0"]
    inputs = build_inputs(case)
    before = inputs.args[0].clone()
    after = inputs.args[0].add_(inputs.args[1], alpha=inputs.kwargs["alpha"])
    recorded = load_recorded(case).forward[0]
    assert compare_values(after, recorded).faithful
    assert compare_values(before, recorded).verdict == DIFFERS       # the value before the call is not it


# --- planted differences ----------------------------------------------------------------------------------
def test_planted_forward_difference_is_found_with_its_figures(dump):
    name = "Functional.gelu.0.forward.output.0.pt"
    torch.save(_file(dump, name) * 1.005, dump / name)
    case = _cases(dump)["Functional.gelu.0"]
    out, _, _ = _replay(case)
    fid = compare_values(out, load_recorded(case).forward[0])
    assert fid.verdict == DIFFERS and fid.max_ulp > 1000 and fid.fraction > 0.5
    assert fid.text.startswith("differs: max abs diff ") and " ulp, " in fid.text and "% of elements" in fid.text
    relu, _, _ = _replay(_cases(dump)["Torch.relu.0"])               # the neighbour is untouched
    assert compare_values(relu, load_recorded(_cases(dump)["Torch.relu.0"]).forward[0]).faithful


def test_planted_backward_difference_is_found(dump):
    name = "Functional.gelu.0.backward.output.0.pt"
    grad = _file(dump, name)
    grad[0, 0] = grad[0, 0] + 1.0
    torch.save(grad, dump / name)
    case = _cases(dump)["Functional.gelu.0"]
    out, grads, _ = _replay(case)
    rec = load_recorded(case)
    assert compare_values(out, rec.forward[0]).faithful
    fid = compare_values(grads[0], rec.backward[0])
    assert fid.verdict == DIFFERS and fid.max_abs == pytest.approx(1.0, rel=1e-3)
    assert fid.fraction == pytest.approx(1 / grad.numel())


def test_planted_in_place_difference_is_found(dump):
    name = "Tensor.add_.3.forward.output.0.pt"
    value = _file(dump, name)
    torch.save(torch.nextafter(value, value + 1), dump / name)      # one ULP up everywhere: still close
    case = _cases(dump)["Tensor.add_.3"]
    inputs = build_inputs(case)
    after = inputs.args[0].add_(inputs.args[1], alpha=inputs.kwargs["alpha"])
    fid = compare_values(after, load_recorded(case).forward[0])
    assert fid.verdict == CLOSE and fid.max_ulp == 1
    torch.save(value + 1e-3, dump / name)
    fid = compare_values(after, load_recorded(_cases(dump)["Tensor.add_.3"]).forward[0])
    assert fid.verdict == DIFFERS


def _our_dump(tmp_path, fn, *tensors):
    """A tensor dump, made with our PrecisionDebugger, of one call of ``fn``; returns its dump.json."""
    from dumpers.torch_dump.debugger import PrecisionDebugger
    PrecisionDebugger.reset()
    dbg = PrecisionDebugger(task="tensor", dump_path=str(tmp_path / "ours"), level="L1")
    try:
        dbg.start()
        fn(*tensors)
        dbg.stop()
        dbg.step()
    finally:
        PrecisionDebugger.reset()
    return tmp_path / "ours" / "step0" / "rank" / fmt.DUMP_JSON


def test_multi_output_call_each_output_judged(tmp_path):
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(3))
    dump_json = _our_dump(tmp_path, lambda t: torch.max(t, dim=1), x)
    case = load_dump(dump_json).by_name()["Torch.max.0"]
    rec = load_recorded(case)
    assert len(rec.forward) == 2 and rec.forward[1].dtype == torch.int64
    values, indices = torch.max(build_inputs(case).args[0], dim=1)
    assert compare_values((values, indices), tuple(rec.forward)).verdict == EXACT
    # plant: one index off
    tensors = pathlib.Path(case.tensor_dir)
    wrong = rec.forward[1].clone()
    wrong[2] = (wrong[2] + 1) % 5
    torch.save(wrong, tensors / case.forward["output"][1]["data_name"])
    rec = load_recorded(load_dump(dump_json).by_name()["Torch.max.0"])
    assert compare_values(values, rec.forward[0]).verdict == EXACT
    fid = compare_values(indices, rec.forward[1])
    assert fid.verdict == DIFFERS and fid.text.endswith(f"{100 / 6:.3g}% of elements")
    assert compare_values((values, indices), tuple(rec.forward)).text.startswith("differs: [1] ")


# --- missing and hostile files -----------------------------------------------------------------------------
def test_missing_file_is_a_reason_in_its_place(dump):
    (dump / "Functional.gelu.0.forward.output.0.pt").unlink()
    case = _cases(dump)["Functional.gelu.0"]
    rec = load_recorded(case)
    assert isinstance(rec.forward[0], NotRecorded) and not rec.forward[0]
    assert torch.is_tensor(rec.backward[0])                            # the other file still loads
    assert list(rec.problems()) == ["forward.output.0"]
    assert "Functional.gelu.0.forward.output.0.pt is missing" in rec.problems()["forward.output.0"]
    assert "Functional.gelu.0.forward.output.0" in rec.problems()["forward.output.0"]
    assert isinstance(rec.get("backward", 5), NotRecorded)


def test_pickled_output_file_is_refused_and_runs_nothing(dump, tmp_path):
    marker = tmp_path / "pwned"
    name = "Torch.relu.0.forward.output.0.pt"
    torch.save({"x": WritesAFile(marker)}, dump / name)
    torch.load(dump / name, weights_only=False)          # the payload is real: an unsafe load runs it
    assert marker.exists()
    marker.unlink()
    rec = load_recorded(_cases(dump)["Torch.relu.0"])
    assert "was refused: it is not a plain tensor" in rec.problems()["forward.output.0"]
    assert not marker.exists()


def test_output_file_linked_outside_the_dump_is_refused(dump, tmp_path):
    outside = tmp_path / "outside.pt"
    torch.save(torch.zeros(8, 32), outside)
    name = "Torch.relu.0.backward.output.0.pt"
    (dump / name).unlink()
    os.symlink(outside, dump / name)
    rec = load_recorded(_cases(dump)["Torch.relu.0"])
    assert torch.is_tensor(rec.forward[0])
    assert "outside the tensor directory" in rec.problems()["backward.output.0"]


def test_output_file_of_another_shape_or_dtype_is_refused(dump):
    torch.save(torch.zeros(3, 3), dump / "Torch.relu.0.forward.output.0.pt")
    torch.save(torch.zeros(8, 32, dtype=torch.float64), dump / "Functional.gelu.0.forward.output.0.pt")
    cases = _cases(dump)
    assert "shape [3, 3] but dump.json records [8, 32]" in load_recorded(cases["Torch.relu.0"]).problems()[
        "forward.output.0"]
    assert "holds torch.float64" in load_recorded(cases["Functional.gelu.0"]).problems()["forward.output.0"]


def test_budget_checked_from_the_dump_before_reading(dump):
    case = _cases(dump)["Functional.gelu.0"]
    assert required_bytes(case) == 2 * 8 * 32 * 4
    with pytest.raises(RecordedError, match=r"need 2048 bytes, over the budget of 1000 bytes.*--msprobe-max-bytes"):
        load_recorded(case, max_bytes=1000)
    rec = load_recorded(case, max_bytes=4096, directions=("forward",))
    assert torch.is_tensor(rec.forward[0])


def test_statistics_only_and_output_less_entries(dump, tmp_path):
    stats = load_dump(DATA / "mlp_fp32_statistics_L1" / "step0").by_name()["Functional.gelu.0"]
    assert not has_recorded_files(stats)
    with pytest.raises(RecordedError, match="statistics only.*task 'tensor'"):
        load_recorded(stats)
    dump_json = dump.parent / fmt.DUMP_JSON
    doc = json.loads(dump_json.read_text())
    del doc["data"]["Torch.relu.0.forward"]["output"]
    dump_json.write_text(json.dumps(doc))
    case = _cases(dump)["Torch.relu.0"]
    assert "recorded no outputs" in recorded_problem(case)
    shutil.rmtree(dump)
    with pytest.raises(RecordedError, match="tensor files not found"):
        load_recorded(_cases(dump)["Functional.gelu.0"])


@pytest.mark.mindspore
def test_mindspore_npy_outputs_load_and_planted_change_is_found(tmp_path):
    ms = pytest.importorskip("mindspore")
    from pytest_msprobe.mindspore import PrecisionDebugger
    ms.set_context(mode=ms.PYNATIVE_MODE)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"task": "tensor", "level": "L1", "dump_path": str(tmp_path / "ms"), "tensor": {}}))
    dbg = PrecisionDebugger(str(cfg))
    x = ms.Tensor(np.random.RandomState(0).randn(4, 6).astype(np.float32))
    try:
        dbg.start()
        ms.ops.softmax(ms.ops.tanh(x), axis=-1)
        dbg.stop()
        dbg.step()
    finally:
        dbg.close()
    dump_json = tmp_path / "ms" / "step0" / "rank" / fmt.DUMP_JSON
    cases = load_dump(dump_json).by_name()
    case = cases["Functional.softmax.0"]
    rec = load_recorded(case)
    assert case.forward["output"][0]["data_name"].endswith(".npy")
    expected = ms.ops.softmax(ms.ops.tanh(x), axis=-1).asnumpy()
    assert compare_values(torch.from_numpy(expected), rec.forward[0]).faithful
    path = pathlib.Path(case.tensor_dir) / case.forward["output"][0]["data_name"]
    np.save(path, np.load(path) * np.float32(1.005))
    rec = load_recorded(load_dump(dump_json).by_name()["Functional.softmax.0"])
    assert compare_values(torch.from_numpy(expected), rec.forward[0]).verdict == DIFFERS
