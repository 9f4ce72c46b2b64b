"""Write the compare fixtures: msprobe 26.2's own dumps of a tiny bf16 Llama step, golden against targets with
planted faults and other-device noise, and what msprobe's own ``compare`` (and ``-da``) wrote for each pair.

Needs mindstudio-probe 26.2.0 (not a dependency of this project), torch and transformers; run by hand, not by CI:

    /work/msp/bin/python tests/data/msprobe_26_2_compare/make_fixtures.py

The model: a one-layer Llama from a config (hidden 32, 4 heads, 2 KV heads, vocab 128, nothing downloaded), weights
from seed 0, cast to bfloat16; one step (forward, loss, backward, SGD) on 2 sequences of 8 tokens, under msprobe's
PrecisionDebugger. Variants of the same step (same seed, same data):

- ``golden``: as is.
- ``fault_<op>``: one aten op's output changed below the API layer by a ``TorchDispatchMode`` (the API's inputs agree,
  only its outputs differ): every second element of ``aten.silu`` / ``aten._softmax`` / ``aten.silu_backward`` /
  ``aten.rsqrt`` times 1.0625 (exact in bfloat16), its first call only; behind the noise also the second call of
  ``aten.rsqrt`` (the second norm), of ``aten.mean.dim`` and of ``aten.bmm``, the fifth of ``aten.add.Tensor``
  (the rotary embedding), ``aten._log_softmax`` (in cross_entropy) and ``aten._softmax_backward_data``,
  statistics only.
- ``noise``: every GEMM (``aten.mm``, ``aten.addmm``, ``aten.bmm``) rounded as another device might: about a third
  of its bfloat16 result's elements moved one bfloat16 step up or down (seeded), what a different summation
  order does to the elements near a rounding boundary; ``noise_fault_<op>``: both; ``noise_seed<k>[_fault_<op>]``:
  the noise from another seed (statistics only).

Tasks: statistics (every variant) and md5 (golden, noise and the faults without noise: md5 cannot see through
noise) at level mix (modules, parameter gradients and construct.json included), tensor at L1 for golden, ``noise``
and ``noise_fault_silu`` only (tensor files are the bulk). stack.json is kept for the
targets ``fault_silu`` and ``noise_fault_silu`` only (it is the largest file), with the machine's directories cut
from its paths. For each target, msprobe's compare of ``<task>/<target>/step0`` against
``<task>/golden/step0`` is run with and without ``-da``; its CSV goes to ``msprobe_out/<task>/<target>/``,
gzipped as ``compare_result.csv.gz``; the ``-da`` JSON, when msprobe wrote one, ``diff_analyze.json``; ``da.txt`` says
which. Also msprobe's compare of the shared MLP samples (statistics L1 and mix, tensor L1: step1 against step0),
and of the PyTorch NPU dump from msprobe's own test suite (tests/data/msprobe_repo_fixtures)
against a perturbed copy (``repo/``).
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
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
SEQ, BATCH, VOCAB, HIDDEN = 8, 2, 128, 32
FAULT_OPS = ("silu", "_softmax", "silu_backward", "rsqrt")
SCALE = 1.0625


NOISE_SEED = 1234
# behind the noise only (statistics): other families and positions; "-<n>": the op's n-th call
MORE_NOISE_FAULTS = ("rsqrt-2", "mean.dim-2", "add.Tensor-5", "bmm-2", "_log_softmax", "_softmax_backward_data")
MORE_NOISE_SEEDS = (4,)      # noise alone from another seed: the noise of the second norm's float32 mean
# a fault behind the noise of another seed: the silu backward whose incoming gradient's largest element moved 1.5%
OTHER_SEED_FAULTS = ("noise_seed1_fault_silu_backward",)


def variants() -> list:
    names = ["golden", "noise"]
    for op in FAULT_OPS:
        names += [f"fault_{op}", f"noise_fault_{op}"]
    names += [f"noise_fault_{op}" for op in MORE_NOISE_FAULTS]
    return names + [f"noise_seed{seed}" for seed in MORE_NOISE_SEEDS] + list(OTHER_SEED_FAULTS)


TENSOR_VARIANTS = ("golden", "noise", "noise_fault_silu")
MD5_VARIANTS = ["golden", "noise"] + [f"fault_{op}" for op in FAULT_OPS]     # md5 cannot see through noise
KEEP_STACK = ("fault_silu", "noise_fault_silu")      # stack.json is large: kept where the stack column is tested


def _model():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16, hidden_act="silu",
                      attn_implementation="eager")
    return LlamaForCausalLM(cfg).to(torch.bfloat16)


def _mode(variant: str):
    """The variant's dispatch mode. Its arithmetic is numpy's: torch calls made inside it would be recorded by
    msprobe's API wrappers as calls of the step (outside another API call, in the backward pass)."""
    import numpy as np
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    fault = variant.split("fault_", 1)[1] if "fault_" in variant else None
    name, _, nth = (fault or "").partition("-")              # "<op>[.<overload>][-<nth call>]"
    op, _, overload = name.partition(".")
    fault_op = getattr(getattr(aten, op), overload or "default") if fault else None
    fault_call = int(nth or 1)
    noisy = variant.startswith("noise")
    gemms = {aten.mm.default, aten.addmm.default, aten.bmm.default}
    seed = int(variant[len("noise_seed"):].split("_")[0]) if variant.startswith("noise_seed") else NOISE_SEED
    rng = np.random.default_rng(seed)

    class Planted(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if noisy and func in gemms and out.dtype == torch.bfloat16:
                x = out.float().numpy()
                step = rng.integers(-1, 2, x.shape).astype(np.float32)        # -1, 0, +1: half the elements move
                step *= (rng.integers(0, 2, x.shape) == 1) & (x != 0)       # zeros stay exact zeros
                exponent = np.floor(np.log2(np.where(x == 0, np.float32(1), np.abs(x))))
                ulp = np.ldexp(np.float32(1), (exponent - 7).astype(np.int32)).astype(np.float32)
                moved = (x + step * np.float32(0.75) * ulp).astype(np.float32)   # rounds to the next bf16 value
                out = torch.from_numpy(moved).to(out.dtype)
            if func is fault_op:
                Planted.calls += 1
            if func is fault_op and Planted.calls == fault_call:
                x = out.float().numpy().copy()
                flat = x.reshape(-1)
                flat[::2] *= np.float32(SCALE)
                out = torch.from_numpy(x).to(out.dtype)
            return out

    return Planted()


def dump_one(variant: str, task: str, out: str) -> None:
    """One step of the model under msprobe's debugger, the variant's mode active; the step's rank dir to ``out``."""
    import torch
    from msprobe.pytorch import PrecisionDebugger

    torch.set_num_threads(1)
    model = _model()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "config.json")
        section = {"scope": [], "list": [], "data_mode": ["all"]}
        real_task = "tensor" if task == "tensor" else "statistics"
        if task == "md5":
            section["summary_mode"] = "md5"
        with open(config, "w") as fh:
            json.dump({"task": real_task, "dump_path": os.path.join(tmp, "dump"), "rank": [], "step": [],
                       "level": "L1" if task == "tensor" else "mix", real_task: section}, fh)
        debugger = PrecisionDebugger(config_path=config)
        debugger.start(model)
        with _mode(variant):
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        debugger.stop()
        debugger.step()
        found = glob.glob(os.path.join(tmp, "dump", "step0", "*", "dump.json"))
        if len(found) != 1:
            raise SystemExit(f"expected one dump.json under step0, found {found}")
        rank_dir = os.path.dirname(found[0])
        dest = os.path.join(out, "step0", "rank")
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(rank_dir, dest)
    stack = os.path.join(dest, "stack.json")
    if os.path.isfile(stack) and variant not in KEEP_STACK:
        os.remove(stack)
    if os.path.isfile(stack):
        with open(stack) as fh:
            text = fh.read()
        text = re.sub(r"File [^,\"]*?/(site-packages|dist-packages)/", r"File \1/", text)
        text = text.replace(os.path.abspath(__file__), "make_fixtures.py")
        with open(stack, "w") as fh:
            fh.write(text)
    print(json.dumps({"variant": variant, "task": task, "loss": loss.item()}), flush=True)


