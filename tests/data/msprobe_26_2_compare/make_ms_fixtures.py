"""Write the MindSpore compare fixtures: this project's dumps of one small network built in MindSpore and in
PyTorch with the same weights, and what msprobe 26.2's own ``compare`` wrote for each pair.

Two steps, each run by hand, not by CI:

    # the dumps, with this project's dumpers (MindSpore 2.10 PyNative on CPU, and torch)
    PYTHONPATH=$PWD python tests/data/msprobe_26_2_compare/make_ms_fixtures.py dump
    # msprobe's compare of each pair (mindstudio-probe 26.2.0 with mindspore 2.10 in its own venv)
    /work/msp/bin/python tests/data/msprobe_26_2_compare/make_ms_fixtures.py compare

The network: two linear blocks (8 -> 16 -> 4) with relu between and ``2 * tanh`` after, loss the mean squared
error, weights from numpy seed 0, a batch of 4 from seed 1, one step (forward, backward, SGD). In MindSpore the
blocks call ``ops.dense`` (``Functional.dense``), the activations ``mint.nn.functional.relu``
(``MintFunctional.relu``) and ``mint.tanh`` (``Mint.tanh``), the loss ``mint.square`` and ``mint.mean``; in
PyTorch ``F.linear``, ``F.relu``, ``torch.tanh``, ``torch.square``, ``torch.mean``: the names msprobe's api mapping
pairs. The blocks are cells/modules of classes ``DenseBlock`` (MindSpore) and ``LinearBlock`` (PyTorch), for the
cell mapping. Level mix, statistics, tensor and md5 (statistics with ``summary_mode: md5``) tasks. Variants: ``golden``; ``fault``, the second block's weight
row 0 times 1.5; ``inf``, one element of the batch +inf, so that inf and NaN run through the step (MindSpore
only).

Pairs compared by msprobe (``ms/<task>/<variant>`` is MindSpore, ``pt/<task>/golden`` PyTorch), each CSV to
``mindspore/msprobe_out/<pair>/compare_result.csv.gz``:

- ``<task>_fault``, ``<task>_inf``: MindSpore variant against MindSpore golden, no mapping;
- ``<task>_none``: MindSpore golden against PyTorch golden, no mapping (only the names both share pair);
- ``<task>_am``: MindSpore golden against PyTorch golden with ``-am`` (msprobe's own name table);
- ``<task>_am_file``: the same with ``-am api_mapping.yaml`` (a user table, written beside);
- ``<task>_cm``: the same with ``-cm cell_mapping.yaml``;
- ``<task>_dm``: the same with ``-dm data_mapping.yaml``;
- ``<task>_lm``, ``<task>_lm_file``: the same with ``-lm`` and ``-lm layer_mapping.yaml``;
- ``layers``: a hand-made pair of pipeline-parallel layers numbered from 2 and from 0, with ``-lm``;
- ``user_table``: a hand-made dump.json pair (keyword inputs, swapped positions) with ``-am user_table/am.yaml``.

stack.json is kept for the golden dumps only (``-lm`` needs it beside construct.json), the machine's directories
cut from its frames. msprobe 26.2's own MindSpore dumper does not run on a CPU (its norm statistic needs a
kernel the CPU backend lacks), hence this project's dumpers.
"""
from __future__ import annotations

import glob
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DUMPS = os.path.join(HERE, "mindspore")
OUT = os.path.join(DUMPS, "msprobe_out")
TASKS = ("statistics", "tensor", "md5")
IN, HIDDEN, OUTS, BATCH = 8, 16, 4, 4

CELL_MAPPING = {"DenseBlock": "LinearBlock"}
LAYER_MAPPING = "DenseBlock:\n  dense: linear\nCell:\n  fc2.dense: fc2.linear(the second block)\n"
API_MAPPING = [{"ms_api": "Functional.dense", "pt_api": "Functional.linear", "ms_args": [0, 1, 2],
                "pt_args": [0, 1, 2], "ms_output": [0], "pt_output": [0]}]


def weights() -> dict:
    import numpy as np
    rs = np.random.RandomState(0)
    return {"w1": (rs.randn(HIDDEN, IN) * 0.3).astype(np.float32), "b1": (rs.randn(HIDDEN) * 0.1).astype(np.float32),
            "w2": (rs.randn(OUTS, HIDDEN) * 0.3).astype(np.float32), "b2": (rs.randn(OUTS) * 0.1).astype(np.float32)}


def batch() -> tuple:
    import numpy as np
    rs = np.random.RandomState(1)
    return rs.randn(BATCH, IN).astype(np.float32), rs.randn(BATCH, OUTS).astype(np.float32)


