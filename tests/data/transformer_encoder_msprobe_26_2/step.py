"""One training step of a small nn.TransformerEncoder, dumped by msprobe 26.2 or by this project (statistics, L1).

    python step.py msprobe|ours DUMP_PATH [RISK_LEVEL]

Without RISK_LEVEL the config has no ``risk_level`` key (each tool's default); with it, ``"risk_level"`` is
that value. ``make_reference.py`` keeps the entry keys msprobe 26.2.0 writes for it (reference.json, and
reference_ALL.json, reference_CORE.json for those levels); the test dumps the same step with this project's
dumper and expects the same keys in the same order.
"""
import json
import os
import sys

import torch

which, out = sys.argv[1], sys.argv[2]
config = os.path.join(os.path.dirname(os.path.abspath(out)), f"config_{which}.json")
if which == "msprobe":
    from msprobe.pytorch import PrecisionDebugger
    cfg = {"task": "statistics", "dump_path": out, "rank": [], "step": [], "level": "L1",
           "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
else:
    from dumpers.torch_dump import PrecisionDebugger
    cfg = {"task": "statistics", "dump_path": out, "level": "L1"}
if len(sys.argv) > 3:
    cfg["risk_level"] = sys.argv[3]
with open(config, "w", encoding="utf-8") as fh:
    json.dump(cfg, fh)
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(2, 5, 16)
debugger = PrecisionDebugger(config_path=config)
debugger.start(model)
loss = model(x).pow(2).mean()
loss.backward()
optimizer.step()
optimizer.zero_grad()
debugger.stop()
debugger.step()
