"""The dtype and requires_grad rules of Result, and how they read a MindSpore side against a PyTorch side.

msprobe 26.2 compares the dtype cells as text and the requires_grad cells whenever both are non-empty. Across
frameworks that marks every matched row an error: MindSpore spells ``Float32`` what PyTorch spells
``torch.float32``, and a MindSpore dump records no requires_grad (``N/A``). Here a compare of a MindSpore side
against a PyTorch side judges a dtype by its kind and width (``Float32`` equals ``torch.float32``; ``Float16``
against ``torch.float32`` is still an error) and leaves out the requires_grad rule where one side did not record
it. Dumps of one framework keep msprobe's rules exactly. The statistics compare over columns (:mod:`.columnar`)
and the line-by-line rules (:func:`.table.check_api`, the tensor compare's) both ask a :class:`Rules`; the md5
compare has neither rule.
"""
from __future__ import annotations

from dataclasses import dataclass

from .rows import NA

PYTORCH = "pytorch"                                   # dump.json's framework values
MINDSPORE_FRAMEWORKS = ("mindspore", "mindtorch")     # the sides msprobe compares with its MindSpore compare

# MindSpore's dtype text -> the torch dtype of the same kind and width
_MINDSPORE_AS_TORCH = {name: "torch." + same for name, same in (
    ("Bool", "bool"), ("Int8", "int8"), ("Int16", "int16"), ("Int32", "int32"), ("Int64", "int64"),
    ("UInt8", "uint8"), ("UInt16", "uint16"), ("UInt32", "uint32"), ("UInt64", "uint64"), ("Float16", "float16"),
    ("Float32", "float32"), ("Float64", "float64"), ("BFloat16", "bfloat16"), ("Complex64", "complex64"),
    ("Complex128", "complex128"), ("Float8E4M3FN", "float8_e4m3fn"), ("Float8E5M2", "float8_e5m2"))}


def dtype_kind(text: str) -> str:
    """One spelling for a dtype of either framework: a MindSpore dtype as torch names it (``Float32`` ->
    ``torch.float32``); any other text (torch's own, a Python class, a dtype without a counterpart) as it is."""
    return _MINDSPORE_AS_TORCH.get(text, text)


@dataclass(frozen=True)
class Rules:
    """How the dtype and requires_grad rules read one pair of dumps (``cross``: one side MindSpore, the other
    PyTorch)."""

    cross: bool = False

    def dtypes_differ(self, target: str, golden: str) -> bool:
        """Whether the dtype rule flags a matched row."""
        if target == golden:
            return False
        return not self.cross or dtype_kind(target) != dtype_kind(golden)

    def grad_recorded(self, text: str) -> bool:
        """Whether a requires_grad cell takes part in the requires_grad rule (msprobe: any non-empty cell;
        across frameworks not ``N/A`` either, the cell of a side that does not record it)."""
        return bool(text) and not (self.cross and text == NA)

    def grads_differ(self, target: str, golden: str) -> bool:
        """Whether the requires_grad rule flags a matched row."""
        return self.grad_recorded(target) and self.grad_recorded(golden) and target != golden


SAME = Rules(False)
CROSS = Rules(True)


def rules_of(target_framework: str, golden_framework: str) -> Rules:
    """The rules of a pair of dumps, from their frameworks (dump.json's ``framework``)."""
    sides = {target_framework, golden_framework}
    if PYTORCH in sides and sides & set(MINDSPORE_FRAMEWORKS):
        return CROSS
    return SAME