def _config(tmp: str, task: str) -> str:
    path = os.path.join(tmp, "config.json")
    section = {"scope": [], "list": [], "data_mode": ["all"]}
    if task == "md5":                     # a statistics dump with CRC32 values
        task, section["summary_mode"] = "statistics", "md5"
    with open(path, "w") as fh:
        json.dump({"task": task, "level": "mix", "dump_path": os.path.join(tmp, "dump"), "rank": [], "step": [],
                   task: section}, fh)
    return path


def _keep(tmp: str, dest: str) -> None:
    found = glob.glob(os.path.join(tmp, "dump", "step0", "*", "dump.json"))
    if len(found) != 1:
        raise SystemExit(f"expected one dump.json under step0, found {found}")
    target = os.path.join(dest, "step0", "rank")
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(os.path.dirname(found[0]), target)
    stack = os.path.join(target, "stack.json")
    if os.path.exists(stack) and not dest.endswith("golden"):
        os.remove(stack)
    elif os.path.exists(stack):             # the machine's directories cut from the frames
        with open(stack) as fh:
            text = fh.read()
        text = re.sub(r"File [^,\"]*?/(site-packages|dist-packages)/", r"File \1/", text)
        text = text.replace(os.path.abspath(__file__), "make_ms_fixtures.py")
        with open(stack, "w") as fh:
            fh.write(text)


def dump_mindspore(task: str, variant: str, root: str = DUMPS) -> float:
    import mindspore as ms
    import numpy as np
    from mindspore import mint, nn, ops

    from pytest_msprobe.mindspore import PrecisionDebugger

    ms.set_context(mode=ms.PYNATIVE_MODE)
    w = weights()
    if variant == "fault":
        w["w2"][0] *= np.float32(1.5)

    class DenseBlock(nn.Cell):
        def __init__(self, weight, bias):
            super().__init__()
            self.weight = ms.Parameter(ms.Tensor(weight), name="weight")
            self.bias = ms.Parameter(ms.Tensor(bias), name="bias")

        def construct(self, x):
            return ops.dense(x, self.weight, self.bias)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc1 = DenseBlock(w["w1"], w["b1"])
            self.fc2 = DenseBlock(w["w2"], w["b2"])

        def construct(self, x):
            h = mint.nn.functional.relu(self.fc1(x))
            return mint.tanh(self.fc2(h)) * 2.0

    net = Net()
    x, y = batch()
    if variant == "inf":
        x[1, 2] = np.inf
    opt = nn.SGD(net.trainable_params(), learning_rate=0.1)

    def loss_fn(x, y):
        return mint.mean(mint.square(net(x) - y))

    grad_fn = ms.value_and_grad(loss_fn, None, opt.parameters)
    with tempfile.TemporaryDirectory() as tmp:
        debugger = PrecisionDebugger(_config(tmp, task))
        debugger.start(net)
        loss, grads = grad_fn(ms.Tensor(x), ms.Tensor(y))
        debugger.stop()
        opt(grads)
        debugger.step()
        debugger.close()
        _keep(tmp, os.path.join(root, "ms", task, variant))
    return float(loss.asnumpy())


def dump_torch(task: str, root: str = DUMPS) -> float:
    import torch
    import torch.nn.functional as F

    from pytest_msprobe import PrecisionDebugger

    w = weights()

    class LinearBlock(torch.nn.Module):
        def __init__(self, weight, bias):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.from_numpy(weight))
            self.bias = torch.nn.Parameter(torch.from_numpy(bias))

        def forward(self, x):
            return F.linear(x, self.weight, self.bias)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = LinearBlock(w["w1"], w["b1"])
            self.fc2 = LinearBlock(w["w2"], w["b2"])

        def forward(self, x):
            return torch.tanh(self.fc2(F.relu(self.fc1(x)))) * 2.0

    net = Net()
    x, y = (torch.from_numpy(a) for a in batch())
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with tempfile.TemporaryDirectory() as tmp:
        debugger = PrecisionDebugger(config_path=_config(tmp, task))
        debugger.start(net)
        loss = torch.mean(torch.square(net(x) - y))
        loss.backward()
        debugger.stop()
        opt.step()
        debugger.step()
        debugger.close()                # the tensor files are written by a writer thread: waited for
        _keep(tmp, os.path.join(root, "pt", task, "golden"))
    return float(loss.item())


