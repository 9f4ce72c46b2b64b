"""Self-contained HTML report of an accuracy-check run.

Reads the run's ``accuracy_checking_result_*.csv`` / ``accuracy_checking_details_*.csv`` (ours or msprobe's)
and, when given, the dump's ``stack.json``; renders one HTML file with a Jinja2 template and matplotlib plots
embedded as PNG data URIs, so it opens offline and can be attached to a bug report. Everything taken from the
CSVs or the dump is escaped by Jinja2's autoescaping.
"""
from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ..precision.fields import DISPLAY_LABEL
from ..precision.verdict import (
    ERROR_KEY,
    PASS_KEY,
    SEVERITY,
    SKIP_KEY,
    WARNING_KEY,
    is_bad_row,
    is_unfaithful,
    norm,
    worst,
)
from .columns import DETAILS_HEADER, FIDELITY_COLUMN, FIELD_OF_HEADER
from .html_context import load_construct, module_path, user_frames_first

STATUS_ORDER = SEVERITY
# column headers shown in the report -> their short names (the others show the header)
METRIC_LABELS = {header: DISPLAY_LABEL[name] for header, name in FIELD_OF_HEADER.items() if name in DISPLAY_LABEL}
METRIC_LABELS.update({"Bench Dtype": "bench dtype", "DEVICE Dtype": "device dtype", "Shape": "shape",
                      "Status": "status", FIDELITY_COLUMN: "replay fidelity", "Data Mode": "data mode"})
STATUS_COLOURS = {ERROR_KEY: "#d62728", WARNING_KEY: "#ff7f0e", PASS_KEY: "#2ca02c", SKIP_KEY: "#7f7f7f"}


def read_csv_rows(path: str) -> List[Dict[str, str]]:
    """Rows of an msprobe-style CSV as dicts (BOM and CRLF tolerated; short rows padded with '')."""
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise ValueError(f"{path}: the file is empty; expected a header row") from None
        rows = []
        for rec in reader:
            if not rec:
                continue
            rec = rec + [""] * (len(header) - len(rec))
            rows.append(dict(zip(header, rec)))
    return rows


def norm_status(s: str) -> str:
    return norm(s)


def _num(text: str) -> Optional[float]:
    try:
        x = float(text)
    except (TypeError, ValueError):
        return None
    return x


def load_stacks(dump_dir: Optional[str]) -> Dict[str, List[str]]:
    """Map forward entry key -> stack lines, for both stack.json shapes (key->lines, or grouped)."""
    if not dump_dir:
        return {}
    path = os.path.join(dump_dir, "stack.json") if os.path.isdir(dump_dir) else dump_dir
    if not os.path.isfile(path) or os.path.getsize(path) > 256 * 1024 * 1024:
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    stacks: Dict[str, List[str]] = {}
    if not isinstance(data, dict):
        return stacks
    for key, value in data.items():
        if (isinstance(value, list) and len(value) == 2 and isinstance(value[0], list)
                and isinstance(value[1], list)):
            for name in value[0]:
                stacks[str(name)] = [str(x) for x in value[1]]
        elif isinstance(value, list):
            stacks[str(key)] = [str(x) for x in value]
    return stacks


@dataclass
class ApiView:
    name: str
    forward: str
    backward: str
    message: str
    status: str
    rows: List[Dict[str, str]] = field(default_factory=list)
    failing: List[str] = field(default_factory=list)
    stack: List[str] = field(default_factory=list)
    cosine: Optional[float] = None
    max_abs: Optional[float] = None
    compare: str = ""              # NPU-vs-GPU verdict, when an api_precision_compare result is given
    fidelity: str = ""             # "faithful", "unfaithful" (a replayed output differs from the recording) or ""
    unfaithful: List[str] = field(default_factory=list)   # "row: Replay Fidelity cell" of the unfaithful rows
    modules: List[str] = field(default_factory=list)      # the modules around the call (construct.json)
    library_stack: List[str] = field(default_factory=list)  # the framework's frames (stack holds the user's)


def _api_status(fwd: str, bwd: str) -> str:
    return worst((fwd, bwd))


def _compare_verdicts(path: Optional[str]) -> Dict[str, str]:
    """API -> worst of forward/backward in an api_precision_compare_result CSV."""
    if not path or not os.path.isfile(path):
        return {}
    out = {}
    for row in read_csv_rows(path):
        name = row.get("API Name") or row.get("API name") or ""
        out[name] = _api_status(row.get("Forward Test Success", ""), row.get("Backward Test Success", ""))
    return out


