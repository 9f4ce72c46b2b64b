"""Real-data mode: inputs decoded from msprobe's tensor files reproduce the dumped outputs."""
from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest
import torch

from generators.inputs import InputError, build_inputs, resolve_api
from generators.loader import load_dump
from generators.tensorfile import TensorFileError, load_tensor_file

DATA = pathlib.Path(__file__).parent / "data"
STEP0 = ("mlp_fp32_tensor_L1", "step0")


@pytest.fixture(scope="module")
def tensor_cases():
    return load_dump(DATA.joinpath(*STEP0)).by_name()


def _file(case, name):
    return torch.load(f"{case.tensor_dir}/{name}", weights_only=True)


def test_real_inputs_are_the_dumped_tensors(tensor_cases):
    case = tensor_cases["Functional.linear.0"]
    inputs = build_inputs(case)
    assert inputs.mode == "real" and inputs.seed is None
    for i, tensor in enumerate(inputs.args):
        assert torch.equal(tensor, _file(case, f"Functional.linear.0.forward.input.{i}.pt"))
    assert torch.equal(inputs.grad_output, _file(case, "Functional.linear.0.backward.input.0.pt"))
    item = case.forward["input_args"][0]
    assert inputs.args[0].max().item() == pytest.approx(item["Max"])
    assert "real data" in inputs.summary and "args[0]: float32[8, 16]" in inputs.summary


def forward_error_bound(fn, args: tuple, kwargs: dict, roundings: int) -> tuple:
    """(float64 reference, bound) for a float32 evaluation of ``fn``: first-order forward error analysis.

    An evaluation whose every rounding perturbs a value by at most u = 2**-24 (relative) is, to first order,
    within ``roundings * u * (|f(x)| + sum_i |df/dx_i| |x_i|)`` of the exact f(x), ``roundings`` being the
    roundings on the longest path of the computation (a dot product of K terms: K; a transcendental function
    counted at 4, the ulps libm and SLEEF guarantee). The Jacobian comes from float64 autograd, so the bound
    depends on the computation and its inputs only, never on the CPU (its vector width, its summation order).
    """
    from torch.autograd.functional import jacobian

    floats = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()]

    def f(*values):
        call = list(args)
        for (i, _), v in zip(floats, values):
            call[i] = v
        return fn(*call, **kwargs)

    xs = tuple(a.double() for _, a in floats)
    ref = f(*xs)
    jac = jacobian(f, xs)
    cond = sum((j.abs() * x.abs()).reshape(ref.numel(), -1).sum(1) for j, x in zip(jac, xs)).reshape(ref.shape)
    u, tiny = 2.0 ** -24, 2.0 ** -126                     # float32 unit roundoff, smallest normal
    return ref, roundings * u * (ref.abs() + cond) + roundings * tiny


# roundings on the longest path of each computation (see forward_error_bound), from its sizes
ROUNDINGS = {
    "Functional.linear.0": lambda x: x.shape[-1] + 1,                 # K products summed, plus the bias
    "Torch.relu.0": lambda x: 0,                                      # exact
    "Tensor.__mul__.0": lambda x: 1,                                  # one correctly rounded product
    "Functional.gelu.0": lambda x: 4 + 4,                             # x/sqrt(2), erf (4 ulps), 1 + erf, x * ...
    "Tensor.softmax.0": lambda x: x.shape[-1] + 4 + 4,                # max, exp (4 ulps), sum of n, divide
    "Functional.layer_norm.0": lambda x: 2 * x.shape[-1] + 4 + 4,     # mean and variance of n, rsqrt, affine
    "Functional.cross_entropy.0": lambda x: x.shape[-1] + x.shape[0] + 4 + 4 + 4,   # logsumexp, mean over batch
}


@pytest.mark.parametrize("name", ["Functional.linear.0", "Torch.relu.0", "Functional.gelu.0", "Tensor.__mul__.0",
                                  "Tensor.softmax.0", "Functional.layer_norm.0", "Functional.cross_entropy.0"])
def test_replaying_real_inputs_reproduces_the_dumped_output(tensor_cases, name):
    """Replayed here, dumped on msprobe's machine: both float32 evaluations lie within the forward error bound
    of the computation around the float64 value, so they differ by at most twice that bound."""
    case = tensor_cases[name]
    inputs = build_inputs(case)
    fn = resolve_api(case)
    out = fn(*inputs.args, **inputs.kwargs)
    expected = _file(case, f"{name}.forward.output.0.pt")
    assert out.dtype == expected.dtype and out.shape == expected.shape
    ref, bound = forward_error_bound(fn, inputs.args, inputs.kwargs, ROUNDINGS[name](inputs.args[0]))
    assert torch.all((out.double() - expected.double()).abs() <= 2 * bound), (out - expected).abs().max()
    for value in (out, expected):
        assert torch.all((value.double() - ref).abs() <= bound)


def test_non_tensor_args_decoded(tensor_cases):
    inputs = build_inputs(tensor_cases["Functional.layer_norm.0"])
    assert inputs.args[1] == [32]              # normalized_shape recorded as a list of ints
    assert isinstance(inputs.args[4], float)   # eps


