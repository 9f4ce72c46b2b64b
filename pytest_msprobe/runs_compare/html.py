"""The compare view: one self-contained HTML page from compare_result CSVs (ours or msprobe's) and a
diff_analyze JSON: the divergence curve (the relative error of each call's output against execution order, one
line per rank), the first divergence marked on it, and the table filtered to that call's rows.

The relative error of an output is ``||target - golden|| / ||golden||``: from the tensors in tensor mode
(EucDist over Bench l2norm), from the norms in statistics mode (NormRelativeErr, a lower bound of it), and
"differs" (1) or "equal" (0) from the CRC32 values in md5 mode. A call's point is the largest over its outputs.
"""
from __future__ import annotations

import base64
import csv
import io
import json
import math
import os
import re
from dataclasses import dataclass, field

_CALL = re.compile(r"^(.*?\.(?:forward|backward))\.(input|output|parameters)(?:\.|$)")
_RANK = re.compile(r"compare_result_(?:rank(\d*)|proc\d+)?_?\d*\.(?:csv|xlsx)$")
TEMPLATE = "compare_view.html.j2"
MAX_TABLE_ROWS = 2000


@dataclass
class RankCurve:
    """One rank's calls in execution order and the relative error of each call's output (None: no figure)."""

    rank: int
    path: str
    header: list
    calls: list = field(default_factory=list)          # call keys, in order of first appearance
    errors: list = field(default_factory=list)
    rows: dict = field(default_factory=dict)           # call key -> its CSV rows
    first_backward: int | None = None


def _number(text: str) -> float | None:
    text = text.strip()
    if text in ("", "N/A", "Nan", "nan", "None", "unsupported", "shape unmatched", "Diff"):
        return None
    try:
        return float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        return None


def _output_error(row: dict) -> float | None:
    """The relative error of one output row, by the CSV's mode (its columns)."""
    if "NormRelativeErr" in row:
        value = _number(row["NormRelativeErr"])
        return abs(value) if value is not None else None
    if "EucDist" in row:
        dist, norm = _number(row["EucDist"]), _number(row.get("Bench l2norm", ""))
        if dist is None:
            return None
        if dist == 0:
            return 0.0
        return dist / norm if norm else math.inf
    if "NPU MD5" in row:
        if row.get("Bench Name") in ("N/A", None):
            return None
        return 0.0 if row["NPU MD5"] == row.get("BENCH MD5") else 1.0
    return None


def rank_of(path: str, default: int) -> int:
    """The rank a compare_result file name carries (``compare_result_rank3_...`` -> 3), else ``default``."""
    found = _RANK.search(os.path.basename(path))
    return int(found.group(1)) if found and found.group(1) else default