def build_views(result_rows, details_rows, stacks, compare=None, construct=None) -> List[ApiView]:
    by_api: Dict[str, List[Dict[str, str]]] = {}
    for row in details_rows:
        name = row.get("API Name", "")
        parts = name.split(".")
        api = ".".join(parts[:-3]) if len(parts) > 3 else name
        by_api.setdefault(api, []).append(row)
    views = []
    for row in result_rows:
        name = row.get("API name") or row.get("API Name") or ""
        fwd, bwd = row.get("Forward Test Success", ""), row.get("Backward Test Success", "")
        view = ApiView(name, fwd.strip(), bwd.strip(), row.get("Message", ""), _api_status(fwd, bwd))
        view.rows = by_api.get(name, [])
        for d in view.rows:
            if is_bad_row(d.get("Status", "")):
                msg = (d.get("Message") or "").strip().splitlines()
                view.failing.append(f"{d.get('API Name', '')}: {msg[-1] if msg else d.get('Status')}")
        cos = [_num(d.get("余弦相似度", "")) for d in view.rows]
        cos = [c for c in cos if c is not None and not math.isnan(c)]
        view.cosine = min(cos) if cos else None
        mae = [_num(d.get("最大绝对误差", "")) for d in view.rows]
        mae = [m for m in mae if m is not None and not math.isnan(m)]
        view.max_abs = max(mae) if mae else None
        view.stack, view.library_stack = user_frames_first(stacks.get(f"{name}.forward", []))
        view.modules = module_path(construct or {}, name)
        cells = [(d.get("API Name", ""), d.get(FIDELITY_COLUMN) or "") for d in view.rows]
        view.unfaithful = [f"{row}: {text}" for row, text in cells if is_unfaithful(text)]
        if any(text for _, text in cells):
            view.fidelity = "unfaithful" if view.unfaithful else "faithful"
        if compare:
            view.compare = compare.get(name, "")
        views.append(view)
    order = {s: i for i, s in enumerate(STATUS_ORDER)}
    views.sort(key=lambda v: (order.get(v.compare, 9) if compare else 0, order.get(v.status, 9),
                              -(v.max_abs or 0.0)))
    return views


def _plot_png(views: List[ApiView]) -> Optional[str]:
    """The chart of the metric that decided each API's status (:mod:`.html_chart`)."""
    from .html_chart import plot_png
    return plot_png(views, STATUS_COLOURS)


def _rounding_split(views: List[ApiView], details_rows: list) -> Optional[dict]:
    """Failing APIs beyond / within the rounding of a correct kernel (report/rounding.py), or None."""
    from .columns import EXPECTED_COLUMN
    from .rounding import html_split
    if not details_rows or EXPECTED_COLUMN not in details_rows[0]:
        return None
    return html_split(views, EXPECTED_COLUMN)


def render_report(result_csv: str, details_csv: Optional[str] = None, out_path: Optional[str] = None, *,
                  dump_dir: Optional[str] = None, compare_csv: Optional[str] = None,
                  title: str = "pytest-msprobe accuracy report",
                  extra: Optional[Dict[str, str]] = None) -> str:
    """Render the HTML report and write it to ``out_path`` (default beside the result CSV). Returns the path."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    if details_csv is None:
        details_csv = os.path.join(os.path.dirname(result_csv),
                                   os.path.basename(result_csv).replace("result", "details"))
    result_rows = read_csv_rows(result_csv)
    details_rows = read_csv_rows(details_csv) if os.path.isfile(details_csv) else []
    compare = _compare_verdicts(compare_csv)
    views = build_views(result_rows, details_rows, load_stacks(dump_dir), compare, load_construct(dump_dir))
    fidelity = bool(details_rows) and FIDELITY_COLUMN in details_rows[0]    # a details CSV with the column
    counts = {s: sum(1 for v in views if v.status == s) for s in STATUS_ORDER}
    compare_counts = {s: sum(1 for v in views if v.compare == s) for s in STATUS_ORDER} if compare else None
    env = Environment(loader=PackageLoader("pytest_msprobe.report", "templates"),
                      autoescape=select_autoescape(["html", "j2"]))
    html = env.get_template("report.html.j2").render(
        title=title, views=views, counts=counts, compare_counts=compare_counts,
        compare_csv=os.path.abspath(compare_csv) if compare else None, total=len(views), plot=_plot_png(views),
        result_csv=os.path.abspath(result_csv), details_csv=os.path.abspath(details_csv),
        columns=([c for c in DETAILS_HEADER if c not in ("API Name", "Message")]
                 + ([FIDELITY_COLUMN] if fidelity else [])),
        fidelity=fidelity,
        rounding=_rounding_split(views, details_rows),
        labels=METRIC_LABELS, extra=extra or {}, statuses=STATUS_ORDER, failing=(ERROR_KEY, WARNING_KEY),
    )
    if out_path is None:
        out_path = os.path.join(os.path.dirname(os.path.abspath(result_csv)),
                                os.path.basename(result_csv).replace("accuracy_checking_result", "report")
                                .rsplit(".", 1)[0] + ".html")
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(html)
    return out_path
