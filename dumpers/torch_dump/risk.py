"""Risk levels of the PyTorch APIs and the ``risk_level`` config key, as msprobe 26.2 applies them.

msprobe 26.2 sorts every API into one of three levels by its name (the part after the prefix:
``Tensor.transpose`` is ``transpose``, ``Torch.linalg.matmul`` is ``linalg.matmul``, whatever the prefix):
core (matrix products, convolutions, normalisations, embeddings, attention, the fused Adam steps, every
collective and every ``torch_npu`` API), low (shape and layout changes, joins and splits, dtype casts,
factories, ``clamp``, ``clone``) and focus (everything else). ``risk_level`` keeps, at levels ``L1`` and
``mix``:

- ``"ALL"``: every API;
- ``"FOCUS"``: all but the low ones (msprobe 26.2's default when the key is absent);
- ``"CORE"``: the core ones only.

Module entries are always kept, and a ``scope`` or ``list`` in the task section replaces the rule (every
API is then a candidate). msprobe 26.2 takes an empty value (``null``, ``""``) as ``"ALL"``. Two facts of
msprobe 26.2, kept so that dumps line up with its own (checked by running it): ``linear`` and
``chain_matmul`` are not core (``Functional.linear`` is not dumped at ``"CORE"``), and ``gather`` and
``scatter`` are core whatever the prefix (they are collectives' names too).
"""
from __future__ import annotations

import functools
import os
from typing import Any, Callable

import torch

from dumpers.config_keys import RISK_ALL as ALL
from dumpers.config_keys import RISK_CORE as CORE
from dumpers.config_keys import RISK_FOCUS as FOCUS
from dumpers.torch_dump import statcache, wrap_lists

LOW = "LOW"


def _names(text: str) -> frozenset:
    return frozenset(text.split())


CORE_APIS = _names("""
matmul __matmul__ bmm addmm addmm_ addbmm addbmm_ baddbmm baddbmm_ mm mv addmv addmv_ addr addr_
linalg.matmul linalg.multi_dot linalg.vecdot bilinear
conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d conv_tbc convolution _convolution
batch_norm instance_norm layer_norm group_norm local_response_norm _batch_norm_impl_index batch_norm_elemt
batch_norm_stats batch_norm_update_stats batch_norm_gather_stats batch_norm_gather_stats_with_counts
batch_norm_backward_elemt batch_norm_backward_reduce
embedding embedding_bag multi_head_attention_forward scaled_dot_product_attention
_fused_adamw_ _fused_adam_ batch_isend_irecv
npu_dropout_add_layer_norm npu_rotary_position_embedding npu_mm_all_reduce_add_rms_norm
npu_mm_all_reduce_add_rms_norm_ npu_gmm npu_gmm_v2 npu_grouped_mat_mul_all_reduce npu_moe_token_permute
npu_moe_token_unpermute npu_ring_attention_update npu_matmul_add_fp32 npu_groupmatmul_add_fp32 npu_quant_gmm
npu_quant_gmm_v2 npu_apply_fused_ema_adamw
""") | frozenset(wrap_lists.DISTRIBUTED) | frozenset(wrap_lists.NPU)

LOW_APIS = _names("""
squeeze unsqueeze reshape reshape_as view view_as flatten unflatten expand expand_as repeat repeat_interleave
tile transpose permute moveaxis movedim swapaxes swapdims ravel unfold align_as align_to
chunk unsafe_chunk split split_with_sizes unsafe_split unsafe_split_with_sizes tensor_split hsplit vsplit dsplit
unbind stack cat concat concatenate hstack vstack dstack column_stack row_stack atleast_1d atleast_2d atleast_3d
to type_as float double int long half bfloat16 byte char bool cfloat numpy __bool__ stride clone clamp
empty empty_like zeros zeros_like ones ones_like full full_like arange linspace logspace eye identity
diag diagflat diag_embed triu tril triu_indices tril_indices
""")


def level_of(api: str) -> str:
    """``CORE``, ``LOW`` or ``FOCUS`` for an API name without its prefix (``transpose``, ``linalg.matmul``)."""
    if api in CORE_APIS:
        return CORE
    if api in LOW_APIS:
        return LOW
    return FOCUS


def keeps(risk_level: str, api: str) -> bool:
    """True when a dump at ``risk_level`` records calls of ``api`` (decide once per API name, not per call)."""
    if risk_level == ALL:
        return True
    level = level_of(api)
    if risk_level == CORE:
        return level == CORE
    return level != LOW



def run_skipped(session: Any, base: str, idx: int, api: str, func: Callable, args: tuple, kwargs: dict) -> Any:
    """Run a call the risk level leaves out of dump.json and stack.json.

    What it writes still ends the reuse of those tensors' statistics, and at level ``mix`` it keeps its
    construct.json nodes, forward and backward: msprobe 26.2's construct.json is the same at every risk level.
    """
    construct = session.with_construct
    if construct:
        parent = session.parent()
        before = [(a, a.grad_fn) for a in args if type(a) is torch.Tensor] if "dropout" in base else ()
    result = func(*args, **kwargs)
    cache = session.cache
    if cache is not None and (statcache.writes_of(api) or "out" in kwargs or "inplace" in kwargs):
        try:
            cache.wrote(statcache.written_tensors(api, args, kwargs))
        except Exception:  # noqa: BLE001 - forget everything rather than risk a stale entry
            session.forget_reuse()
    if construct:
        try:
            session.add_construct(f"{base}.{idx}.forward", parent)
            session._hook_backward(result, base, idx, before, functools.partial(_backward_node, session))
        except Exception as exc:  # noqa: BLE001 - the dumper must never break training
            session._internal_error(exc)
    return result


def _backward_node(session: Any, key: str, generation: int, grad_inputs: tuple, grad_outputs: tuple) -> None:
    """The construct.json node of a skipped call's backward (its autograd node ran)."""
    if session.on and generation == session.generation and os.getpid() == session.pid:
        session.add_construct(key, session.parent())