def test_random_flag_forces_random_mode_for_tensor_dumps(tensor_cases):
    case = tensor_cases["Functional.linear.0"]
    inputs = build_inputs(case, random=True, seed=7)
    assert inputs.mode == "random" and inputs.seed == 7
    assert not torch.equal(inputs.args[0], _file(case, "Functional.linear.0.forward.input.0.pt"))
    assert inputs.args[0].min().item() == pytest.approx(case.forward["input_args"][0]["Min"])


def test_missing_file_and_missing_tensor_dir(data_dir, tmp_path):
    shutil.copytree(data_dir.joinpath(*STEP0), tmp_path / "step0")
    tensors = tmp_path / "step0" / "rank" / "dump_tensor_data"
    (tensors / "Torch.relu.0.forward.input.0.pt").unlink()
    by = load_dump(tmp_path).by_name()
    with pytest.raises(InputError, match=r"Torch.relu.0.forward.input.0.pt is missing.*--msprobe-random"):
        build_inputs(by["Torch.relu.0"])
    assert build_inputs(by["Torch.relu.0"], random=True).mode == "random"
    shutil.rmtree(tensors)
    by = load_dump(tmp_path).by_name()
    with pytest.raises(InputError, match="tensor files not found"):
        build_inputs(by["Functional.linear.0"])


def test_shape_or_dtype_mismatch_refused(data_dir, tmp_path):
    shutil.copytree(data_dir.joinpath(*STEP0), tmp_path / "step0")
    tensors = tmp_path / "step0" / "rank" / "dump_tensor_data"
    torch.save(torch.zeros(3, 3), tensors / "Torch.relu.0.forward.input.0.pt")
    torch.save(torch.zeros(8, 32, dtype=torch.float64), tensors / "Functional.gelu.0.forward.input.0.pt")
    by = load_dump(tmp_path).by_name()
    with pytest.raises(InputError, match=r"shape \[3, 3\] but dump.json records \[8, 32\]"):
        build_inputs(by["Torch.relu.0"])
    with pytest.raises(InputError, match="holds torch.float64"):
        build_inputs(by["Functional.gelu.0"])


def test_npy_files_load_and_bf16_is_restored(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(6, dtype=np.float32).reshape(2, 3))
    item = {"type": "mindspore.Tensor", "dtype": "BFloat16", "shape": [2, 3], "data_name": "x.npy"}
    tensor = load_tensor_file(str(tmp_path), item, max_bytes=1 << 20)
    assert tensor.dtype == torch.bfloat16 and tensor[1, 2].item() == 5.0
    (tmp_path / "y.bin").write_bytes(b"abc")
    with pytest.raises(TensorFileError, match="is not a pt or numpy file"):
        load_tensor_file(str(tmp_path), {**item, "data_name": "y.bin"}, max_bytes=1 << 20)
    np.savez(tmp_path / "z.npz", a=np.zeros(2))
    shutil.copy(tmp_path / "z.npz", tmp_path / "z.npy")
    with pytest.raises(TensorFileError, match="archive"):
        load_tensor_file(str(tmp_path), {**item, "data_name": "z.npy"}, max_bytes=1 << 20)


def test_file_over_budget_refused_before_loading(tmp_path):
    torch.save(torch.zeros(1000), tmp_path / "big.pt")
    item = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [1000], "data_name": "big.pt"}
    with pytest.raises(TensorFileError, match="over the budget of 100 bytes"):
        load_tensor_file(str(tmp_path), item, max_bytes=100)


def test_real_statistics_match_dump_json(tensor_cases):
    """Every real tensor agrees with its recorded Max/Min (the files belong to the entries)."""
    for case in tensor_cases.values():
        inputs = build_inputs(case)
        items = [i for i in case.forward["input_args"] if isinstance(i, dict) and "data_name" in i]
        tensors = [a for a in inputs.args if isinstance(a, torch.Tensor)]
        for item, tensor in zip(items, tensors):
            if tensor.is_floating_point():
                assert tensor.max().item() == pytest.approx(item["Max"], rel=1e-6)
                assert tensor.min().item() == pytest.approx(item["Min"], rel=1e-6)


def test_old_datapath_key_is_reduced_to_a_file_name_inside_the_dump(data_dir, tmp_path):
    """msprobe 1.0.x wrote an absolute ``datapath``; only its file name is used, inside dump_tensor_data."""
    shutil.copytree(data_dir.joinpath(*STEP0), tmp_path / "step0")
    dump = tmp_path / "step0" / "rank" / "dump.json"
    doc = json.loads(dump.read_text())
    for entry in doc["data"].values():
        for part in ("input_args", "input", "output"):
            for item in entry.get(part) or []:
                if isinstance(item, dict) and "data_name" in item:
                    item["datapath"] = "/home/someone/dump/step0/rank/dump_tensor_data/" + item.pop("data_name")
    dump.write_text(json.dumps(doc))
    case = load_dump(dump).by_name()["Torch.relu.0"]
    assert case.has_tensor_files
    inputs = build_inputs(case)
    assert inputs.mode == "real"
    assert torch.equal(inputs.args[0], _file(case, "Torch.relu.0.forward.input.0.pt"))