def dump_all() -> None:
    for task in TASKS:          # one process per dump: the PyTorch debugger is one per process
        for what in ("golden", "fault", "inf", "torch"):
            subprocess.run([sys.executable, os.path.abspath(__file__), "dump", task, what], check=True)
    with open(os.path.join(DUMPS, "cell_mapping.yaml"), "w") as fh:
        fh.write("".join(f"{k}: {v}\n" for k, v in CELL_MAPPING.items()))
    write_user_table_pair()
    write_layers_pair()
    with open(os.path.join(DUMPS, "layer_mapping.yaml"), "w") as fh:
        fh.write(LAYER_MAPPING)
    with open(os.path.join(DUMPS, "api_mapping.yaml"), "w") as fh:
        for entry in API_MAPPING:
            fh.write(f"- ms_api: {entry['ms_api']}\n  pt_api: {entry['pt_api']}\n")
            for key in ("ms_args", "pt_args", "ms_output", "pt_output"):
                fh.write(f"  {key}: {json.dumps(entry[key])}\n")
    # a data mapping: the MindSpore golden's first block's rows to the PyTorch ones, by name
    with open(os.path.join(DUMPS, "ms", "statistics", "golden", "step0", "rank", "dump.json")) as fh:
        names = [k for k in json.load(fh)["data"] if k.startswith("Functional.dense.0.forward")]
    with open(os.path.join(DUMPS, "data_mapping.yaml"), "w") as fh:
        for key in names:
            pt_key = key.replace("Functional.dense", "Functional.linear")
            for part in ("input.0", "input.1", "input.2", "output.0"):
                fh.write(f"{key}.{part}: {pt_key}.{part}\n")


def write_user_table_pair() -> None:
    """A hand-made pair for the user's ``-am`` table: keyword inputs, swapped positions, positions the other API
    lacks (``user_table/``: target and golden dump.json, am.yaml)."""
    def tensor(dtype: str, peak: float) -> dict:
        kind = "torch.Tensor" if dtype.startswith("torch.") else "mindspore.Tensor"
        return {"type": kind, "dtype": dtype, "shape": [2, 2], "Max": peak, "Min": -peak, "Mean": 0.1, "Norm": 1.0}

    for side, api, dtype, shift, framework in (("target", "Functional.dense", "Float32", 0.0, "mindspore"),
                                               ("golden", "Functional.linear", "torch.float32", 0.5, "pytorch")):
        data = {f"{api}.0.forward": {"input_args": [tensor(dtype, 1 + shift), tensor(dtype, 2 + shift)],
                                     "input_kwargs": {"bias": tensor(dtype, 3 + shift)},
                                     "output": [tensor(dtype, 4 + shift)]},
                f"{api}.0.backward": {"input": [tensor(dtype, 5 + shift)],
                                      "output": [tensor(dtype, 6 + shift), tensor(dtype, 7 + shift)]}}
        os.makedirs(os.path.join(DUMPS, "user_table", side), exist_ok=True)
        with open(os.path.join(DUMPS, "user_table", side, "dump.json"), "w") as fh:
            json.dump({"task": "statistics", "level": "L1", "framework": framework, "dump_data_dir": None,
                       "data": data}, fh, indent=1)
    with open(os.path.join(DUMPS, "user_table", "am.yaml"), "w") as fh:
        fh.write("- ms_api: Functional.dense\n  pt_api: Functional.linear\n  ms_args: [1, 0]\n  pt_args: [0, 1]\n"
                 "  ms_output: [0, 1]\n  pt_output: [1, 0]\n")


def write_layers_pair() -> None:
    """A hand-made pair for ``-lm`` over pipeline-parallel layers: the target's ``ParallelTransformer`` holds
    ``layers.2`` and ``layers.3`` (global numbers), the golden's ``layers.0`` and ``layers.1`` (``layers/``)."""
    def tensor(dtype: str, peak: float) -> dict:
        kind = "torch.Tensor" if dtype.startswith("torch.") else "mindspore.Tensor"
        return {"type": kind, "dtype": dtype, "shape": [2], "Max": peak, "Min": -peak, "Mean": 0.0, "Norm": peak}

    for side, top, dtype, first, framework in (("target", "Cell", "Float32", 2, "mindspore"),
                                               ("golden", "Module", "torch.float32", 0, "pytorch")):
        data, construct = {}, {}
        block = f"{top}.decoder.ParallelTransformer.forward.0"
        data[block] = {"input_args": [tensor(dtype, 1.0)], "output": [tensor(dtype, 9.0)]}
        construct[block] = None
        for n in range(2):
            layer = f"{top}.decoder.layers.{first + n}.ParallelTransformerLayer.forward.0"
            api = f"Functional.gelu.{n}.forward"
            data[api] = {"input_args": [tensor(dtype, 2.0 + n)], "output": [tensor(dtype, 3.0 + n)]}
            data[layer] = {"input_args": [tensor(dtype, 2.0 + n)], "output": [tensor(dtype, 3.0 + n)]}
            construct[api], construct[layer] = layer, block
        out = os.path.join(DUMPS, "layers", side)
        os.makedirs(out, exist_ok=True)
        for name, doc in (("dump.json", {"task": "statistics", "level": "mix", "framework": framework,
                                         "dump_data_dir": None, "data": data}),
                          ("construct.json", construct), ("stack.json", {"0": [list(data), ["File model.py, line 1, "
                                                                                             "in forward, x"]]})):
            with open(os.path.join(out, name), "w") as fh:
                json.dump(doc, fh, indent=1)


