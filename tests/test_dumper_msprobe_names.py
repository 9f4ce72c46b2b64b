"""The dumper's entries for one TransformerEncoder training step against msprobe 26.2's own dumps of it, at its
default risk_level and at "ALL" and "CORE" (tests/data/transformer_encoder_msprobe_26_2: step.py,
make_reference.py, reference*.json)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

HERE = Path(__file__).parent / "data" / "transformer_encoder_msprobe_26_2"
# The one difference, for a stated reason (docs/dump.md): TransformerEncoderLayer's default activation is the
# F.relu that torch bound as a default argument when torch.nn was imported, before msprobe's debugger wrapped
# torch.nn.functional, so msprobe records the torch.relu inside it; ours records the call as made
# (Functional.relu), which is what msprobe writes for an F.relu it wrapped.
HELD = ("Functional.relu.", "Torch.relu.")


def _ours(tmp_path: Path, risk_level: Optional[str]) -> list:
    dump = tmp_path / "dump"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    argv = [sys.executable, str(HERE / "step.py"), "ours", str(dump), *([risk_level] if risk_level else [])]
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return list(json.loads((dump / "step0" / "rank" / "dump.json").read_text())["data"])


@pytest.mark.parametrize("risk_level", [None, "ALL", "CORE"])
def test_a_transformer_encoder_step_has_msprobes_entries(tmp_path, risk_level) -> None:
    """Every entry msprobe 26.2 writes at that risk_level, in its order, and no other: its default ("FOCUS")
    leaves out Tensor.transpose, "ALL" has it, "CORE" keeps the attention and layer norms but not
    Functional.linear; a dropout at p=0 returns its input, so it has no backward entry (its input's node is an
    earlier call's)."""
    ref = json.loads((HERE / f"reference{'_' + risk_level if risk_level else ''}.json").read_text())
    assert ref["msprobe"] == "26.2.0" and ref["risk_level"] == risk_level
    ours = [k.replace(*HELD) for k in _ours(tmp_path, risk_level)]
    assert ours == ref["keys"]
    assert not [k for k in ours if k.startswith("Functional.dropout.") and k.endswith(".backward")]
    assert any(k.startswith("Tensor.transpose.") for k in ours) == (risk_level == "ALL")
    assert any(k.startswith("Functional.linear.") for k in ours) == (risk_level != "CORE")
