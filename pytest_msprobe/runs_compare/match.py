"""Pairing target rows with golden rows (spec compare.md section 2): exact names, or ``-fm`` fuzzy names.

Every target row appears, in target order; a golden row left over is dropped. A pair whose dtypes differ and
are not both floating is no pair: the target row stands alone (msprobe shows it unmatched).
"""
from __future__ import annotations

from collections import defaultdict

FLOAT_GROUPS = (frozenset(("Float16", "Float32", "Float64", "BFloat16")),
                frozenset(("torch.float16", "torch.float32", "torch.float64", "torch.bfloat16")))


def dtypes_pair(a: str, b: str) -> bool:
    """Whether two dtype strings may be compared (equal, or both floating of one framework's spelling)."""
    return a == b or any(a in group and b in group for group in FLOAT_GROUPS)


def exact(target: list, golden: list) -> list:
    """(target row, golden row or None) for every target row, matched on the exact-mode names."""
    by_name: dict = defaultdict(list)
    for row in golden:
        by_name[row.cmp].append(row)
    pairs = []
    for row in target:
        found = by_name.get(row.cmp)
        if not found:
            pairs.append((row, None))
            continue
        for other in found:
            pairs.append((row, other if dtypes_pair(row.dtype, other.dtype) else None))
    return pairs


def fuzzy_name(name: str) -> str:
    """A row name without its call index: ``Functional.linear.3.forward.input.0`` -> ``Functional.linear.forward
    .input.0`` (the index beside the first ``forward``/``backward``)."""
    word = "forward" if "forward" in name else "backward" if "backward" in name else None
    if word is None:
        return name
    head, _, tail = name.partition(word)
    return head.rsplit(".", 2)[0] + "." + word + tail


def fuzzy(target: list, golden: list) -> list:
    """msprobe's ``-fm``: both dumps walked side by side, each target row tried against the golden rows queued
    so far (and older target rows against the newest golden row); a hit leaves earlier target rows unmatched and
    drops earlier golden rows."""
    pairs: dict = {}
    t_queue: list = []
    g_queue: list = []
    gi = 0
    for ti in range(len(target)):
        t_queue.append(ti)
        if gi < len(golden):
            g_queue.append(gi)
            gi += 1
        _settle(target, golden, t_queue, g_queue, pairs)
    while gi < len(golden):
        g_queue.append(gi)
        gi += 1
        _settle(target, golden, t_queue, g_queue, pairs)
    out = []
    for ti, row in enumerate(target):
        other = pairs.get(ti)
        out.append((row, other if other is not None and dtypes_pair(row.dtype, other.dtype) else None))
    return out


def _settle(target: list, golden: list, t_queue: list, g_queue: list, pairs: dict) -> None:
    if not t_queue or not g_queue:
        return
    newest_t = t_queue[-1]
    key = fuzzy_name(target[newest_t].name)
    for pos, gi in enumerate(g_queue):
        if fuzzy_name(golden[gi].name) == key:
            pairs[newest_t] = golden[gi]
            del t_queue[:]
            del g_queue[:pos + 1]
            return
    newest_g = g_queue[-1]
    key = fuzzy_name(golden[newest_g].name)
    for pos, ti in enumerate(t_queue):
        if fuzzy_name(target[ti].name) == key:
            pairs[ti] = golden[newest_g]
            del t_queue[:pos + 1]
            del g_queue[:]
            return
