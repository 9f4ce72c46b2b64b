"""A bf16 Llama training step for ``pytest-msprobe attribute examples/attribute_step.py:step``.

A tiny Llama (2 layers, random seeded weights) in bfloat16 on the CPU. With ``PLANT_FAULT=silu`` in the
environment, aten's CPU silu kernel is made 5% too large in bfloat16 (the bench, in float32, stays correct),
to see what attribution says about a real fault. Nothing is downloaded.
"""
from __future__ import annotations

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=32, attn_implementation="sdpa",
                     hidden_act="silu", initializer_range=0.2)
model = LlamaForCausalLM(config).to(torch.bfloat16)
ids = torch.randint(0, 64, (2, 8))
batch = {"input_ids": ids, "labels": ids.clone()}


def step() -> torch.Tensor:
    """One forward and backward pass; returns the loss (the optimizer step is not part of it)."""
    loss = model(**batch).loss
    loss.backward()
    return loss


def _faulty_silu(x: torch.Tensor) -> torch.Tensor:
    y = x.float() * torch.sigmoid(x.float())
    return (y * 1.05 if x.dtype == torch.bfloat16 else y).to(x.dtype)


if os.environ.get("PLANT_FAULT") == "silu":
    _FAULT = torch.library.Library("aten", "IMPL")
    _FAULT.impl("silu", _faulty_silu, "CPU")
