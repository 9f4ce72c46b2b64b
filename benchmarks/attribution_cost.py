"""Cost of attributing a step's drift: runs of the step and seconds, against the bound 2 + 2 k log2(n).

A bf16 Hugging Face Llama (random seeded weights, several hundred API calls per step) with a planted fault:
aten's CPU silu kernel made 5% too large in bfloat16 (one silu call per layer: k = layers), then the same
step without the fault. Prints the figures; asserts nothing.

Usage: python benchmarks/attribution_cost.py [LAYERS]   (default 6)
"""
from __future__ import annotations

import math
import os
import sys
import tempfile
import time
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import zoo  # noqa: E402

from pytest_msprobe.attribution import attribute  # noqa: E402


def _step(layers: int):
    torch.manual_seed(0)
    model, batch, loss_fn = zoo.llama(initializer_range=0.2, num_hidden_layers=layers)
    model = model.to(torch.bfloat16)

    def step():
        loss = loss_fn(model, batch)
        loss.backward()
        return loss
    return model, step


def _faulty_silu(x):
    y = x.float() * torch.sigmoid(x.float())
    return (y * 1.05 if x.dtype == torch.bfloat16 else y).to(x.dtype)


def _report(label: str, result, bare: float) -> None:
    n, k = result.n_candidates, len(result.culprits)
    bound = 2 + 2 * k * math.log2(max(2, n))
    print(f"{label}: {result.n_calls} calls, {n} corrected in the ideal run, {k} culprit(s) "
          f"{[r.name for r in result.culprits][:8]}")
    print(f"  runs {result.runs} (bound 2 + 2 k log2 n = {bound:.1f}, plus {k} confirmations and 1 together; "
          f"2 plain runs and the ideal run included), {result.seconds:.1f} s; "
          f"the bare step {bare * 1000:.0f} ms")
    print(f"  drift: loss {result.plain.loss:.4g}, gradients {result.plain.grad:.4g}; culprits together explain "
          f"{100 * (result.together_loss_share or 0):.1f}% of the loss drift; dominant: "
          f"{len(result.dominant)}")


def main() -> None:
    layers = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    warnings.simplefilter("ignore")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, Llama with {layers} layers, bf16")
    out = tempfile.mkdtemp(prefix="attribution_bench_")
    model, step = _step(layers)
    step()
    start = time.perf_counter()
    for _ in range(3):
        for p in model.parameters():
            p.grad = None
        step()
    bare = (time.perf_counter() - start) / 3
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("silu", _faulty_silu, "CPU")
    _report("planted silu fault", attribute(step, model=model, out_dir=out, progress=False), bare)
    del lib                             # the original kernel is back
    model, step = _step(layers)
    _report("clean step", attribute(step, model=model, out_dir=out, progress=False), bare)


if __name__ == "__main__":
    main()
