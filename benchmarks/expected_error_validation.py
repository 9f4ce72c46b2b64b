"""Validation of the expected-error model against correct implementations (prints a table, asserts nothing).

Usage: python benchmarks/expected_error_validation.py [--quick] [--trials 3] [--seed 0]

For each op family (GEMM, conv2d, sum/mean/norm, softmax, layer_norm/rms_norm), dtype (bf16, fp16, fp32)
and reduction length n in 16..65536, correct implementations run on random inputs:

- ``native``: torch's CPU kernel in the dtype, one thread;
- ``threads``: the same kernel with two threads (another split of the reductions);
- ``fp32-acc``: the inputs raised to float32, the call in float32, the result rounded once to the dtype
  (fp32 calls: raised to float64 and rounded to float32);
- ``half-ulp``: the native kernel on inputs moved by up to half an ulp (``input_rel_error = u``).

Each is held against the float64 result of the same (unmoved) inputs. Coverage: the share of outputs whose
max-abs error is at most the estimate's ``max_abs``. Tightness: estimate / observed max-abs error, median and
99th percentile (outputs that are exact are left out of the ratio). ``within``: the share whose multiple
(max-abs and mean-abs together) classifies as within rounding. Inputs: normal (zero mean) and uniform [0, 1)
(same-sign sums) for the reductions and GEMMs.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from collections import defaultdict

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from pytest_msprobe.precision import expected_error as ee  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
LENGTHS = (16, 64, 256, 1024, 4096, 16384, 65536)
QUICK_LENGTHS = (16, 256, 2048)
VARIANTS = ("native", "threads", "fp32-acc", "half-ulp")


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).numpy() if t.dtype != torch.float64 else t.detach().numpy()


def _shift(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Each element moved by up to half an ulp of its dtype (the moved value, rounded, stays in the dtype
    where it can; what matters is the exact input the kernel sees)."""
    u = ee.unit_roundoff(t.dtype)
    wiggle = (torch.rand(t.shape, generator=gen, dtype=torch.float64) * 2 - 1) * u
    moved = t.to(torch.float64) * (1 + wiggle)
    return moved.to(t.dtype) if t.dtype == torch.float32 else moved.to(torch.float32).to(t.dtype)


