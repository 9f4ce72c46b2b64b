"""Shared fixtures for the test suite."""
from __future__ import annotations

import os
import pathlib

import pytest

DATA = pathlib.Path(__file__).parent / "data"


KEPT_MODULES = ("torch", "mindspore", "numpy", "numba", "llvmlite", "sympy")


def _keep_framework_modules() -> None:
    """pytester's in-process runs drop the modules they imported; torch and MindSpore modules register operator
    libraries at import and cannot be imported twice, and numba (with llvmlite) and sympy keep registries of
    their own types that refuse a second import of their modules, so in-process runs keep them all."""
    import _pytest.pytester as pytester_mod

    original = pytester_mod.SysModulesSnapshot.__init__

    def init(self, preserve=None):
        def keep(name):
            return name.split(".")[0] in KEPT_MODULES or bool(preserve and preserve(name))
        original(self, preserve=keep)

    pytester_mod.SysModulesSnapshot.__init__ = init


_keep_framework_modules()


def pytest_configure(config):
    """Import the torch modules that register operator libraries before any in-process pytester run.

    pytester's in-process runs restore ``sys.modules`` afterwards; a module that registers a TORCH_LIBRARY and
    is first imported inside such a run would be imported a second time later and fail to register again.
    """
    try:
        import torch  # noqa: F401
        import torch.distributed._functional_collectives  # noqa: F401
    except ImportError:
        pass


@pytest.fixture
def data_dir() -> pathlib.Path:
    """The bundled msprobe sample dumps (read-only: copy before modifying)."""
    return DATA


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI (MSPROBE_CI=1) a skipped test marked ``mindspore`` is turned into a failure."""
    outcome = yield
    report = outcome.get_result()
    if (os.environ.get("MSPROBE_CI") == "1" and report.skipped
            and item.get_closest_marker("mindspore") is not None):
        report.outcome = "failed"
        report.longrepr = f"MindSpore test skipped under CI (MSPROBE_CI=1): {report.longrepr}"


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    """A test that runs the checker in-process may pin torch's thread count; later tests see the default."""
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _fresh_torch_debugger():
    """msprobe's PrecisionDebugger is a singleton (the first construction wins): every test starts and ends
    without one, so a test that builds its own never gets another test's, whatever ran before it."""
    import sys

    def reset() -> None:
        module = sys.modules.get("dumpers.torch_dump.debugger")
        if module is not None:
            module.PrecisionDebugger.reset()
    reset()
    yield
    reset()
