"""The compiled float texts of the statistics compare against ``repr`` itself: random bit patterns (every
exponent, subnormals, NaN payloads), the values statistics take (float32 and bfloat16 values widened, small
integers, powers of two and ten and their neighbours, where the rounding interval is uneven or the notation
changes), and whole CSV lines against the csv module."""
from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from pytest_msprobe.runs_compare.floattext import FLOAT, PERCENT, TextTable, csv_block, float_texts


def _same_as_repr(values: np.ndarray) -> None:
    values = np.asarray(values, dtype=np.float64)
    got = float_texts(values)
    want = [repr(v) for v in values.tolist()]
    bad = [(w, g) for g, w in zip(got, want) if g != w]
    assert not bad, bad[:10]
    assert len(got) == len(want)


def test_random_bit_patterns():
    rng = np.random.default_rng(20260)
    _same_as_repr(rng.integers(0, 2 ** 64, 300_000, dtype=np.uint64).view(np.float64))
    _same_as_repr(rng.integers(1, 2 ** 52, 50_000, dtype=np.uint64).view(np.float64))     # subnormals


def test_values_statistics_take():
    rng = np.random.default_rng(7)
    _same_as_repr(rng.standard_normal(100_000).astype(np.float32))
    _same_as_repr(rng.standard_normal(50_000).astype(np.float16))
    _same_as_repr(rng.uniform(-4, 4, 100_000) * 1.001)
    _same_as_repr(np.arange(-3000, 3000) * 1.0)
    _same_as_repr(rng.integers(0, 2 ** 53, 50_000).astype(np.float64) * 10.0 ** rng.integers(-25, 25, 50_000))


def test_notation_edges_and_uneven_intervals():
    pow2 = np.array([2.0 ** e for e in range(-1074, 1024)])
    pow10 = np.array([10.0 ** e for e in range(-323, 309)])
    for base in (pow2, pow10):
        _same_as_repr(np.concatenate([base, -base, np.nextafter(base, 0), np.nextafter(base, np.inf),
                                      base * 1.5]))
    _same_as_repr([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1.7976931348623157e308, 2.2250738585072014e-308,
                   1e16, 1e15, 9999999999999998.0, 1e-4, 1e-5, 0.1, 0.2, 0.3, 1 / 3, 123456789012345678.0, 1e22,
                   1e23, 39.99999999999999, 1e100, 1.5e-100])


def test_empty():
    assert float_texts(np.zeros(0)) == []


@pytest.mark.parametrize("texts", [["Functional.linear.0.forward.input.0", "a,b", 'say "x"', "ünïcode"]])
def test_csv_block_equals_the_csv_module(texts):
    table = TextTable()
    quoted = [t if not any(c in t for c in ',"\n\r') else '"' + t.replace('"', '""') + '"' for t in texts]
    first = table.extend(quoted)
    ids = np.array([[first + j, FLOAT, PERCENT, first + 3] for j in range(len(texts))])
    values = np.array([[0.0, 0.1 * j, -1e-7 * j, 0.0] for j in range(len(texts))])
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for j, text in enumerate(texts):
        writer.writerow([text, repr(0.1 * j), repr(-1e-7 * j) + "%", texts[3]])
    assert csv_block(ids, values, table).decode() == buf.getvalue()
