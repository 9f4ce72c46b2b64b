"""Judging one intercepted op: bench run on the CPU, item checks, CSV rows and ``.npy`` files.

A :class:`Job` holds only CPU data and names, so it can be judged in the training thread or, pickled, in a
worker process; both give the same rows.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from dumpers.format import BLANK, format_cell, safe_text

from . import compare, tensors
from .output import CPU_DIR, FILE_MODE, NPU_DIR

DUMP_NEVER, DUMP_ALWAYS, DUMP_IF_FAILED = "never", "always", "if_failed"


@dataclass
class Job:
    """One compared op call; tensors are CPU copies (fp16/bf16 already up-cast to float32)."""

    index: int                  # api_index, 1-based, instance-wide
    packet: str
    overload: str
    qualname: str               # "ns::packet.overload"
    n: int                      # per-packet counter, 1-based
    rank: int
    stack: str
    args: Any
    kwargs: Any
    device_out: Any
    dump: str
    run_dir: str
    mutable: bool = False
    dropout: bool = False
    rng_state: Any = None
    run_bench: bool = True      # False when the bench result is already in bench_out / bench_error
    bench_out: Any = None
    bench_error: str | None = None

    @property
    def base(self) -> str:
        return f"{self.packet}_{self.n}"


@dataclass
class OpResult:
    """CSV rows of one op, in order, plus its console lines ``(failed, text)``."""

    index: int
    rows: list = field(default_factory=list)
    lines: list = field(default_factory=list)
    reached: bool = True
    dumped: int = 0


def run_bench(fn: Callable, job: Job) -> None:
    """Run the bench on the CPU copies (a copy of them for in-place ops) and store its result in ``job``."""
    args, kwargs = (tensors.copy_tree((job.args, job.kwargs)) if job.mutable else (job.args, job.kwargs))
    try:
        if job.rng_state is not None:
            with torch.random.fork_rng(devices=[]):
                torch.set_rng_state(job.rng_state)
                out = fn(*args, **kwargs)
        else:
            out = fn(*args, **kwargs)
        job.bench_out = tensors.upcast_tree(out)
    except Exception as exc:  # noqa: BLE001 - an op without a CPU kernel must not stop training
        first = str(exc).splitlines()[0] if str(exc) else ""
        job.bench_error = f"CPU run failed: {type(exc).__name__}: {first}"
    job.run_bench = False


def _cells(leaf: Any) -> list:
    if leaf is None:
        return [BLANK, BLANK, BLANK, BLANK, BLANK]
    st = tensors.stats(leaf)
    return [tensors.dtype_text(leaf), tensors.shape_text(leaf), *(format_cell(v) for v in st)]


def make_row(name: str, device: Any, bench: Any, check: compare.ItemCheck, stack: str) -> list:
    """One compare_result row (18 cells)."""
    d, b = _cells(device), _cells(bench)
    return [safe_text(name), safe_text(name), d[0], b[0], d[1], b[1], *d[2:], *b[2:],
            format_cell(check.cosine), format_cell(check.max_abs), format_cell(check.max_rel),
            check.verdict, stack, safe_text(check.message)]


def skip_rows(base: str, out: Any, reason: str, stack: str) -> list:
    """Rows of a skipped op: one per output item with its dtype and shape, verdict ``None``."""
    items = tensors.output_items(base, out) or [(f"{base}_output", None)]
    rows = []
    for name, leaf in items:
        meta = [BLANK, BLANK] if leaf is None else [tensors.dtype_text(leaf), tensors.shape_text(leaf)]
        rows.append([safe_text(name), safe_text(name), meta[0], BLANK, meta[1], BLANK,
                     BLANK, BLANK, BLANK, BLANK, BLANK, BLANK, BLANK, BLANK, BLANK,
                     compare.NONE, stack, safe_text(f"skipped: {reason}")])
    return rows


def _check(device: Any, bench: Any, dropout: bool) -> compare.ItemCheck:
    d_tensor, b_tensor = isinstance(device, torch.Tensor), isinstance(bench, torch.Tensor)
    if d_tensor and b_tensor:
        return compare.check_arrays(tensors.as_array(bench), tensors.as_array(device), dropout=dropout)
    if not d_tensor and not b_tensor:
        return compare.check_scalars(bench, device)
    return compare.unmatched("One side is a tensor and the other a scalar.")


def _line(job: Job, name: str, leaf: Any, check: compare.ItemCheck) -> tuple[bool, str]:
    shape = tensors.shape_text(leaf) if leaf is not None else "[]"
    if check.verdict in compare.FAILING:
        return True, (f"rank{job.rank} {name} index={job.index}, overload={job.overload}, shape={shape} "
                      f"Failed, Cosine={format_cell(check.cosine)},MaxAbsErr={format_cell(check.max_abs)}")
    return False, f"rank{job.rank} {name} index={job.index}, shape={shape} Pass"


def evaluate(job: Job, fn: Callable | None = None) -> OpResult:
    """Judge one op: input rows, bench run if still due, output checks, console lines, ``.npy`` dumps."""
    result = OpResult(job.index)
    inputs = tensors.input_items(job.base, job.args, job.kwargs)
    if job.run_bench:
        run_bench(fn, job)          # in-place ops mutate a copy, so ``inputs`` stay the pristine values
    for name, leaf in inputs:
        result.rows.append(make_row(name, leaf, leaf, compare.INPUT_CHECK, job.stack))
    device_items = tensors.output_items(job.base, job.device_out)
    bench_items = dict(tensors.output_items(job.base, job.bench_out)) if job.bench_error is None else {}
    outputs = []
    for name, leaf in device_items:
        if job.bench_error is not None:
            check = compare.ItemCheck(BLANK, BLANK, BLANK, compare.NONE, job.bench_error)
            bench = None
        elif name not in bench_items:
            check, bench = compare.unmatched("The bench output has no such item."), None
        else:
            bench = bench_items.pop(name)
            check = _check(leaf, bench, job.dropout)
        outputs.append((name, leaf, bench))
        result.rows.append(make_row(name, leaf, bench, check, job.stack))
        failed, text = _line(job, name, leaf, check)
        result.lines.append((failed, text))
        result.reached = result.reached and not failed
    for name, bench in bench_items.items():
        result.rows.append(make_row(name, None, bench, compare.unmatched("The device output has no such item."),
                                    job.stack))
        result.lines.append(_line(job, name, bench, compare.unmatched("")))
        result.reached = False
    if job.dump == DUMP_ALWAYS or (job.dump == DUMP_IF_FAILED and not result.reached):
        result.dumped = _dump(job, inputs, outputs)
    return result


def _save(path: str, leaf: Any) -> None:
    np.save(path, tensors.save_array(leaf))
    os.chmod(path, FILE_MODE)


def _dump(job: Job, inputs: list, outputs: list) -> int:
    npu_dir, cpu_dir = os.path.join(job.run_dir, NPU_DIR), os.path.join(job.run_dir, CPU_DIR)
    count = 0
    for name, leaf in inputs:
        _save(os.path.join(npu_dir, f"{name}.npy"), leaf)
        count += 1
    for name, device, bench in outputs:
        _save(os.path.join(npu_dir, f"{name}.npy"), device)
        count += 1
        if bench is not None:
            _save(os.path.join(cpu_dir, f"{name}.npy"), bench)
            count += 1
    return count


def error_result(job: Job, exc: BaseException) -> OpResult:
    """Rows for an op whose judging itself failed (the op ran normally on its device)."""
    rows = skip_rows(job.base, job.device_out, f"comparison failed: {type(exc).__name__}: {exc}", job.stack)
    return OpResult(job.index, rows=rows)
