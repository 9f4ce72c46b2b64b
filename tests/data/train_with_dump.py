"""A 3-step training run with the PyTorch dumper on, for the I/O error tests.

    python train_with_dump.py DUMP_PATH TASK FSIZE_LIMIT [API ...]

FSIZE_LIMIT: bytes (0: none; 'off': no dumper at all); API: dump only calls whose names contain one of these.

Step k trains on 1 + 2k micro-batches of 4 * 4**k rows, so each step writes more than the one before (a
file size limit or a small disk fails in a later step, after a complete one). Prints one loss per step.
"""
import json
import os
import resource
import signal
import sys

import torch

dump_path, task, limit, apis = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]


def limit_file_size() -> None:
    """From now on a write past ``limit`` bytes fails with EFBIG (set once the dump runs: the tensor writer
    process's shared memory is a file too)."""
    if limit not in ("0", "off"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), int(limit)))


torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
debugger = None
if limit != "off":
    from dumpers.torch_dump import PrecisionDebugger
    config = os.path.join(os.path.dirname(os.path.abspath(dump_path)), f"config_{task}.json")
    with open(config, "w", encoding="utf-8") as fh:
        json.dump({"task": task, "dump_path": dump_path, "level": "L1", task: {"list": apis}}, fh)
    debugger = PrecisionDebugger(config_path=config)
data = torch.Generator().manual_seed(1)
for step in range(3):
    if debugger is not None:
        debugger.start()
        if step == 0:
            limit_file_size()
    opt.zero_grad()
    total = 0.0
    for _ in range(1 + 2 * step):
        x = torch.randn(4 * 4 ** step, 8, generator=data)
        loss = model(x).pow(2).mean()
        loss.backward()
        total += loss.item()
    opt.step()
    if debugger is not None:
        debugger.stop()
        debugger.step()
    print(f"loss {step} {total!r}", flush=True)
