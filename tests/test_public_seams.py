"""Public seams only: no module of the three packages reaches into a private name of pytest, pytest-xdist,
execnet, torch or the interpreter, nor replaces an attribute of their objects.

Parsed, not imported (as tests/test_layers.py). A name is a library's when it is bound by an import of one of
:data:`LIBRARIES`; an attribute is ours when some module of the three packages defines it (a function, a
class, an assignment, a parameter or a keyword), so ``obj._name`` with a ``_name`` nobody here defines can only
be someone else's. The few exceptions are :data:`ALLOWED`, each with the reason (DESIGN.md prescribes it, or
docs/architecture.md argues it); an exception no longer used fails too, so the list stays exact.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pytest_msprobe", "generators", "dumpers")
# the libraries whose private names are off limits, and the interpreter's own modules
LIBRARIES = frozenset({"pytest", "_pytest", "pluggy", "xdist", "execnet", "torch", "sys", "os", "atexit",
                       "threading", "weakref", "gc", "builtins", "importlib", "inspect", "types", "ctypes"})
# attributes of library objects that their documentation says to set
WRITABLE = frozenset({
    "user_properties",      # pytest: a report's properties, set by a hook wrapper of pytest_runtest_makereport
    "exitstatus",           # pytest: the session's exit status, set in pytest_sessionfinish
    "restype", "argtypes",  # ctypes: a foreign function's signature
    "filename",             # OSError: the file an error names
})

# (module, the expression as ast.unparse writes it) -> why it stays
ALLOWED = {
    # prescribed by DESIGN.md ("Intercept, don't monkeypatch": TorchDispatchMode, nested args with _pytree), in
    # any module ("*")
    ("*", "from torch.utils._pytree import"): "DESIGN.md: nested values are walked with torch.utils._pytree",
    ("dumpers/online_dispatch/dispatch.py", "from torch.utils._python_dispatch import TorchDispatchMode"):
        "DESIGN.md: aten ops are intercepted with TorchDispatchMode",
    # argued in docs/architecture.md ("Public seams")
    ("dumpers/online_dispatch/dispatch.py", "_get_current_dispatch_mode_stack"):
        "no public way to ask whether a dispatch mode is already active (nesting PtdbgDispatch)",
    ("dumpers/torch_dump/capture.py", "torch.overrides._get_current_function_mode_stack"):
        "no public way to ask whether the dumper's function mode is already on the stack",
    ("dumpers/torch_dump/capture.py", "setattr(cls, dunder, _reflected_wrapper(dunder, target))"):
        "docs/dump.md: which side of an operator a Python scalar was on is seen only by the reflected dunder",
    ("dumpers/torch_dump/capture.py", "setattr(cls, dunder, original)"): "restores the reflected dunder",
    ("dumpers/torch_dump/capture.py", "delattr(cls, dunder)"): "restores the reflected dunder",
    ("dumpers/torch_dump/capture.py", "setattr(dist, name, self._wrap(name, orig))"):
        "docs/architecture.md: torch.distributed collectives never consult __torch_function__",
    ("dumpers/torch_dump/capture.py", "setattr(dist, name, orig)"): "restores the collective at stop()",
    ("dumpers/torch_dump/registry.py", "torch._ops"):
        "an aten OpOverload reaching the function mode is named by its schema; torch exports no public type",
    ("dumpers/torch_dump/registry.py", "func._qualified_op_name"):
        "the name of a torch.ops callable; torch exports no public accessor",
    ("dumpers/online_dispatch/dispatch.py", "torch._ops"): "as in the registry: the type of an aten overload",
    ("dumpers/grad_probe/torch_monitor.py", "torch._foreach_norm"):
        "one fused norm over every gradient of a step (torch.nn.utils.clip_grad_norm_ calls it alike)",
    ("dumpers/online_dispatch/seed.py", "torch.backends.cudnn.deterministic"):
        "torch's documented reproducibility switch",
    ("dumpers/online_dispatch/seed.py", "torch.backends.cudnn.benchmark"): "torch's documented reproducibility switch",
    # the statistics engine: a tensor's version counter and its base say whether its storage was written since
    **{(module, text): "no public equivalent of a tensor's version counter or base; see docs/architecture.md"
       for module, text in (("dumpers/torch_dump/statcache.py", "t._base"),
                            ("dumpers/torch_dump/statcache.py", "t._version"))},
    # MindSpore has no function mode: its capture wraps the API namespaces while started (DESIGN.md)
    ("dumpers/mindspore_dump/hooks.py", "setattr(owner, name, self._wrapper(prefix, name, original))"):
        "DESIGN.md: MindSpore capture wraps namespaces while started",
    ("dumpers/mindspore_dump/hooks.py", "setattr(owner, name, original)"): "restores the namespace at stop()",
    ("dumpers/mindspore_dump/hooks.py", "delattr(owner, name)"): "restores the namespace at stop()",
}


def _modules() -> dict:
    return {str(p.relative_to(ROOT)): ast.parse(p.read_text(encoding="utf-8"))
            for top in PACKAGES for p in sorted((ROOT / top).rglob("*.py"))}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_names(trees: dict) -> set:
    """Every attribute the three packages define: their classes, what a class body defines, what is assigned
    to ``self.x``/``cls.x``, keywords (``set_defaults(_run=...)``)."""
    own = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                own.add(node.name)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        own.add(item.name)
                    elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                        targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                        own.update(t.id for t in targets if isinstance(t, ast.Name))
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                own.add(node.attr)
            elif isinstance(node, ast.keyword) and node.arg:
                own.add(node.arg)
    return own


def _package_names(tree: ast.AST) -> set:
    """The names a module binds to modules of the three packages (their private names are ours)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in PACKAGES):
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names
                         if alias.name.split(".")[0] in PACKAGES)
    return names


