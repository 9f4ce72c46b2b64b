"""Small models that other people wrote (transformers), built from configs with random weights.

Each builder returns ``(model, batch, loss_fn)`` for one training step: ``loss_fn(model, batch)`` runs the
forward pass and returns the loss. Widths of 32-64, two layers and short sequences keep a step fast; nothing
is downloaded (the configs are written here, the weights are random).
"""
from __future__ import annotations

import os
import re
import sys
from typing import Any

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SEQ, BATCH, VOCAB = 8, 2, 64
_TORCHVISION_SHIM: list = []


def _tolerate_broken_torchvision() -> Any:
    """Where a torchvision is installed that cannot load beside this torch, let transformers import it.

    The tests need no torchvision (the test extra does not install it), but transformers imports it when it
    is installed. PyPI's Linux torchvision wheel is built against torch's CUDA build; beside the CPU build of
    torch it fails at import, registering fake kernels for ``torchvision::nms``/``qnms`` that do not exist.
    Only in that case are the missing op schemas declared (without kernels, nothing calls them) and the import
    retried; without torchvision nothing is done.
    """
    import importlib.util
    if importlib.util.find_spec("torchvision") is None:
        return None
    for _ in range(8):
        try:
            import torchvision
            return torchvision
        except RuntimeError as exc:
            match = re.search(r"operator torchvision::(\w+) does not exist", str(exc))
            if match is None:
                raise
            for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
                del sys.modules[name]
            lib = torch.library.Library("torchvision", "FRAGMENT")
            lib.define(f"{match.group(1)}(Tensor[] args) -> Tensor")
            _TORCHVISION_SHIM.append(lib)       # the library object must live as long as the schema
    raise ImportError("torchvision could not be imported")


try:       # before transformers, which imports torchvision when it is installed
    _tolerate_broken_torchvision()
except ImportError:
    pass


def _lm_batch() -> dict:
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    return {"input_ids": ids, "labels": ids.clone()}


def _hf_loss(model: Any, batch: dict) -> torch.Tensor:
    return model(**batch).loss


def llama(**config: Any) -> tuple:
    """A Llama-style decoder: GQA (4 heads, 2 KV heads), RoPE, SDPA attention, RMSNorm, SiLU MLP.

    ``config`` overrides entries of the configuration (``initializer_range``, ``num_hidden_layers``...)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**{**dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                attn_implementation="sdpa", hidden_act="silu"), **config})
    return LlamaForCausalLM(cfg), _lm_batch(), _hf_loss


GPT2_EMBD = 32
GPT2_INNER = 4 * GPT2_EMBD      # GPT2Config's default MLP width: the longest reduction of its forward pass


def gpt2(**config: Any) -> tuple:
    """GPT-2 (Conv1D projections, NewGELU written with Python scalars, learned positions), dropout 0.

    ``config`` overrides entries of the configuration (``activation_function``, ``initializer_range``...)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(**{**dict(vocab_size=VOCAB, n_positions=16, n_embd=GPT2_EMBD, n_layer=2, n_head=2,
                               resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0), **config})
    return GPT2LMHeadModel(cfg), _lm_batch(), _hf_loss


def bert() -> tuple:
    """BERT masked-LM (token types, GELU, post-LayerNorm)."""
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    batch = _lm_batch()
    batch["token_type_ids"] = torch.zeros_like(batch["input_ids"])
    return BertForMaskedLM(cfg), batch, _hf_loss


def t5() -> tuple:
    """T5 encoder-decoder (relative position bias, T5 layer norm, cross attention)."""
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2,
                   num_heads=2, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)
    ids = torch.randint(1, VOCAB, (BATCH, SEQ))
    return T5ForConditionalGeneration(cfg), {"input_ids": ids, "labels": torch.flip(ids, [1])}, _hf_loss


def vit() -> tuple:
    """A Vision Transformer classifier on 32x32 images (patch embedding convolution, CLS token)."""
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=64, num_labels=10, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)
    batch = {"pixel_values": torch.randn(BATCH, 3, 32, 32), "labels": torch.randint(0, 10, (BATCH,))}
    return ViTForImageClassification(cfg), batch, _hf_loss


def resnet() -> tuple:
    """transformers' ResNet (basic blocks, BatchNorm, max pool, adaptive average pool), one block per stage,
    two stages."""
    from transformers import ResNetConfig, ResNetForImageClassification
    cfg = ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[32, 64], depths=[1, 1], layer_type="basic",
                       hidden_act="relu", num_labels=10)
    batch = {"pixel_values": torch.randn(BATCH, 3, 32, 32), "labels": torch.randint(0, 10, (BATCH,))}
    return ResNetForImageClassification(cfg), batch, _hf_loss


MODELS: dict = {"llama": llama, "gpt2": gpt2, "bert": bert, "t5": t5, "vit": vit, "resnet": resnet}


def build(name: str, seed: int = 0) -> tuple:
    """The model, batch and loss function of ``name``, identical for the same seed."""
    torch.manual_seed(seed)
    model, batch, loss_fn = MODELS[name]()
    model.train()
    return model, batch, loss_fn


def train_step(name: str, debugger: Any = None, seed: int = 0) -> tuple:
    """One step (forward, loss, backward, AdamW), dumped when ``debugger`` is given: (loss, parameters)."""
    model, batch, loss_fn = build(name, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if debugger is not None:
        debugger.start(model)
    loss = loss_fn(model, batch)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if debugger is not None:
        debugger.stop()
        debugger.step()
    return loss.detach().clone(), {k: v.detach().clone() for k, v in model.state_dict().items()}
