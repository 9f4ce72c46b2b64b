"""The Python text of a generated suite: the parametrized test module and the reproduction scripts.

Strings taken from a dump go into the code only through ``repr`` (literals) or :func:`comment_lines`
(comments with control characters removed), so a hostile dump cannot inject code.
"""
from __future__ import annotations

import json
from typing import Any

from dumpers import format as fmt

from .plan import HEADER_MARK, Plan, Selected, comment_lines, script_name

_ARG_LIMIT = 48          # characters of one argument's description in a comment
_MAX_ITEMS = 6           # list elements described before "..."


def literal(text: str) -> str:
    """A Python string literal: double quotes unless the text holds one and no single quote (JSON's ASCII
    escapes mean the same in Python)."""
    quoted = json.dumps(str(text), ensure_ascii=True)
    if '"' in text and "'" not in text:
        quoted = "'" + quoted[1:-1].replace('\\"', '"') + "'"
    return quoted


def _describe(value: Any, depth: int = 0) -> str:
    """A short description of one dumped argument: ``float32[8, 16]``, ``-1``, ``None``, ``[...]``."""
    from generators import dumpjson
    if value is None:
        return "None"
    if isinstance(value, list):
        if depth > 2:
            return "[...]"
        parts = [_describe(v, depth + 1) for v in value[:_MAX_ITEMS]]
        return "[" + ", ".join(parts) + (", ..." if len(value) > _MAX_ITEMS else "") + "]"
    if not isinstance(value, dict):
        return repr(value)
    if dumpjson.is_tensor_item(value):
        dtype = fmt.canonical_dtype(value.get("dtype")) or str(value.get("dtype"))
        return f"{dtype}[{','.join(str(n) for n in value.get('shape') or [])}]"
    if "type" in value:
        kind, inner = value.get("type"), value.get("value")
        if kind == "slice" and isinstance(inner, list):
            return "slice(" + ", ".join(repr(v) for v in inner) + ")"
        if kind == "torch.dtype":
            return str(inner)
        text = repr(inner)
    elif depth > 2:
        text = "{...}"
    else:
        text = "{" + ", ".join(f"{k}: {_describe(v, depth + 1)}" for k, v in list(value.items())[:_MAX_ITEMS]) + "}"
    return text if len(text) <= _ARG_LIMIT else text[:_ARG_LIMIT - 3] + "..."


def signature(case: Any) -> str:
    """``gelu(float32[8, 32]) -> float32[8, 32]`` from the forward entry."""
    fwd = case.forward or {}
    args = [_describe(a) for a in (fwd.get(fmt.INPUT_ARGS) or [])]
    kwargs = fwd.get(fmt.INPUT_KWARGS) or {}
    args += [f"{k}={_describe(v)}" for k, v in kwargs.items()] if isinstance(kwargs, dict) else []
    outputs = fwd.get(fmt.OUTPUT) or []
    out = ", ".join(_describe(o) for o in outputs) if isinstance(outputs, list) else "?"
    return f"{case.api}({', '.join(args)}) -> {out or 'None'}"


def standards_of(case: Any, version: str) -> str:
    """The precision standard(s) that judge the call's float outputs, e.g. ``absolute``."""
    from generators import dumpjson

    from ..precision.standards import FLOAT_DTYPES, standard_for
    found = []
    for part in (case.forward or {}, case.backward or {}):
        outputs = part.get(fmt.OUTPUT) if isinstance(part, dict) else None
        for _, item in dumpjson.iter_tensor_items(outputs):
            dtype = f"torch.{fmt.canonical_dtype(item.get('dtype'))}"
            name = standard_for(case.api, version, dtype) if dtype in FLOAT_DTYPES else "exact (non-float)"
            if name not in found:
                found.append(name)
    return ", ".join(found) or "none (no tensor output)"


def case_comment(sel: Selected, plan: Plan, indent: str) -> list:
    """Comment lines above one case: API and shapes, gradient, standard, problem, recorded failure."""
    case = sel.case
    lines = comment_lines(f"{case.call_name}: {signature(case)}", indent)
    grads = (case.backward or {}).get(fmt.INPUT) or []
    extra = []
    if case.backward is not None:
        extra.append(f"backward with grad {_describe(grads[0]) if grads else 'None'}")
    extra.append(f"standard {plan.standard}: {standards_of(case, plan.standard)}")
    lines += comment_lines("; ".join(extra), indent, first="#   ")
    if case.problem:
        lines += comment_lines(f"skips: {case.problem}", indent, first="#   ")
    if sel.verdict:
        lines += comment_lines(f"checker result: {sel.verdict}", indent, first="#   ")
    for failure in sel.failures:
        lines += comment_lines(f"failed: {failure}", indent, first="#   ")
    return lines


