"""A 3-step MindSpore (PyNative, CPU) training run with the dumper on, for the I/O error tests.

    python ms_train_with_dump.py DUMP_PATH TASK FSIZE_LIMIT

FSIZE_LIMIT: bytes (0: none; 'off': no dumper at all), set once the dump runs. Step k makes 1 + 2k updates,
so each step writes more than the one before. Prints one loss per step.
"""
import json
import os
import resource
import signal
import sys

import mindspore as ms
import numpy as np
from mindspore import nn

dump_path, task, limit = sys.argv[1], sys.argv[2], sys.argv[3]
ms.set_context(mode=ms.PYNATIVE_MODE)
ms.set_seed(0)
net = nn.Dense(8, 1, weight_init="ones", bias_init="zeros")
opt = nn.SGD(net.trainable_params(), learning_rate=0.01)
grad_fn = ms.value_and_grad(lambda x: (net(x) ** 2).mean(), None, opt.parameters)
debugger = None
if limit != "off":
    from dumpers.mindspore_dump.debugger import PrecisionDebugger
    config = os.path.join(os.path.dirname(os.path.abspath(dump_path)), f"ms_config_{task}.json")
    with open(config, "w", encoding="utf-8") as fh:
        json.dump({"task": task, "dump_path": dump_path, "level": "L1"}, fh)
    debugger = PrecisionDebugger(config)
rs = np.random.RandomState(1)
for step in range(3):
    if debugger is not None:
        debugger.start(net)
        if step == 0 and limit != "0":
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)      # a write past the limit fails with EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), int(limit)))
    total = 0.0
    for _ in range(1 + 2 * step):
        loss, grads = grad_fn(ms.Tensor(rs.randn(4, 8).astype(np.float32)))
        opt(grads)
        total += float(loss.asnumpy())
    if debugger is not None:
        debugger.stop()
        debugger.step()
    print(f"loss {step} {total!r}", flush=True)
