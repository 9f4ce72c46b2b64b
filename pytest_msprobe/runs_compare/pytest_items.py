"""``pytest --msprobe-compare TARGET --msprobe-golden GOLDEN``: one test item per compared API call.

Every process compares the two runs once at configure time (the rows, cells and verdicts are deterministic);
the controller alone writes the CSVs (the same bytes as ``pytest-msprobe compare``) and, when a call diverges,
``diff_analyze_*.json``. Items are ``<target dump.json>::<call name>`` (``step0/rank0/dump.json::Functional.
linear.0``, forward and backward of a call together), as the accuracy check names them, so ``-k``, ``-n``,
``--lf``, junitxml and the exit status work unchanged. An item fails when a row of its call is an ``error``
(msprobe's Result) or when its call is the first divergence; ``warning`` rows pass with their message shown.
"""
from __future__ import annotations

import os
from typing import Any

import pytest

from dumpers import format as fmt

COMPARE_KEY = pytest.StashKey["Any"]()
PLUGIN_NAME = "msprobe-compare"


def add_compare_options(parser: Any) -> None:
    """The compare options, in the msprobe group (called from the plugin's option registration)."""
    g = parser.getgroup("msprobe")
    g.addoption("--msprobe-compare", metavar="TARGET", default=None,
                help="compare this run's dump (dump.json, rank or step directory) with --msprobe-golden: one "
                     "test per call (docs/compare.md)")
    g.addoption("--msprobe-golden", metavar="GOLDEN", default=None, help="the golden run of --msprobe-compare")
    g.addoption("--msprobe-compare-out", metavar="DIR", default=None,
                help="where --msprobe-compare writes compare_result_*.csv and diff_analyze_*.json (default ./)")
    g.addoption("--msprobe-compare-fuzzy", action="store_true", default=False,
                help="--msprobe-compare matches calls without their call index (msprobe's -fm)")
    g.addoption("--msprobe-compare-api-mapping", nargs="?", const=True, default=None, metavar="FILE",
                help="--msprobe-compare of a MindSpore target against a PyTorch golden: API names matched "
                     "through msprobe's table, and FILE's (msprobe's -am; give FILE with =)")
    g.addoption("--msprobe-compare-cell-mapping", nargs="?", const=True, default=None, metavar="FILE",
                help="--msprobe-compare matches Cell.* rows with Module.* rows, cell paths renamed by FILE "
                     "(msprobe's -cm; give FILE with =)")
    g.addoption("--msprobe-compare-data-mapping", default=None, metavar="FILE",
                help="--msprobe-compare matches rows by FILE's `target: golden` names (msprobe's -dm)")
    g.addoption("--msprobe-compare-layer-mapping", nargs="?", const=True, default=None, metavar="FILE",
                help="--msprobe-compare of a MindSpore target pairs calls by their place in the module tree, "
                     "renamed per class by FILE (msprobe's -lm; give FILE with =)")


def call_name(key: str) -> str:
    """The item name of an entry: the key without its direction (``Module.fc1.Linear.forward.0`` ->
    ``Module.fc1.Linear.0``)."""
    parts = key.split(".")
    if parts[-1] in fmt.DIRECTIONS:
        return ".".join(parts[:-1])
    if len(parts) >= 2 and parts[-2] in fmt.DIRECTIONS:
        return ".".join(parts[:-2] + parts[-1:])
    return key


