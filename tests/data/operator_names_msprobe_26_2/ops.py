"""Python operators on tensors, one step, dumped by msprobe 26.2 or by this project (task statistics, L1).

    python ops.py msprobe|ours DUMP_PATH

``make_reference.py`` keeps the entry keys msprobe 26.2.0 writes for it (reference.json); the test dumps the
same step with this project's dumper and expects the same keys in the same order.
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
with open(config, "w", encoding="utf-8") as fh:
    json.dump(cfg, fh)
torch.manual_seed(0)
debugger = PrecisionDebugger(config_path=config)
x = torch.randn(4, 4, requires_grad=True)
y = torch.randn(4, 4)
debugger.start()
a = x * 1.0
b = a // 2
c = a < y
d = a <= y
e = a != y
f = a ** 2
g = a.to(torch.float64)
h = a.float()
i = a.expand(2, 4, 4)
j = a[1:3]
k = a > y
m = a >= y
n = a == y
o = a % 3
p = -a
q = a @ y
mm = torch.mm(a, y)
r = a / 2
s = 2 - a
t = a.clone()
t **= 2
t[0] = 1.0
u = 7 // a
v = 1 / a
w = a.abs()
z = 2 ** a
(f.sum() + g.sum() + h.sum() + i.sum() + j.sum()).backward()
debugger.stop()
debugger.step()
