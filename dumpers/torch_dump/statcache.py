"""Statistics already computed in this step, reused for a tensor seen again unchanged.

Most tensors of a step are summarised more than once: an op's output is the next op's input, AdamW
reads a gradient twice, a reshape or transpose views the bytes its base holds. :class:`StatCache`
remembers the statistics of every tensor it is given and hands them back while nothing can have
written the tensor since. Validity, checked on every hit:

* the very same Python object (a weak reference: a dead tensor's entry is never matched, its id may be
  reused) at the same version counter (bumped by every in-place op, in ``no_grad`` too), over the same
  memory (``data_ptr``), dtype, shape and strides (``t.data = other`` swaps them without a bump); or a
  view of the same base (views share their base's version counter) over the same dense block of
  memory (a reshape or transpose: the same elements, so the same Max/Min/Mean/Norm);
* no recorded write to the tensor's storage since the entry was made: every captured call that writes
  (in-place methods and functions, ``out=``, ``inplace=True``, ``__setitem__``, collectives, and
  batch/instance norm, whose running statistics are updated without a version bump) marks the storages
  it writes (:meth:`StatCache.wrote`), which catches writes through another tensor object with its own
  version counter over the same storage (``p.data.add_()``, ``p.data.copy_()``).

Entries live for one dump window: the session clears the cache at ``stop()`` and ``step()``, so writes
while the dump is off cannot leave a stale entry behind. What is not detected: writes through memory
that torch does not see as the same storage or a tracked write (numpy arrays over a tensor's memory,
DLPack, ``data_ptr`` in custom kernels or ctypes, c10d writes from C++ such as DDP's and FSDP's bucket
traffic) between two sightings of a tensor in one window. ``MSPROBE_DUMP_STAT_CACHE=0`` switches reuse off.
"""
from __future__ import annotations

import os
import types
import weakref
from typing import Any, Optional

import torch

FINITE = types.MappingProxyType({})   # an entry's "extra keys" when its four statistics are finite floats
EXTRA_KEYS = ("Max_except_inf_nan", "Min_except_inf_nan", "md5")

_INPLACE_DUNDERS = frozenset(("__iadd__", "__iand__", "__idiv__", "__ifloordiv__", "__ilshift__", "__imod__",
                              "__imul__", "__ior__", "__ipow__", "__irshift__", "__isub__", "__itruediv__",
                              "__ixor__", "__imatmul__", "__setitem__"))
_SILENT_WRITERS = ("batch_norm", "instance_norm")   # running statistics written without a version bump
_writes_memo: dict = {}


def enabled() -> bool:
    """``MSPROBE_DUMP_STAT_CACHE=0`` (or false/no/off): every tensor is summarised (and saved) afresh."""
    return os.environ.get("MSPROBE_DUMP_STAT_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def version_of(t: torch.Tensor) -> Optional[int]:
    """The tensor's version counter (bumped by every in-place write, autograd's gradient accumulation
    included); None for inference tensors, which have none (never cached). torch has no public accessor
    for it; this is the one place the dumper reads it."""
    try:
        return t._version
    except RuntimeError:
        return None


def _view_base(t: torch.Tensor) -> Optional[torch.Tensor]:
    """The tensor ``t`` is a view of (None if it is none): views share their base's version counter, so
    a view's statistics may be found by its block of memory from another view of the same base. torch has
    no public accessor for it."""
    return t._base


def writes_of(api: str) -> int:
    """What a call of ``api`` writes: 0 nothing known, 1 its first argument, 2 every tensor argument."""
    kind = _writes_memo.get(api)
    if kind is None:
        if any(s in api for s in _SILENT_WRITERS):
            kind = 2
        elif api in _INPLACE_DUNDERS or (api.endswith("_") and not api.startswith("__")):
            kind = 1
        else:
            kind = 0
        _writes_memo[api] = kind
    return kind


def _tensors(value: Any, out: list, depth: int = 0) -> list:
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)) and depth < 2:
        for v in value:
            _tensors(v, out, depth + 1)
    return out


def written_tensors(api: str, args: tuple, kwargs: dict, collective: bool = False) -> list:
    """The tensors a captured call of ``api`` with these arguments may have written."""
    kind = 2 if collective else writes_of(api)
    found: list = []
    if kind == 2:
        _tensors(args, found)
        _tensors(list(kwargs.values()), found)
        return found
    if kind == 1 and args:
        _tensors(args[0], found)
    if kwargs:
        if "out" in kwargs:
            _tensors(kwargs["out"], found)
        if kwargs.get("inplace") is True and args:
            _tensors(args[0], found)
    return found


def dense_block(t: torch.Tensor) -> bool:
    """The elements fill one block of numel slots from ``data_ptr()`` in some order of the dimensions."""
    if t.is_contiguous():
        return True
    expected = 1
    for stride, size in sorted(zip(t.stride(), t.shape)):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