class CompareRun:
    """The compared pairs of this process and the first divergence (the controller also writes the files)."""

    def __init__(self, config: Any) -> None:
        from . import mapping
        from .diverge import analyze, analyze_and_write, summary_line
        from .inputs import CompareInputError
        from .runner import compare_runs

        opt = config.option
        if not opt.msprobe_golden:
            raise pytest.UsageError("--msprobe-compare needs --msprobe-golden GOLDEN (the reference run's dump)")
        controller = not hasattr(config, "workerinput")
        out = opt.msprobe_compare_out or os.getcwd()
        self.notes: list = []
        try:
            names = mapping.load(opt.msprobe_compare_api_mapping, opt.msprobe_compare_cell_mapping,
                                 opt.msprobe_compare_data_mapping, opt.msprobe_compare_layer_mapping)
            if controller:
                self.results = compare_runs(opt.msprobe_compare, opt.msprobe_golden, out, names=names,
                                            fuzzy=opt.msprobe_compare_fuzzy, report=self.notes.append)
            else:       # a worker: the same comparison, nothing written
                import tempfile
                with tempfile.TemporaryDirectory() as tmp:
                    self.results = compare_runs(opt.msprobe_compare, opt.msprobe_golden, tmp, names=names,
                                                fuzzy=opt.msprobe_compare_fuzzy, report=self.notes.append)
        except CompareInputError as exc:
            raise pytest.UsageError(f"--msprobe-compare: {exc}") from None
        if not self.results:
            raise pytest.UsageError("--msprobe-compare: nothing could be compared: "
                                    + ("; ".join(self.notes) or "no rank pairs"))
        if controller:
            self.da_path, self.summary = analyze_and_write(self.results, out)
            doc = None
        else:
            doc, findings = analyze(self.results)
            self.da_path, self.summary = None, summary_line(doc, findings)
        self.first = self._first(doc if doc is not None else self._read_da())
        self.files = {os.path.realpath(r.pair.target): r for r in self.results}

    def _read_da(self) -> dict:
        if not self.da_path:
            return {}
        import json
        with open(self.da_path) as fh:
            return json.load(fh)

    @staticmethod
    def _first(doc: dict) -> tuple | None:
        for rank, nodes in doc.items():
            if nodes:
                return rank, nodes[0]
        return None

    # ---------------------------------------------------------------- hooks
    def pytest_collect_file(self, file_path: Any, parent: Any) -> Any:
        result = self.files.get(os.path.realpath(str(file_path)))
        if result is None:
            return None
        return CompareFile.from_parent(parent, path=file_path, result=result, run=self)

    def pytest_report_header(self, config: Any) -> list:
        return [f"msprobe compare: {r.pair.label or 'dump'} {r.mode}, {len(r.lines)} rows" for r in self.results]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        tr.section("msprobe compare")
        for note in self.notes:
            tr.write_line(note)
        for r in self.results:
            if r.path:
                tr.write_line(f"{r.pair.label or 'dump'}: {r.path}")
        tr.write_line(self.summary)
        if self.da_path:
            tr.write_line(f"first divergence -> {self.da_path}")


class CompareFile(pytest.File):
    """A target dump.json: one item per call, in dump order."""

    def __init__(self, *, result: Any, run: CompareRun, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.result, self.run = result, run

    def collect(self) -> Any:
        groups: dict = {}
        for line in self.result.lines:
            groups.setdefault(call_name(line.target.key), []).append(line)
        for name, lines in groups.items():
            yield CompareItem.from_parent(self, name=name, lines=lines)


class CompareFailure(Exception):
    """A call whose rows msprobe's rules call errors, or the first divergence."""


class CompareItem(pytest.Item):
    def __init__(self, *, lines: list, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lines = lines

    def runtest(self) -> None:
        from .table import ERROR, WARNING

        matched = [line for line in self.lines if line.golden is not None]
        if not matched:
            pytest.skip(f"{self.name}: no golden row matched (the golden run has no such call)")
        errors = [f"{line.target.name}: {'; '.join(line.messages)}" for line in self.lines if line.result == ERROR]
        first = self.parent.run.first
        rank_key = f"rank_{self.parent.result.pair.rank}"
        diverged = first is not None and first[0] == rank_key and call_name(first[1]["op_name"]) == self.name
        text = []
        if diverged:
            from .diverge import summary_line
            text.append(summary_line({first[0]: [first[1]]}, []))
        text.extend(errors)
        warnings = [f"{line.target.name}: {'; '.join(line.messages)}" for line in self.lines
                    if line.result == WARNING]
        self.user_properties.append(("msprobe_compare_rows", len(self.lines)))
        if text:
            raise CompareFailure("\n".join(text + warnings))
        for warning in warnings:
            self.add_report_section("call", "msprobe compare", warning)

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, CompareFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple:
        return self.path, None, f"{self.path.name}::{self.name}"


def configure(config: Any) -> None:
    """Set up a compare run (called from the plugin's ``pytest_configure`` when --msprobe-compare is given)."""
    run = CompareRun(config)
    config.stash[COMPARE_KEY] = run
    config.pluginmanager.register(run, PLUGIN_NAME)
    explicit = getattr(config, "args_source", None) == pytest.Config.ArgsSource.ARGS
    args = list(config.args) if explicit else []
    have = {os.path.realpath(a.split("::")[0]) for a in args}
    args += [r.pair.target for r in run.results if os.path.realpath(r.pair.target) not in have]
    config.args = args
