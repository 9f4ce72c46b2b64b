"""The dumper's entries for one TransformerEncoder training step against msprobe 26.2's own dump of it
(tests/data/transformer_encoder_msprobe_26_2: step.py, make_reference.py, reference.json)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent / "data" / "transformer_encoder_msprobe_26_2"
# where the two still differ, each for a stated reason (docs/dump.md):
# - msprobe's default risk_level skips its low-risk APIs (transpose, reshape, view, ...); ours records them, as
#   msprobe does with risk_level "ALL"
LOW_RISK = ("Tensor.transpose.",)
# - TransformerEncoderLayer keeps F.relu in an attribute from before msprobe replaced torch.nn.functional's
#   functions, so msprobe records the torch.relu inside it; ours records the call as made (Functional.relu),
#   which is what msprobe writes for a direct F.relu call
HELD = ("Functional.relu.", "Torch.relu.")


def _ours(tmp_path: Path) -> list:
    dump = tmp_path / "dump"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    res = subprocess.run([sys.executable, str(HERE / "step.py"), "ours", str(dump)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return list(json.loads((dump / "step0" / "rank" / "dump.json").read_text())["data"])


def test_a_transformer_encoder_step_has_msprobes_entries(tmp_path) -> None:
    """Every entry msprobe 26.2 writes, in its order, and no other: a dropout at p=0 returns its input, so it
    has no backward entry (its input's node is an earlier call's)."""
    ref = json.loads((HERE / "reference.json").read_text())
    assert ref["msprobe"] == "26.2.0"
    ours = [k.replace(*HELD) for k in _ours(tmp_path) if not k.startswith(LOW_RISK)]
    assert ours == ref["keys"]
    assert not [k for k in ours if k.startswith("Functional.dropout.") and k.endswith(".backward")]