def _cases(n: int, gen: torch.Generator, positive: bool):
    """(family label, api, call, inputs, kwargs) for a reduction length n."""
    def rnd(*shape):
        x = torch.rand(*shape, generator=gen, dtype=torch.float64) if positive else \
            torch.randn(*shape, generator=gen, dtype=torch.float64)
        return x
    rows = max(4, min(64, 65536 // n))
    cols = max(4, min(32, 65536 // n))
    yield "gemm", "matmul", lambda a, b: a @ b, [rnd(rows, n), rnd(n, cols)], {}
    if not positive:
        c = max(1, n // 9)
        yield "conv2d", "conv2d", lambda x, w: F.conv2d(x, w), [rnd(1, c, 6, 6), rnd(8, c, 3, 3)], {}
        yield "softmax", "softmax", lambda x: torch.softmax(x, dim=-1), [3 * rnd(rows, n)], {"dim": -1}
        w, b = rnd(n), rnd(n)
        yield "layer_norm", "layer_norm", lambda x, w, b: F.layer_norm(x, (n,), w, b), [rnd(rows, n) + 1, w, b], \
            {"normalized_shape": (n,)}
        if hasattr(F, "rms_norm"):
            yield "rms_norm", "rms_norm", lambda x, w: F.rms_norm(x, (n,), w), [rnd(rows, n), w], \
                {"normalized_shape": (n,)}
    yield "sum", "sum", lambda x: x.sum(dim=-1), [rnd(rows, n)], {"dim": -1}
    yield "mean", "mean", lambda x: x.mean(dim=-1), [rnd(rows, n)], {"dim": -1}
    yield "norm", "vector_norm", lambda x: torch.linalg.vector_norm(x, dim=-1), [rnd(rows, n)], {"dim": -1}


def _run(variant: str, call, inputs: list, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    if variant == "fp32-acc":
        wide = torch.float64 if dtype == torch.float32 else torch.float32
        return call(*[x.to(wide) for x in inputs]).to(dtype)
    if variant == "half-ulp":
        inputs = [_shift(x, gen) for x in inputs]
    torch.set_num_threads(2 if variant == "threads" else 1)
    try:
        return call(*inputs)
    finally:
        torch.set_num_threads(1)


def validate(lengths=LENGTHS, trials: int = 2, seed: int = 0, dtypes=tuple(DTYPES)) -> list:
    """One record per (family, dtype, n, variant, trial, data): observed and expected figures."""
    gen = torch.Generator().manual_seed(seed)
    records = []
    for n in lengths:
        for _trial in range(trials):
            for positive in (False, True):
                for fam, api, call, raw, kwargs in _cases(n, gen, positive):
                    for dname in dtypes:
                        dtype = DTYPES[dname]
                        inputs = [x.to(dtype) for x in raw]
                        ref = call(*[x.to(torch.float64) for x in inputs])
                        for variant in VARIANTS:
                            if variant == "fp32-acc" and dtype == torch.float32:
                                continue                    # float32 accumulation is the native kernel
                            try:
                                out = _run(variant, call, inputs, dtype, gen)
                            except RuntimeError as exc:     # a kernel this build lacks for the dtype
                                records.append((fam, dname, n, variant, None, None, str(exc).splitlines()[0]))
                                continue
                            observed = ee.observe(_np(out), _np(ref))
                            expected = ee.expected_error(
                                api, dtype, [_np(x) for x in inputs], _np(out), kwargs=kwargs,
                                input_rel_error=ee.unit_roundoff(dtype) if variant == "half-ulp" else 0.0)
                            records.append((fam, dname, n, variant, observed, expected, ""))
    return records


def summarise(records: list) -> list:
    """Rows (family, dtype, cases, coverage %, median ratio, p99 ratio, within %, skipped)."""
    groups: dict = defaultdict(list)
    for fam, dname, _n, _variant, observed, expected, why in records:
        groups[(fam, dname)].append((observed, expected, why))
    rows = []
    for (fam, dname), items in sorted(groups.items()):
        done = [(o, e) for o, e, why in items if o is not None]
        covered = sum(o.max_abs <= e.max_abs for o, e in done)
        ratios = np.array([e.max_abs / o.max_abs for o, e in done if o.max_abs > 0])
        within = sum(ee.classify(ee.multiple(o, e)) != ee.BEYOND_ROUNDING for o, e in done)
        rows.append((fam, dname, len(done), 100.0 * covered / max(1, len(done)),
                     float(np.median(ratios)) if ratios.size else math.nan,
                     float(np.percentile(ratios, 99)) if ratios.size else math.nan,
                     100.0 * within / max(1, len(done)), len(items) - len(done)))
    return rows


def norm_bias_accumulation(rows=(64, 256, 1024, 4096)) -> list:
    """(rows, torch's relative error, float32-accumulate-then-round's) of a bf16 layer_norm bias gradient
    whose output gradients are all positive: torch's CPU kernel sums the rows in bf16 itself."""
    gen = torch.Generator().manual_seed(0)
    out = []
    for n in rows:
        x = torch.randn(n, 64, generator=gen).bfloat16()
        w, b = torch.randn(64, generator=gen).bfloat16(), torch.randn(64, generator=gen).bfloat16()
        g = ((torch.rand(n, 64, generator=gen) + 0.5) * 1e-3).bfloat16()
        xx, ww, bb = (t.clone().requires_grad_() for t in (x, w, b))
        F.layer_norm(xx, (64,), ww, bb).backward(g)
        exact = g.double().sum(0)
        rel = ((bb.grad.double() - exact).abs() / exact.abs()).max().item()
        once = ((g.float().sum(0).bfloat16().double() - exact).abs() / exact.abs()).max().item()
        out.append((n, rel, once))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="lengths 16, 256, 2048 only")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    records = validate(QUICK_LENGTHS if args.quick else LENGTHS, args.trials, args.seed)
    print(f"torch {torch.__version__}, lengths {QUICK_LENGTHS if args.quick else LENGTHS}, "
          f"{args.trials} trials, variants {', '.join(VARIANTS)}")
    print("| family | dtype | outputs | coverage | tightness median | tightness p99 | within rounding | skipped |")
    print("|---|---|---|---|---|---|---|---|")
    for fam, dname, count, cov, med, p99, within, skipped in summarise(records):
        print(f"| {fam} | {dname} | {count} | {cov:.1f}% | {med:.2f}x | {p99:.2f}x | {within:.1f}% | {skipped} |")
    loose = sorted((r for r in records if r[4] is not None and r[4].max_abs > 0),
                   key=lambda r: -r[5].max_abs / r[4].max_abs)[:int(os.environ.get("SHOW_LOOSE", "0"))]
    for fam, dname, n, variant, o, e, _ in loose:
        print(f"  loose: {fam} {dname} n={n} {variant}: observed {o.max_abs:.3e} mean {o.mean_abs:.3e}, "
              f"estimate {e.max_abs:.3e} ({e.max_abs / o.max_abs:.1f}x) scale {e.scale:.3e} {e.basis}")
    worst = sorted((r for r in records if r[4] is not None and r[4].max_abs > r[5].max_abs),
                   key=lambda r: -r[4].max_abs / r[5].max_abs)[:10]
    for fam, dname, n, variant, o, e, _ in worst:
        print(f"  not covered: {fam} {dname} n={n} {variant}: observed {o.max_abs:.3e}, "
              f"estimate {e.max_abs:.3e} ({o.max_abs / e.max_abs:.2f}x)")
    print("bf16 layer_norm bias gradient, positive output gradients (max relative error):")
    for n, rel, once in norm_bias_accumulation():
        print(f"  {n} rows: torch {100 * rel:.2f}%, float32 accumulation rounded once {100 * once:.2f}%")


if __name__ == "__main__":
    main()