def msprobe(args: list, out: str) -> None:
    """msprobe's compare with ``args``; its one CSV gzipped to ``out``."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    exe = os.path.join(os.path.dirname(sys.executable), "msprobe")
    with tempfile.TemporaryDirectory() as tmp:
        run = subprocess.run([exe, "compare", *args, "-o", tmp], capture_output=True, text=True)
        csvs = glob.glob(os.path.join(tmp, "compare_result_*.csv"))
        if run.returncode != 0 or len(csvs) != 1:
            raise SystemExit(f"msprobe compare {args}: rc {run.returncode}, {csvs}\n{run.stdout[-3000:]}"
                             f"{run.stderr[-3000:]}")
        with open(csvs[0], "rb") as src, gzip.GzipFile(os.path.join(out, "compare_result.csv.gz"), "wb",
                                                       mtime=0) as dst:
            shutil.copyfileobj(src, dst)


def compare_all() -> None:
    table = os.path.join(DUMPS, "user_table")
    msprobe(["-tp", os.path.join(table, "target", "dump.json"), "-gp", os.path.join(table, "golden", "dump.json"),
             "-am", os.path.join(table, "am.yaml")], os.path.join(OUT, "user_table"))
    layers = os.path.join(DUMPS, "layers")
    msprobe(["-tp", os.path.join(layers, "target", "dump.json"), "-gp", os.path.join(layers, "golden", "dump.json"),
             "-lm"], os.path.join(OUT, "layers"))
    for task in TASKS:
        ms_golden = os.path.join(DUMPS, "ms", task, "golden", "step0")
        pt_golden = os.path.join(DUMPS, "pt", task, "golden", "step0")
        for variant in ("fault", "inf"):
            msprobe(["-tp", os.path.join(DUMPS, "ms", task, variant, "step0"), "-gp", ms_golden],
                    os.path.join(OUT, f"{task}_{variant}"))
        msprobe(["-tp", ms_golden, "-gp", pt_golden], os.path.join(OUT, f"{task}_none"))
        msprobe(["-tp", ms_golden, "-gp", pt_golden, "-am"], os.path.join(OUT, f"{task}_am"))
        msprobe(["-tp", ms_golden, "-gp", pt_golden, "-am", os.path.join(DUMPS, "api_mapping.yaml")],
                os.path.join(OUT, f"{task}_am_file"))
        msprobe(["-tp", ms_golden, "-gp", pt_golden, "-cm", os.path.join(DUMPS, "cell_mapping.yaml")],
                os.path.join(OUT, f"{task}_cm"))
        msprobe(["-tp", ms_golden, "-gp", pt_golden, "-dm", os.path.join(DUMPS, "data_mapping.yaml")],
                os.path.join(OUT, f"{task}_dm"))
        msprobe(["-tp", ms_golden, "-gp", pt_golden, "-lm"], os.path.join(OUT, f"{task}_lm"))
        msprobe(["-tp", ms_golden, "-gp", pt_golden, "-lm", os.path.join(DUMPS, "layer_mapping.yaml")],
                os.path.join(OUT, f"{task}_lm_file"))


if __name__ == "__main__":
    if sys.argv[1:] == ["dump"]:
        dump_all()
    elif len(sys.argv) in (4, 5) and sys.argv[1] in ("dump", "dump-to"):     # dump-to ROOT TASK WHAT: elsewhere
        root = sys.argv.pop(2) if sys.argv[1] == "dump-to" else DUMPS
        task, what = sys.argv[2], sys.argv[3]
        loss = dump_torch(task, root) if what == "torch" else dump_mindspore(task, what, root)
        print(task, what, "loss", loss, flush=True)
    elif sys.argv[1:] == ["compare"]:
        compare_all()
    else:
        raise SystemExit("usage: make_ms_fixtures.py dump|compare|dump-to ROOT TASK golden|fault|inf|torch")
