"""Tensor summaries (spec 7.3): Max/Min/Mean/Norm, one engine per kind of tensor.

* A dense, finite float32/float64/bfloat16/float16 CPU tensor of at least 64 elements: the compiled
  one-pass reduction (:mod:`dumpers.torch_dump.stat_kernel`).
* Every other tensor (accelerators, integers, bool, complex, non-finite or small ones): torch's own
  reductions (:func:`reductions`: ``aminmax``, ``mean``, ``linalg.vector_norm``), which are also the
  reference the tests hold the kernel to.

:class:`StatBatch` collects every tensor of one API call (or one module call). ``add`` launches the
reductions on the device and returns the JSON item with the statistics still missing; ``resolve``
concatenates all pending statistics into one float64 tensor and brings it to the host with a single
``tolist()``, then fills the items. Nothing here synchronises per value on an accelerator; CPU
tensors, already on the host, are summarised to numbers inside ``add``. Statistics already computed in
the dump window are reused through the one :class:`~dumpers.torch_dump.statcache.StatCache`.
"""
from __future__ import annotations

import math
import zlib
from typing import Optional

import torch

from dumpers import format as fmt
from dumpers import json_render
from dumpers.torch_dump import stat_kernel
from dumpers.torch_dump.statcache import FINITE, StatCache, dense_block, version_of


def warm_up() -> None:
    """Load (the first time for this user: compile) the one-pass kernel now, not in the first dumped step."""
    stat_kernel.kernels()


_TENSOR = fmt.TORCH_TENSOR_TYPE
_DTYPES: dict = {}                      # dtype -> (its dump.json name, statistics kind)


def _dtype_info(dtype: torch.dtype) -> tuple:
    if dtype == torch.bool:
        kind = "bool"
    elif dtype.is_complex:
        kind = "complex"
    elif dtype.is_floating_point:
        kind = "float"
    else:
        kind = "int"
    info = _DTYPES[dtype] = (str(dtype), kind)
    return info


def kind_of(t: torch.Tensor) -> str:
    """The statistics kind of ``t``: empty, bool, scalar, complex, float or int."""
    if t.is_meta or t.numel() == 0:
        return "empty"
    kind = (_DTYPES.get(t.dtype) or _dtype_info(t.dtype))[1]
    return "scalar" if kind != "bool" and t.dim() == 0 else kind


_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _mean(t: torch.Tensor) -> torch.Tensor:
    """``t.mean()``; for fp16/bf16 the same value through the faster float32 sum (rounded back)."""
    if t.dtype in _LOW_PRECISION:
        return (t.sum(dtype=torch.float32) / t.numel()).to(t.dtype)
    return t.mean()


# dtypes the one-pass kernel reads (by the name it knows them by)
_ONE_PASS = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16",
             torch.float16: "float16"}


def _cpu_numbers(t: torch.Tensor, kind: str) -> list:
    """The statistics of a CPU tensor as Python numbers, computed now (no later sync to save on the host).

    Finite float32/float64/bfloat16/float16 tensors whose elements fill one block of memory (contiguous or
    permuted: their statistics do not depend on the order of the elements) take the one-pass kernel;
    everything else takes torch's reductions.
    """
    if kind == "float" and t.dtype in _ONE_PASS and not t.is_neg() and dense_block(t):
        numbers = stat_kernel.summarize_memory(t.data_ptr(), t.numel(), _ONE_PASS[t.dtype])
        if numbers is not None:
            return numbers
    if kind == "scalar":                # read now: no copy needed to outlive an in-place call
        return [(t.abs() if t.is_complex() else t).item()]
    return [v.item() for v in reductions(t, kind)]


def reductions(t: torch.Tensor, kind: str) -> list:
    """The statistics of ``t`` as 0-d tensors on its device (no host sync, no per-tensor stacking): torch's
    own reductions, the reference of the one-pass kernel."""
    if kind == "bool":
        return [t.any(), t.all()]
    if kind == "scalar":        # a copy: an in-place call may change the value before resolve() reads it
        return [t.abs() if t.is_complex() else t.clone()]
    if kind == "complex":
        a = t.abs()
        mn, mx = torch.aminmax(a)
        return [mx, mn, a.mean()]
    mn, mx = torch.aminmax(t)
    if kind == "int":
        return [mx, mn]
    return [mx, mn, _mean(t), torch.linalg.vector_norm(t)]


