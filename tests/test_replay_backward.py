"""Backward on the replay: autograd's engine is called directly when the gradient plainly fits the output."""
from __future__ import annotations

import os
import shutil
import textwrap

import pytest
import torch

from pytest_msprobe.replay.torch_adapter import run_backward

pytest_plugins = ["pytester"]

HERE = os.path.dirname(os.path.abspath(__file__))
GPT2 = os.path.join(HERE, "data", "msprobe_26_2_bf16", "gpt2", "dump.json")


def _grads(fn, backward, *shapes, dtype=torch.float32):
    gen = torch.Generator().manual_seed(7)
    xs = [torch.randn(s, generator=gen, dtype=dtype).requires_grad_(True) for s in shapes]
    out = fn(*xs)
    grad = torch.randn(out.shape, generator=gen, dtype=out.dtype)
    backward(out, grad)
    return [x.grad for x in xs]


@pytest.mark.parametrize("fn, shapes, dtype", [
    (lambda a, b: a @ b, [(5, 3), (3, 4)], torch.float32),
    (lambda a, b: (a * b).sum(1), [(6, 2), (6, 2)], torch.bfloat16),
    (lambda a: torch.nn.functional.softmax(a, -1), [(3, 9)], torch.float64),
    (lambda a: a.reshape(-1)[:5] * 2, [(4, 3)], torch.float16),
    (lambda a: torch.view_as_complex(a) * 2j, [(4, 2)], torch.float32),
])
def test_same_gradients_as_tensor_backward(fn, shapes, dtype):
    direct = _grads(fn, run_backward, *shapes, dtype=dtype)
    public = _grads(fn, lambda out, grad: out.backward(grad), *shapes, dtype=dtype)
    for a, b in zip(direct, public):
        assert a.dtype == b.dtype and torch.equal(a, b)


def test_a_gradient_that_does_not_fit_gets_autograds_error():
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        run_backward(x * 2, torch.ones(4))


def test_a_subclass_goes_through_tensor_backward():
    seen = []

    class Traced(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", str(func)))
            return super().__torch_function__(func, types, args, kwargs or {})

    x = torch.ones(3).requires_grad_(True)
    out = (x * 2).as_subclass(Traced)
    run_backward(out, torch.ones(3))
    assert "backward" in seen and torch.equal(x.grad, torch.full((3,), 2.0))


def test_replaying_backward_does_not_import_sympy(pytester):
    """A replay with backward must not pay for torch.fx's symbolic shapes (sympy): the check fails if it does."""
    pytester.makeconftest(textwrap.dedent("""
        import sys

        def pytest_unconfigure(config):
            with open("modules.txt", "w") as fh:
                fh.write("\\n".join(sorted(sys.modules)))
    """))
    shutil.copytree(os.path.dirname(GPT2), pytester.path / "gpt2")
    res = pytester.runpytest_subprocess("--msprobe-api-info=gpt2/dump.json", "-p", "no:randomly", "-q",
                                        "-k", "linear or matmul or softmax")
    assert res.ret in (0, 1), res.stdout.str()
    res.stdout.re_match_lines([r".*\d+ passed.*"])
    modules = (pytester.path / "modules.txt").read_text().split()
    assert "torch.fx.experimental.symbolic_shapes" not in modules
    assert "sympy" not in modules


def test_long_lived_objects_are_frozen_during_the_run_and_thawed_after(pytester):
    """During the run the collector skips the long-lived objects; a process that goes on gets them back."""
    import gc

    pytester.makeconftest(textwrap.dedent("""
        import gc

        def pytest_runtest_teardown(item):
            with open("frozen.txt", "a") as fh:
                fh.write(f"{gc.get_freeze_count()}\\n")
    """))
    shutil.copytree(os.path.dirname(GPT2), pytester.path / "gpt2")
    before = gc.get_freeze_count()
    rec = pytester.inline_run("--msprobe-api-info=gpt2/dump.json", "-p", "no:randomly", "-k", "linear")
    assert rec.ret == 0
    counts = [int(x) for x in (pytester.path / "frozen.txt").read_text().split()]
    assert counts and min(counts) > before + 10_000      # torch's objects and the run's
    assert gc.get_freeze_count() == before