class StatCache:
    """Statistics by tensor (see the module docstring for when an entry is valid).

    An entry holds (Max, Min, Mean, Norm, extra), ``extra`` being a dict of the extra keys (``md5``,
    ``*_except_inf_nan``), None, or :data:`FINITE` (no extra keys, and the four are finite floats: they
    render without checks). With ``md5`` the checksum follows the element order, so views share an
    entry only when both are contiguous.
    """

    def __init__(self, md5: bool = False, limit: int = 8192) -> None:
        self.md5 = md5
        self._entries: dict = {}          # id(t) -> (ref, version, stats, data_ptr, dtype, shape, strides, base, gen)
        # (id(view base), data_ptr, numel, dtype) -> (ref of the view base, version, stats, base, gen)
        self._blocks: dict = {}
        self._written: dict = {}          # storage address -> generation of the last recorded write
        self._gen = 0
        self._floor = 0                   # statistics read before the last clear() are not taken
        self._limit = limit

    def get(self, t: torch.Tensor, version: int) -> Optional[tuple]:
        """The statistics of ``t`` at ``version`` if still valid, else None."""
        try:
            hit = self._entries.get(id(t))
            if hit is not None and hit[1] == version and hit[0]() is t and hit[3] == t.data_ptr() \
                    and hit[4] == t.dtype and hit[5] == t.shape and hit[6] == t.stride() \
                    and (not self._written or self._written.get(hit[7], -1) <= hit[8]):
                return hit[2]
            owner = _view_base(t)
            if owner is None:
                return None
            # a view: the same dense block as its base or another view of it
            key = self._block_key(t, owner)
            if key is None:
                return None
            hit = self._blocks.get(key)
            if hit is not None and hit[1] == version and hit[0]() is owner \
                    and (not self._written or self._written.get(hit[3], -1) <= hit[4]):
                return hit[2]
            hit = self._entries.get(id(owner))
            if hit is not None and hit[1] == version and hit[0]() is owner and hit[3] == key[1] \
                    and hit[4] == key[3] and owner.numel() == key[2] and self._block_key(owner, owner) == key \
                    and (not self._written or self._written.get(hit[7], -1) <= hit[8]):
                return hit[2]
        except Exception:  # noqa: BLE001 - a tensor without plain memory: no reuse
            pass
        return None

    def _block_key(self, t: torch.Tensor, owner: torch.Tensor) -> Optional[tuple]:
        """``(id(owner), data_ptr, numel, dtype)`` of a tensor whose elements fill one block, else None."""
        if t.dim() == 0 or t.is_neg() or t.is_conj() or not (t.is_contiguous() if self.md5 else dense_block(t)):
            return None
        return (id(owner), t.data_ptr(), t.numel(), t.dtype)

    @property
    def generation(self) -> int:
        """The count of recorded writes: statistics read now are valid against writes recorded later."""
        return self._gen

    def put(self, t: torch.Tensor, version: Optional[int], stats: tuple, gen: Optional[int] = None) -> None:
        """Remember ``stats`` (Max, Min, Mean, Norm, extra) of ``t`` at ``version``.

        ``gen``: the :attr:`generation` when the statistics were read (default: now); statistics read
        before a call and filled in after it (accelerators) must not outlive that call's writes.
        """
        if version is None:
            return
        if len(self._entries) >= self._limit or len(self._written) >= 4 * self._limit:
            self.clear()
        try:
            ref = weakref.ref(t)
            base = t.untyped_storage().data_ptr()
            if gen is None:
                gen = self._gen
            elif gen < self._floor:
                return
            self._entries[id(t)] = (ref, version, stats, t.data_ptr(), t.dtype, t.shape, t.stride(), base, gen)
            owner = _view_base(t)
            if owner is not None:         # a view: found by its block from other views of the same base
                key = self._block_key(t, owner)
                if key is not None:
                    self._blocks[key] = (weakref.ref(owner), version, stats, base, gen)
        except Exception:  # noqa: BLE001 - not weak-referenceable, no plain storage: simply not remembered
            self._entries.pop(id(t), None)

    def put_item(self, t: torch.Tensor, version: Optional[int], item: dict, gen: Optional[int] = None) -> None:
        """:meth:`put` from a filled dump.json item."""
        extra = {k: item[k] for k in EXTRA_KEYS if k in item} if len(item) > 8 else None
        self.put(t, version, (item["Max"], item["Min"], item["Mean"], item["Norm"], extra or None), gen)

    def wrote(self, tensors: list) -> None:
        """A captured call wrote ``tensors``: entries over their storages are no longer valid."""
        for t in tensors:
            try:
                base = t.untyped_storage().data_ptr()
            except Exception:  # noqa: BLE001 - no plain storage: nothing of it is remembered either
                continue
            self._gen += 1
            self._written[base] = self._gen

    def unchanged_since(self, t: torch.Tensor, mark: Optional[tuple]) -> bool:
        """``t`` is the object :meth:`mark` was taken of, and nothing has written it since."""
        return mark is not None and mark[0]() is t and mark[1] == version_of(t) and mark[2] == t.data_ptr() \
            and mark[3] == t.dtype and mark[4] == t.shape and mark[5] == t.stride() \
            and (not self._written or self._written.get(mark[6], -1) <= mark[7])

    def mark(self, t: torch.Tensor) -> Optional[tuple]:
        """A token for :meth:`unchanged_since` (None: ``t`` cannot be tracked)."""
        try:
            version = version_of(t)
            if version is None:
                return None
            return (weakref.ref(t), version, t.data_ptr(), t.dtype, t.shape, t.stride(),
                    t.untyped_storage().data_ptr(), self._gen)
        except Exception:  # noqa: BLE001 - inference tensors (no version counter), no plain storage
            return None

    def clear(self) -> None:
        self._gen += 1
        self._floor = self._gen
        self._entries.clear()
        self._blocks.clear()
        self._written.clear()
