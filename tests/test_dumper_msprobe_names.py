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
import torch
import torch.nn.functional as F

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


# msprobe 26.2.0's keys for _returned_arguments (seen with mindstudio-probe 26.2.0, risk_level "ALL"): a call that
# returns its argument as it was gets a backward entry on the argument's node, unless it is a dropout
RETURNED_ARGUMENTS_26_2 = [
    "Functional.linear.0.forward", "Tensor.float.0.forward", "Functional.linear.1.forward",
    "Functional.dropout.0.forward", "Functional.dropout.1.forward", "Tensor.float.1.forward", "Tensor.sum.0.forward",
    "Tensor.sum.1.forward", "Tensor.__add__.0.forward", "Tensor.sum.2.forward", "Tensor.__add__.1.forward",
    "Tensor.sum.3.forward", "Tensor.__add__.2.forward", "Tensor.__add__.2.backward", "Tensor.sum.3.backward",
    "Tensor.__add__.1.backward", "Tensor.sum.2.backward", "Tensor.__add__.0.backward", "Tensor.sum.1.backward",
    "Tensor.sum.0.backward", "Tensor.float.1.backward", "Functional.linear.1.backward",
    "Functional.linear.0.backward", "Tensor.float.0.backward"]


def _returned_arguments() -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    a = F.linear(x, lin.weight, lin.bias).float()                            # the node linear's
    b = F.dropout(F.linear(x, lin.weight, lin.bias), p=0.0, training=True)   # returns its argument
    e = F.dropout(lin.weight.view(16), p=0.0, training=True)                 # view: not recorded
    f = lin.bias.view(4).float()
    (a.sum() + b.sum() + e.sum() + f.sum()).backward()


def test_calls_returning_their_argument_have_msprobes_backward_entries(tmp_path) -> None:
    from dumpers.torch_dump import PrecisionDebugger

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "d"), "risk_level": "ALL"}))
    PrecisionDebugger.reset()
    dbg = PrecisionDebugger(config_path=str(config))
    dbg.start()
    _returned_arguments()
    dbg.stop()
    PrecisionDebugger.reset()
    data = json.loads((tmp_path / "d" / "step0" / "rank" / "dump.json").read_text())["data"]
    assert list(data) == RETURNED_ARGUMENTS_26_2
    # float's backward is its argument's node's: linear's gradients (bias, input, weight transposed)
    assert [(g or {}).get("shape") for g in data["Tensor.float.0.backward"]["output"]] == [[4], None, [4, 4]]