def msprobe_compare(target: str, golden: str, out: str) -> None:
    """msprobe's compare (CSV) and -da of one pair, kept under ``out``."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    msprobe = os.path.join(os.path.dirname(sys.executable), "msprobe")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([msprobe, "compare", "-tp", target, "-gp", golden, "-o", os.path.join(tmp, "csv")],
                       check=True, capture_output=True)
        csvs = glob.glob(os.path.join(tmp, "csv", "compare_result_*.csv"))
        if len(csvs) != 1:
            raise SystemExit(f"msprobe wrote {csvs} for {target}")
        with open(csvs[0], "rb") as src, gzip.GzipFile(os.path.join(out, "compare_result.csv.gz"), "wb",
                                                       mtime=0) as dst:
            shutil.copyfileobj(src, dst)
        run = subprocess.run([msprobe, "compare", "-tp", target, "-gp", golden, "-o", os.path.join(tmp, "da"),
                              "-da"], capture_output=True, text=True)
        found = glob.glob(os.path.join(tmp, "da", "diff_analyze_*.json"))
        if found:
            shutil.copy(found[0], os.path.join(out, "diff_analyze.json"))
            with open(found[0]) as fh:
                said = {rank: [node["op_name"] for node in nodes] for rank, nodes in json.load(fh).items()}
            text = f"msprobe -da named: {json.dumps(said)}\n"
        else:
            lines = [line for line in (run.stdout + run.stderr).splitlines() if "diff node" in line]
            text = f"msprobe -da wrote no file (rc {run.returncode}): {lines[-1] if lines else 'no message'}\n"
        with open(os.path.join(out, "da.txt"), "w") as fh:
            fh.write(text)


def repo_pair(name: str) -> None:
    """msprobe's compare of a dump.json from msprobe's own test suite (NPU machines, MindSpore or PyTorch) against a
    copy with every seventh entry's first output Max times 1.5: the copy to ``repo/<name>/target/dump.json``, the CSV
    (dump.json files compared, so no rank in its name) to ``msprobe_out/repo/<name>/``."""
    source = os.path.join(ROOT, "tests", "data", "msprobe_repo_fixtures", name, "dump.json")
    with open(source) as fh:
        doc = json.load(fh)
    for i, entry in enumerate(doc["data"].values()):
        outputs = entry.get("output") if isinstance(entry, dict) else None
        first = outputs[0] if isinstance(outputs, list) and outputs else None
        if i % 7 == 6 and isinstance(first, dict) and isinstance(first.get("Max"), float):
            first["Max"] *= 1.5
    target = os.path.join(HERE, "repo", name, "target")
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(target, "dump.json"), "w") as fh:
        json.dump(doc, fh, indent=1)
    out = os.path.join(HERE, "msprobe_out", "repo", name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    msprobe = os.path.join(os.path.dirname(sys.executable), "msprobe")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([msprobe, "compare", "-tp", os.path.join(target, "dump.json"), "-gp", source, "-o", tmp],
                       check=True, capture_output=True)
        (csv_path,) = glob.glob(os.path.join(tmp, "compare_result_*.csv"))
        with open(csv_path, "rb") as src, gzip.GzipFile(os.path.join(out, "compare_result.csv.gz"), "wb",
                                                        mtime=0) as dst:
            shutil.copyfileobj(src, dst)


def main() -> None:
    llama = os.path.join(HERE, "llama")
    for task in ("statistics", "md5", "tensor"):
        names = {"tensor": TENSOR_VARIANTS, "md5": MD5_VARIANTS}.get(task) or variants()
        for variant in names:
            subprocess.run([sys.executable, os.path.abspath(__file__), "dump", variant, task,
                            os.path.join(llama, task, variant)], check=True)
        for variant in names:
            if variant != "golden":
                msprobe_compare(os.path.join(llama, task, variant, "step0"),
                                os.path.join(llama, task, "golden", "step0"),
                                os.path.join(HERE, "msprobe_out", task, variant))
    samples = os.path.join(ROOT, "tests", "data")
    for sample in ("mlp_fp32_statistics_L1", "mlp_fp32_statistics_mix", "mlp_fp32_tensor_L1"):
        msprobe_compare(os.path.join(samples, sample, "step1"), os.path.join(samples, sample, "step0"),
                        os.path.join(HERE, "msprobe_out", "samples", sample))
    for name in ("npu_megatron_pytorch", "npu_megatron_mindspore"):    # the second needs mindspore beside msprobe
        repo_pair(name)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "dump":
        dump_one(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 3 and sys.argv[1] == "repo":
        repo_pair(sys.argv[2])
    else:
        main()