def _doc_safe(text: str) -> str:
    """Text that cannot end or escape inside a docstring (paths come from the user's file system)."""
    return text.replace("\\", "/").replace('"', "'")


def _paragraph(text: str) -> list:
    return [ln[2:] for ln in comment_lines(_doc_safe(text), "", first="  ", rest="  ")]


def _docstring_lines(plan: Plan) -> list:
    mode = f"random data, seed {plan.seed}" if plan.random else "real data"
    n = len(plan.selected)
    lines = [f'"""Regression tests of {n} captured API call{"s" if n != 1 else ""} ({mode}).', ""]
    lines += _paragraph(
        "Each case replays one captured call on the device under test and on the CPU bench (raised precision) "
        "and judges outputs and gradients with the precision standard, as `pytest --msprobe-api-info` does. "
        "Run with `pytest DIR` (add -n, --lf, -k as usual); choose the device with --msprobe-device-type "
        f"(cpu, cuda, npu or a registered backend). The inputs live in {plan.name}_data/, so the "
        "original dump is not needed.")
    if plan.result_csv:
        lines.append("")
        lines += _paragraph("Selected from a checker result CSV; the comment above each case shows its "
                            "recorded verdict.")
    lines.append("")
    lines += _paragraph(f"Made with: {plan.command()}")
    lines += ["Regenerate instead of editing (see docs/generate.md).", '"""']
    return lines


def test_module(plan: Plan) -> str:
    """The source of ``test_<name>.py``."""
    out = [HEADER_MARK, *_docstring_lines(plan),
           "from __future__ import annotations", "",
           "import pathlib", "",
           "import pytest",
           "from pytest_msprobe.testing import check_call", "",
           f"DATA = pathlib.Path(__file__).parent / {literal(plan.name + '_data')}",
           f"RANDOM = {plan.random!r}",
           f"SEED = {plan.seed!r}",
           f"STANDARD = {literal(plan.standard)}",
           "", "",
           "@pytest.mark.parametrize(",
           '    "call",',
           "    ["]
    for sel in plan.selected:
        out += case_comment(sel, plan, " " * 8)
        out.append(f"        {literal(sel.case.call_name)},")
    out += ["    ],",
            ")",
            "def test_api_call(call: str, pytestconfig: pytest.Config) -> None:",
            "    check_call(pytestconfig, DATA, call, random=RANDOM, seed=SEED, standard=STANDARD)",
            ""]
    return "\n".join(out)


def script(plan: Plan, call: str) -> str:
    """The source of ``reproduce_<call>.py``: the call's replay as plain steps, no pytest."""
    sel = next(s for s in plan.selected if s.case.call_name == call)
    doc = [f'"""Reproduce {call} on a device and the CPU bench, without pytest.', ""]
    doc += [ln[2:] for ln in comment_lines(
        f"Loads the inputs, runs the call, prints each output's metrics and the verdict. "
        f"Usage: python {script_name(call)} [--device-type cpu|cuda|npu] [--device-index N] "
        "[--backend module:attribute|file.py:attribute] [--standard 1.0.4|26.2]. The exit status is 1 when the "
        f"call fails the precision standard, 2 when it cannot run. Inputs come from {plan.name}_data/.",
        "", first="  ", rest="  ")]
    doc.append('"""')
    out = [HEADER_MARK, *doc,
           "from __future__ import annotations", "",
           "import pathlib",
           "import sys", "",
           "from pytest_msprobe import testing", "",
           f"DATA = pathlib.Path(__file__).parent / {literal(plan.name + '_data')}",
           f"RANDOM = {plan.random!r}",
           f"SEED = {plan.seed!r}",
           ""]
    out += case_comment(sel, plan, "")
    out += [f"CALL = {literal(call)}",
            "", "",
            "def main(argv: list) -> int:",
            f"    parser = testing.reproduce_parser(CALL, default_standard={literal(plan.standard)})",
            "    args = parser.parse_args(argv)",
            "    case = testing.load_case(DATA, CALL)",
            "    try:",
            "        backend = testing.get_backend(args.device_type, args.backend)",
            "    except ValueError as exc:",
            '        print(f"error: {exc}", file=sys.stderr)',
            "        return 2",
            "    print(testing.describe_case(case))",
            "    result = testing.run_call(case, backend, args.device_index,",
            "                              random=RANDOM, seed=SEED, standard=args.standard)",
            "    print(testing.format_result(result))",
            "    return testing.exit_status(result, args.fail_on)",
            "", "",
            'if __name__ == "__main__":',
            "    sys.exit(main(sys.argv[1:]))",
            ""]
    return "\n".join(out)
