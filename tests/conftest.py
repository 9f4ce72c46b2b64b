"""Shared fixtures for the test suite."""
from __future__ import annotations

import os
import pathlib

import pytest

DATA = pathlib.Path(__file__).parent / "data"


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
