"""Throughput of the NPU-vs-GPU compare on large synthetic details CSVs (prints figures, asserts nothing).

Usage: python benchmarks/apc_throughput.py [ROWS ...]   (default 10000 100000)
"""
from __future__ import annotations

import csv
import random
import sys
import tempfile
import time
from pathlib import Path

from pytest_msprobe.report import apc
from pytest_msprobe.report.columns import DETAILS_HEADER

# (api, dtype, filled columns) cycling through every algorithm
KINDS = (
    ("Functional.gelu", "torch.float16",
     ("小值域错误占比", "均方根误差", "相对误差最大值", "相对误差平均值", "误差均衡性")),
    ("Functional.linear", "torch.float32", ("ULP误差平均值", "ULP误差大于阈值占比")),
    ("Torch.relu", "torch.bfloat16", ("二进制一致错误率",)),
    ("Tensor.__add__", "torch.float32", ("inf/nan错误率", "相对误差错误率", "绝对误差错误率")),
    ("Functional.conv2d", "torch.float32", ("双千指标",)),
)


def write(path: Path, n_rows: int, rng: random.Random, scale: float) -> None:
    with open(path, "w", encoding="utf-8-sig", newline="") as f:
        w = csv.writer(f, lineterminator="\r\n")
        w.writerow(DETAILS_HEADER)
        for i in range(n_rows):
            api, dtype, cols = KINDS[(i // 2) % len(KINDS)]
            row = [" "] * len(DETAILS_HEADER)
            row[0] = f"{api}.{i // 2}.{'forward' if i % 2 == 0 else 'backward'}.output.0"
            row[1], row[2], row[3] = "torch.float32", dtype, "(8, 32)"
            for c in cols:
                zero = c in ("二进制一致错误率", "inf/nan错误率", "绝对误差错误率")
                value = 0.0 if zero else rng.random() * scale
                row[DETAILS_HEADER.index(c)] = "1.0" if c == "双千指标" else f"{value:.14f}"
            row[-2], row[-1] = "pass", "\nMax abs error is less than 0.001, consider as pass.\n"
            w.writerow(row)


def main(sizes: list) -> None:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for n in sizes:
            npu, gpu = d / f"npu{n}.csv", d / f"gpu{n}.csv"
            write(npu, n, rng, 1e-3)
            write(gpu, n, rng, 1e-3)
            t0 = time.perf_counter()
            a = apc.read_details(npu, "NPU")
            b = apc.read_details(gpu, "GPU")
            t1 = time.perf_counter()
            _, results = apc.compare_tables(a, b)
            t2 = time.perf_counter()
            out = apc.run_compare(npu, gpu, d / f"out{n}")
            t3 = time.perf_counter()
            print(f"{n:>8} rows ({npu.stat().st_size / 2**20:.1f} MiB each): read both {t1 - t0:6.2f} s, "
                  f"judge {t2 - t1:6.2f} s, run_compare end to end {t3 - t2:6.2f} s "
                  f"= {n / (t3 - t2):,.0f} rows/s; {len(results)} APIs, {len(out.failed)} error")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [10000, 100000])
