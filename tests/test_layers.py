"""The house's floors: the capture side never imports the checker, no package has an import circle, and
statuses are spelt only where they are defined.

Every import counts, module-level or inside a function (a lazy import still ties two modules together).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ACYCLIC = ("dumpers", "generators", "pytest_msprobe", "pytest_msprobe/suite", "pytest_msprobe/cli")
# where a status string may be written: the verdict and the standards, and the CSV layout
STATUS_HOMES = ("pytest_msprobe/precision/", "pytest_msprobe/report/columns.py")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict:
    """Dotted name -> path of every module of the three packages."""
    found = {}
    for top in ("dumpers", "generators", "pytest_msprobe"):
        for path in sorted((ROOT / top).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _imports(name: str, path: Path, known: dict) -> set:
    """The modules ``name`` imports (``from a import b`` names a.b when that is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
    return out


def test_dumpers_and_generators_never_import_the_checker():
    known = _modules()
    bad = [f"{name} imports {target}" for name, path in known.items() if name.split(".")[0] in ("dumpers", "generators")
           for target in _imports(name, path, known) if target.split(".")[0] == "pytest_msprobe"]
    assert not bad, bad


@pytest.mark.parametrize("package", ACYCLIC)
def test_no_import_circle(package):
    known = _modules()
    prefix = package.replace("/", ".")
    inside = {n: p for n, p in known.items() if n == prefix or n.startswith(prefix + ".")}
    graph = {n: {t for t in _imports(n, p, known) if t in inside and t != n} for n, p in inside.items()}
    state: dict = {}

    def visit(node: str, trail: list) -> None:
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                raise AssertionError("import circle: " + " -> ".join(trail[trail.index(target):] + [target]))
            if target not in state:
                visit(target, trail + [target])
        state[node] = "done"

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])


def _statuses() -> frozenset:
    from pytest_msprobe.precision import verdict
    from pytest_msprobe.precision.standards import STANDARDS

    spelt = {verdict.PASS, verdict.ERROR, verdict.WARNING, verdict.SKIP, verdict.SKIP_KEY}
    return frozenset(spelt | {std.warning for std in STANDARDS.values()})


def _docstrings(tree: ast.AST) -> set:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def test_status_literals_only_in_their_homes():
    statuses = _statuses()
    bad = []
    for top in ("dumpers", "generators", "pytest_msprobe"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if any(rel == home or (home.endswith("/") and rel.startswith(home)) for home in STATUS_HOMES):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docs = _docstrings(tree)
            bad += [f"{rel}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
                    if isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and node.value in statuses and id(node) not in docs]
    assert not bad, "spell statuses with pytest_msprobe.precision.verdict's constants: " + ", ".join(bad)


# the metric engine shared with online dispatch: below both, pure (numpy and numba only)
METRIC_ENGINE = ("dumpers.metrics_engine", "dumpers.metrics_kernel", "dumpers.metrics_sums", "dumpers.metrics_types")


def test_precision_imports_nothing_of_the_house():
    """The pure core: no report, no generators, nothing of the checker outside ``precision``, and of the
    capture package only the metric engine it shares with online dispatch."""
    known = _modules()
    bad = [f"{name} imports {target}" for name, path in known.items() if name.startswith("pytest_msprobe.precision")
           for target in _imports(name, path, known)
           if target.split(".")[0] in ("dumpers", "generators", "pytest_msprobe")
           and not target.startswith("pytest_msprobe.precision") and target not in METRIC_ENGINE + ("dumpers",)]
    assert not bad, bad


def test_the_metric_engine_is_pure():
    """What precision shares with online dispatch imports nothing of the house but itself (no I/O, no torch)."""
    known = _modules()
    bad = [f"{name} imports {target}" for name in METRIC_ENGINE
           for target in _imports(name, known[name], known)
           if target.split(".")[0] in ("dumpers", "generators", "pytest_msprobe", "torch")
           and target not in METRIC_ENGINE + ("dumpers",)]
    assert not bad, bad


MAX_MODULE_LINES = 600


def test_no_module_over_six_hundred_lines():
    """Small modules with one job: a module that outgrows 600 lines is split by job."""
    long = [f"{path.relative_to(ROOT)}: {n}" for package in ("pytest_msprobe", "generators", "dumpers")
            for path in sorted((ROOT / package).rglob("*.py"))
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert not long, long