def _except_inf_nan(t: torch.Tensor) -> tuple:
    """Max/min over finite values; over non-NaN values if none is finite; NaN if all are NaN."""
    flat = t.detach().reshape(-1)
    if flat.is_complex():
        flat = flat.abs()
    finite = flat[torch.isfinite(flat)]
    if finite.numel():
        return finite.max().item(), finite.min().item()
    not_nan = flat[~torch.isnan(flat)]
    if not_nan.numel():
        return not_nan.max().item(), not_nan.min().item()
    return math.nan, math.nan


def crc32_hex(t: torch.Tensor) -> str:
    """The ``md5`` field: CRC32 of the tensor's raw CPU bytes (bf16 first cast to fp32), 8 hex digits."""
    data = t.detach()
    if data.dtype == torch.bfloat16:
        data = data.float()
    data = data.cpu().contiguous()
    try:
        raw = data.numpy().tobytes()
    except (TypeError, RuntimeError):
        raw = data.view(torch.uint8).numpy().tobytes() if data.numel() else b""
    return f"{zlib.crc32(raw) & 0xFFFFFFFF:08x}"


class StatBatch:
    """The tensor items of one call; statistics filled by :meth:`resolve` with one host transfer."""

    __slots__ = ("md5", "cache", "pending", "keep_inputs")

    def __init__(self, md5: bool = False, cache: Optional[StatCache] = None, keep_inputs: bool = False) -> None:
        self.md5 = md5
        self.cache = cache
        self.keep_inputs = keep_inputs    # an API call's inputs are remembered too (see add)
        self.pending: list = []

    def add(self, t: torch.Tensor, cacheable: bool = False) -> dict:
        """The JSON item for ``t`` (type, dtype, shape, statistics, requires_grad).

        ``cacheable``: ``t`` was just produced by a recorded call (an output) or takes part in autograd
        (``requires_grad``). Other inputs are remembered only with ``keep_inputs`` (the inputs of a captured
        API call: any write to them through a captured call is seen, see :mod:`statcache`), not those of
        module calls, whose inner calls may be invisible (level L0). CPU statistics are filled in at
        once; accelerator ones by :meth:`resolve`.
        """
        info = _DTYPES.get(t.dtype)
        if info is None:
            info = _dtype_info(t.dtype)
        requires_grad = t.requires_grad
        cache = self.cache
        version = version_of(t) if cache is not None else None
        if version is not None:
            hit = cache.get(t, version)
            if hit is not None:
                mx, mn, mean, norm, extra = hit
                item = {"type": _TENSOR, "dtype": info[0], "shape": list(t.shape), "Max": mx, "Min": mn,
                        "Mean": mean, "Norm": norm, "requires_grad": requires_grad}
                if extra and extra is not FINITE:
                    item.update(extra)
                return item
        item = {"type": _TENSOR, "dtype": info[0], "shape": list(t.shape), "Max": None, "Min": None, "Mean": None,
                "Norm": None, "requires_grad": requires_grad}
        kind = kind_of(t)
        if kind == "empty":
            return item
        cacheable = (cacheable or self.keep_inputs) and version is not None
        data = t.detach() if requires_grad else t
        if data.layout != torch.strided:
            data = data.to_dense()
        if data.is_cpu:                 # on the host already: the numbers now, no later transfer
            values = _cpu_numbers(data, kind)
        else:
            values = reductions(data, kind)
        if isinstance(values[0], torch.Tensor):
            gen = cache.generation if cache is not None else None
            self.pending.append((item, kind, data, values, t if cacheable else None, version, gen))
            return item
        self._fill(item, kind, data, values)
        if cacheable:
            cache.put_item(t, version, item)
        return item

    def text(self, t: torch.Tensor, cacheable: bool, level: int) -> str:
        """The dump.json text at ``level`` of the item :meth:`add` makes for ``t``, with the same effects.

        ``t`` is a strided CPU tensor (:func:`dumpers.torch_dump.entry_text.plain_value`). One with ordinary
        statistics (finite floats, integers) is rendered straight from its numbers, without the item
        dict; anything else goes through :meth:`add` and the renderer. This runs for most tensors of a
        step, so it asks the tensor for as few attributes as it can, and its look-up at the top repeats
        :meth:`add`'s on purpose: a shared helper costs a measurable share of the per-call time.
        """
        dtype = t.dtype
        info = _DTYPES.get(dtype)
        if info is None:
            info = _dtype_info(dtype)
        requires_grad = t.requires_grad
        shape = t.shape
        cache = self.cache
        version = version_of(t) if cache is not None else None
        if version is not None:
            hit = cache.get(t, version)
            if hit is not None:
                mx, mn, mean, norm, extra = hit
                if extra is FINITE:      # four finite floats (the one-pass kernel's): the short renderer
                    text = json_render.finite_tensor_text(info[0], shape, mx, mn, mean, norm, requires_grad, level)
                    if text is not None:
                        return text
                elif extra is None:
                    text = json_render.tensor_text(info[0], shape, mx, mn, mean, norm, requires_grad, level)
                    if text is not None:
                        return text
                return self._text_of(t, cacheable, level)
        kind = info[1]
        if kind not in ("float", "int") or self.md5 or not shape or 0 in shape:
            return self._text_of(t, cacheable, level)
        cacheable = (cacheable or self.keep_inputs) and version is not None
        if kind == "float":
            values = None
            if dtype in _ONE_PASS and t.is_contiguous() and not t.is_neg():
                values = stat_kernel.summarize_memory(t.data_ptr(), t.numel(), _ONE_PASS[dtype])
            if values is None:          # the one-pass kernel answers for finite data only
                return self._text_of(t, cacheable, level)
            mx, mn, mean, norm = values
            if cacheable:
                cache.put(t, version, (mx, mn, mean, norm, FINITE))
            text = json_render.finite_tensor_text(info[0], shape, mx, mn, mean, norm, requires_grad, level)
            return text if text is not None else self._text_of(t, cacheable, level)
        mx, mn = (v.item() for v in reductions(t.detach() if requires_grad else t, kind))
        mean = norm = None
        if cacheable:
            cache.put(t, version, (mx, mn, mean, norm, None))
        text = json_render.tensor_text(info[0], shape, mx, mn, mean, norm, requires_grad, level)
        return text if text is not None else self._text_of(t, cacheable, level)

    def _text_of(self, t: torch.Tensor, cacheable: bool, level: int) -> str:
        item = self.add(t, cacheable)
        if self.pending:
            self.resolve()
        text = json_render.tensor_item_text(item, level)
        return text if text is not None else json_render.dumps_json_fast(item, level)

    def resolve(self) -> None:
        """Fill every pending item with one host transfer per device.

        Accelerator statistics are stacked per dtype and brought over with one ``tolist()``; CPU
        statistics were read as numbers by :meth:`add` (``item()`` per value is cheaper than any stacking).
        """
        if not self.pending:
            return
        groups: dict = {}                 # (device, dtype) -> 0-d statistic tensors (accelerators only)
        slots = []                        # per pending item: numbers, or (group key, position) pairs
        for entry in self.pending:
            values = entry[3]
            if not isinstance(values[0], torch.Tensor):
                slots.append(values)
                continue
            item_slots = []
            for value in values:
                key = (value.device, value.dtype)
                group = groups.setdefault(key, [])
                item_slots.append((key, len(group)))
                group.append(value)
            slots.append(item_slots)
        host: dict = {}
        offsets: dict = {}
        if groups:
            parts: dict = {}
            for key, values in groups.items():
                device_parts = parts.setdefault(key[0], [])
                offsets[key] = sum(p.numel() for p in device_parts)
                device_parts.append(torch.stack(values).to(torch.float64))
            host = {device: (torch.cat(p) if len(p) > 1 else p[0]).tolist() for device, p in parts.items()}
        cache = self.cache
        for (item, kind, data, values, t, version, gen), item_slots in zip(self.pending, slots):
            if not isinstance(values[0], torch.Tensor):
                numbers = item_slots
            else:
                numbers = [host[key[0]][offsets[key] + i] for key, i in item_slots]
            self._fill(item, kind, data, numbers)
            if cache is not None and t is not None:
                cache.put_item(t, version, item, gen)
        self.pending.clear()

    def _fill(self, item: dict, kind: str, data: torch.Tensor, v: list) -> None:
        if kind == "bool":
            item["Max"], item["Min"] = bool(v[0]), bool(v[1])
        elif kind == "int":
            item["Max"], item["Min"] = int(v[0]), int(v[1])
        elif kind == "scalar":
            x = v[0]
            if not data.is_floating_point() and not data.is_complex():
                x = int(x)
            item["Max"] = item["Min"] = item["Mean"] = item["Norm"] = x
        elif kind == "complex":
            item["Max"], item["Min"], item["Mean"] = v
        else:
            item["Max"], item["Min"], item["Mean"], item["Norm"] = v
        mx, mn = item["Max"], item["Min"]
        if isinstance(mx, float) and not (math.isfinite(mx) and math.isfinite(mn)):
            item["Max_except_inf_nan"], item["Min_except_inf_nan"] = _except_inf_nan(data)
        if self.md5:
            item["md5"] = crc32_hex(data)