def read_curve(path: str, rank: int) -> RankCurve:
    """One compare_result CSV as a :class:`RankCurve`."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, [])
        curve = RankCurve(rank, path, header)
        worst: dict = {}
        for cells in reader:
            row = dict(zip(header, cells))
            name = row.get("NPU Name", "").lstrip("'")
            found = _CALL.match(name)
            if not found:
                continue
            key, kind = found.group(1), found.group(2)
            if key not in curve.rows:
                curve.rows[key] = []
                curve.calls.append(key)
                if curve.first_backward is None and key.endswith(".backward"):
                    curve.first_backward = len(curve.calls) - 1
            curve.rows[key].append(cells)
            if kind == "output":
                value = _output_error(row)
                if value is not None and not math.isnan(value):
                    worst[key] = max(worst.get(key, value), value)
        curve.errors = [worst.get(key) for key in curve.calls]
    return curve


def first_nodes(diff_json: str | None, problems: list) -> list:
    """(rank, node) of each rank in a diff_analyze JSON, the first divergence across ranks first; a file that
    cannot be read, or a node without an ``op_name``, is left out with one line in ``problems``."""
    if not diff_json:
        return []
    from generators import dumpjson

    try:
        doc = json.loads(dumpjson.read_text(diff_json))
    except (dumpjson.JSONFileError, ValueError, RecursionError) as exc:
        problems.append(f"{diff_json}: not read ({exc}); pass the diff_analyze_*.json written by compare -da")
        return []
    out = []
    for key, nodes in (doc.items() if isinstance(doc, dict) else ()):
        node = nodes[0] if isinstance(nodes, list) and nodes else None
        if not (isinstance(node, dict) and isinstance(node.get("op_name"), str)):
            problems.append(f"{diff_json}: {key} holds no node with an op_name; left out")
            continue
        digits = str(key).rsplit("_", 1)[-1]
        rank = node.get("rank")
        rank = rank if isinstance(rank, int) else int(digits) if digits.isdigit() else 0
        out.append((rank, node))
    out.sort(key=lambda item: item[1].get("first_across_ranks") is not True)
    return out


def _plot(curves: list, marks: list) -> str:
    """The divergence curve as a PNG data URI."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    finite = [v for c in curves for v in c.errors if v is not None and 0 < v < math.inf]
    floor = min(finite) / 10 if finite else 1e-12
    ceiling = max(finite) * 10 if finite else 1.0
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for curve in curves:
        xs = [i for i, v in enumerate(curve.errors) if v is not None]
        ys = [min(max(curve.errors[i], floor), ceiling) for i in xs]
        ax.plot(xs, ys, lw=0.8, marker="." if len(xs) < 400 else None, ms=3, label=f"rank {curve.rank}")
    backward = [c.first_backward for c in curves if c.first_backward is not None]
    if backward:
        ax.axvspan(min(backward), max(len(c.calls) for c in curves), color="#eeeeee", zorder=0,
                   label="backward")
    for i, (curve, x, node) in enumerate(marks):
        y = curve.errors[x] if curve.errors[x] is not None else floor
        y = min(max(y, floor), ceiling)
        ax.plot([x], [y], marker="*", ms=16 if i == 0 else 11, color="#d62728" if i == 0 else "#ff7f0e",
                zorder=5, label="first divergence" if i == 0 else None)
        if i == 0:
            ax.annotate(f"{node['op_name']} (rank {curve.rank})", (x, y), textcoords="offset points",
                        xytext=(8, 10), fontsize=8, color="#d62728")
    ax.set_yscale("log")
    ax.set_ylim(floor / 2, ceiling * 2)
    ax.set_xlabel("call, in execution order (forward, then backward)")
    ax.set_ylabel("relative error of the output")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def render_compare_view(csv_paths: list, diff_json: str | None, out_path: str, *,
                        title: str = "pytest-msprobe compare") -> str:
    """Write the compare view of ``csv_paths`` (one per rank) and ``diff_json`` to ``out_path``; its path."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    from dumpers import atomic

    curves = [read_curve(path, rank_of(path, i)) for i, path in enumerate(csv_paths)]
    by_rank = {c.rank: c for c in curves}
    marks, missing = [], []
    for rank, node in first_nodes(diff_json, missing):
        curve = by_rank.get(rank)
        if curve is None or node.get("op_name") not in curve.rows:
            missing.append(f"rank {rank}: {node.get('op_name')} is not in the compare CSVs given")
            continue
        marks.append((curve, curve.calls.index(node["op_name"]), node))
    first = None
    if marks:
        curve, x, node = marks[0]
        rows = curve.rows[node["op_name"]]
        first = {"op_name": node["op_name"], "rank": curve.rank, "index": x, "header": curve.header,
                 "rows": rows[:MAX_TABLE_ROWS], "csv": curve.path,
                 "figures": [(k, v if isinstance(v, str) else json.dumps(v, default=str))
                             for k, v in node.items() if k not in ("op_name", "data_info", "stack_info")],
                 "stack": node.get("stack_info")}
    env = Environment(loader=PackageLoader("pytest_msprobe.report", "templates"),
                      autoescape=select_autoescape(["html", "j2"]))
    html = env.get_template(TEMPLATE).render(
        title=title, plot=_plot(curves, marks) if curves else None, first=first, missing=missing,
        others=[(c.rank, n["op_name"], x) for c, x, n in marks[1:]], diff_json=diff_json,
        ranks=[{"rank": c.rank, "path": c.path, "calls": len(c.calls),
                "judged": sum(1 for v in c.errors if v is not None)} for c in curves])
    atomic.write_text(out_path, html, mode=0o640, fsync=False)
    return out_path
