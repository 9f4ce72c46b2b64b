"""Write llama/ and gpt2/: msprobe 26.2's own tensor dumps (level L1) of one training step of two tiny
transformers models under ``torch.autocast("cpu", dtype=torch.bfloat16)``.

Needs mindstudio-probe 26.2.0 (not a dependency of this project) and transformers; run by hand, not by CI.
From the repository root, in a throw-away environment:

    python -m venv /tmp/msp && /tmp/msp/bin/pip install mindstudio-probe==26.2.0 torch==2.13.0 transformers
    /tmp/msp/bin/python tests/data/msprobe_26_2_autocast/make_dumps.py

Each model is built from a config (one layer, hidden 32, vocab 64, SDPA attention, nothing downloaded) with float32
weights drawn from a fixed seed, and run for one step: forward and loss under autocast (bfloat16), backward and
SGD outside it, as the PyTorch AMP recipe writes it, under msprobe's PrecisionDebugger (task tensor, level L1,
msprobe's default API list). The step's dump (step0/rank/) replaces the model's folder here; stack.json is left
out (msprobe's call stacks name the paths of the machine that made them) and nothing else is changed.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from msprobe.pytorch import PrecisionDebugger

HERE = os.path.dirname(os.path.abspath(__file__))
SEQ, BATCH, VOCAB, HIDDEN = 8, 2, 64, 32


def gpt2() -> torch.nn.Module:
    """GPT-2: learned positions, Conv1D projections (addmm), GELU (tanh) MLP, dropout 0."""
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=HIDDEN, n_layer=1, n_head=2,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                      eos_token_id=0, attn_implementation="sdpa"))


def llama() -> torch.nn.Module:
    """Llama: RMSNorm, RoPE, grouped-query attention (4 heads, 2 KV heads), SiLU-gated MLP."""
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64,
                                        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                                        max_position_embeddings=16, hidden_act="silu",
                                        attn_implementation="sdpa"))


MODELS = {"gpt2": gpt2, "llama": llama}


def dump(name: str, seed: int = 0) -> dict:
    """One autocast (bfloat16) training step of model ``name`` under msprobe; its dump written to HERE/name."""
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = MODELS[name]()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(seed + 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "config.json")
        with open(config, "w") as fh:
            json.dump({"task": "tensor", "dump_path": os.path.join(tmp, "dump"), "rank": [], "step": [],
                       "level": "L1", "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}, fh)
        debugger = PrecisionDebugger(config_path=config)
        debugger.start(model)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        debugger.stop()
        debugger.step()
        found = glob.glob(os.path.join(tmp, "dump", "step0", "**", "dump.json"), recursive=True)
        if len(found) != 1:
            raise SystemExit(f"expected one dump.json under step0, found {found}")
        rank = os.path.dirname(found[0])
        out = os.path.join(HERE, name)
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(rank, out, ignore=shutil.ignore_patterns("stack.json"))
    with open(os.path.join(out, "dump.json")) as fh:
        calls = len(json.load(fh)["data"])
    return {"model": name, "loss": loss.item(), "calls": calls}


if __name__ == "__main__":
    if len(sys.argv) == 2:
        print(dump(sys.argv[1]), flush=True)
    else:       # one process per model: msprobe's debugger is one per process
        for model_name in sys.argv[1:] or list(MODELS):
            subprocess.run([sys.executable, os.path.abspath(__file__), model_name], check=True)