def _library_names(tree: ast.AST) -> set:
    """The names a module binds to a library's modules or objects (by any import, at any level)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in LIBRARIES:
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in LIBRARIES:
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _findings(module: str, tree: ast.AST, own: set) -> list:
    """(module, expression, what is wrong) of every private access and attribute replacement in ``tree``."""
    library = _library_names(tree)
    package = _package_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level:
            top = (node.module or "").split(".")
            if top[0] == "_pytest":
                found.append((module, ast.unparse(node), "imports pytest's private package"))
            elif top[0] in LIBRARIES:
                if any(_private(part) for part in top[1:]):
                    found.append((module, ast.unparse(node), "imports from a private module"))
                found.extend((module, alias.name, "imports a private name") for alias in node.names
                             if _private(alias.name))
        elif isinstance(node, ast.Import):
            found.extend((module, ast.unparse(node), "imports a private module") for alias in node.names
                         if alias.name.split(".")[0] in LIBRARIES and any(_private(p) for p in alias.name.split(".")))
        elif isinstance(node, ast.Attribute):
            text = ast.unparse(node)
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                if _root(node) in library:
                    found.append((module, text, "replaces an attribute of a library"))
                elif (node.attr not in own and node.attr not in WRITABLE and not node.attr.startswith("__")
                      and _root(node) not in package):
                    found.append((module, text, "sets an attribute of an object that is not ours"))
            if _private(node.attr) and (_root(node) in library or node.attr not in own and _root(node) not in package):
                found.append((module, text, "uses a private name of a library"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            target = node.args[0] if node.args else None
            ours = isinstance(target, ast.Name) and (
                target.id == "self"
                or target.id in own and target.id not in library and target.id.lstrip("_")[:1].isupper())  # our class
            if not ours:
                found.append((module, ast.unparse(node), "replaces an attribute of an object that is not ours"))
    # an access nested in another (``torch._ops.OpOverload``) is reported once, by its innermost private part
    return sorted({(m, t, why) for m, t, why in found})


def _matches(text: str, allowed: str) -> bool:
    """``text`` is the allowed expression, or it continues it (``torch._ops.OpOverload``, an import's names)."""
    return text == allowed or text.startswith(allowed) and text[len(allowed):][:1] in (".", " ", ",")


def _violations() -> tuple:
    trees = _modules()
    own = _own_names(trees)
    found = [f for module, tree in trees.items() for f in _findings(module, tree, own)]
    used = set()
    bad = []
    for module, text, why in found:
        key = next((k for k in ALLOWED if k[0] in (module, "*") and _matches(text, k[1])), None)
        if key is None:
            bad.append(f"{module}: {text} ({why})")
        else:
            used.add(key)
    return bad, sorted(f"{m}: {t}" for m, t in set(ALLOWED) - used)


def test_no_private_name_or_replaced_attribute_of_a_library():
    bad, _ = _violations()
    assert not bad, "\n".join(bad)


def test_every_exception_is_still_needed():
    _, stale = _violations()
    assert not stale, "exceptions no longer used (remove them from ALLOWED): " + ", ".join(stale)


def test_the_checks_catch_what_they_are_for(tmp_path):
    """Each rule finds its own kind of breach in a module written to break it."""
    source = '''
import sys, atexit
import torch
from _pytest.config import Config
from xdist.dsession import _private_helper
from torch.utils._pytree import tree_map


def f(config, manager, t):
    frame = sys._getframe(1)
    atexit._run_exitfuncs()
    manager.setup_node = None
    torch.distributed.all_reduce = None
    setattr(torch.Tensor, "add", None)
    version = t._version
'''
    tree = ast.parse(source)
    found = {(text, why) for _, text, why in _findings("x.py", tree, own=_own_names({"x.py": tree}))}
    texts = {text for text, _ in found}
    assert {"from _pytest.config import Config", "_private_helper", "sys._getframe", "atexit._run_exitfuncs",
            "manager.setup_node", "torch.distributed.all_reduce", "setattr(torch.Tensor, 'add', None)",
            "t._version", "from torch.utils._pytree import tree_map"} <= texts, found
