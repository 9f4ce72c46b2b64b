"""Write reference.json: msprobe 26.2's own dump of the GPT-2 training step of tests/zoo.py.

Run with mindstudio-probe 26.2.0 importable (not a dependency of this project), from the repository root:
    PYTHONPATH=tests:<msprobe site> python tests/data/gpt2_msprobe_26_2/make_reference.py
risk_level "ALL" makes msprobe dump every API of its wrap list (its default skips reshape, view, to, ...).
"""
from __future__ import annotations

import glob
import json
import os
import tempfile

import zoo
from msprobe.pytorch import PrecisionDebugger

HERE = os.path.dirname(os.path.abspath(__file__))

with tempfile.TemporaryDirectory() as tmp:
    config = os.path.join(tmp, "config.json")
    with open(config, "w") as fh:
        json.dump({"task": "statistics", "dump_path": os.path.join(tmp, "dump"), "rank": [], "step": [],
                   "level": "L1", "risk_level": "ALL", "statistics": {"scope": [], "list": [],
                   "data_mode": ["all"], "summary_mode": "statistics"}}, fh)
    loss, _ = zoo.train_step("gpt2", PrecisionDebugger(config_path=config))
    with open(glob.glob(os.path.join(tmp, "dump", "step0", "*", "dump.json"))[0]) as fh:
        dump = json.load(fh)
with open(os.path.join(HERE, "reference.json"), "w") as fh:
    json.dump({"msprobe": "26.2.0", "torch": zoo.torch.__version__, "loss": loss.item(), "data": dump["data"]},
              fh, separators=(",", ":"))
