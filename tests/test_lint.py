"""House style gates: ruff is clean and the plugin imports nothing heavy at pytest start-up."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.fail("ruff is not installed: pip install -e '.[test]'")
    proc = subprocess.run([ruff, "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:]


@pytest.mark.parametrize("module", ["pytest_msprobe.plugin", "pytest_msprobe", "pytest_msprobe.mindspore"])
def test_import_is_light(module):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    heavy = [line for line in proc.stderr.splitlines()
             if line.rsplit("|", 1)[-1].strip() in ("torch", "mindspore", "hypothesis", "pandas")]
    assert not heavy, heavy
