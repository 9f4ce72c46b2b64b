"""Per-dtype facts used when generating data: numpy working type, item size, finite range, subnormals."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DtypeInfo:
    """What generation needs to know about one canonical dtype (see ``dumpers.format.canonical_dtype``)."""

    name: str
    kind: str            # "float" | "int" | "bool" | "complex"
    itemsize: int        # bytes per element of the final tensor
    numpy: str           # numpy dtype the values are generated in (bf16/fp8 go through float32)
    lo: float            # most negative finite value
    hi: float            # largest finite value
    tiny_sub: float = 0.0   # smallest positive subnormal (floats)
    tiny: float = 0.0       # smallest positive normal (floats)


_F = "float"
DTYPES = {d.name: d for d in (
    DtypeInfo("float64", _F, 8, "float64", -1.7976931348623157e308, 1.7976931348623157e308, 5e-324,
              2.2250738585072014e-308),
    DtypeInfo("float32", _F, 4, "float32", -3.4028234663852886e38, 3.4028234663852886e38, 2 ** -149, 2 ** -126),
    DtypeInfo("float16", _F, 2, "float16", -65504.0, 65504.0, 2 ** -24, 2 ** -14),
    DtypeInfo("bfloat16", _F, 2, "float32", -3.3895313892515355e38, 3.3895313892515355e38, 2 ** -133, 2 ** -126),
    DtypeInfo("float8_e4m3fn", _F, 1, "float32", -448.0, 448.0, 2 ** -9, 2 ** -6),
    DtypeInfo("float8_e5m2", _F, 1, "float32", -57344.0, 57344.0, 2 ** -16, 2 ** -14),
    DtypeInfo("int64", "int", 8, "int64", -(2 ** 63), 2 ** 63 - 1),
    DtypeInfo("int32", "int", 4, "int32", -(2 ** 31), 2 ** 31 - 1),
    DtypeInfo("int16", "int", 2, "int16", -(2 ** 15), 2 ** 15 - 1),
    DtypeInfo("int8", "int", 1, "int8", -128, 127),
    DtypeInfo("uint8", "int", 1, "uint8", 0, 255),
    DtypeInfo("bool", "bool", 1, "bool", 0, 1),
    DtypeInfo("complex64", "complex", 8, "complex64", -3.4028234663852886e38, 3.4028234663852886e38),
    DtypeInfo("complex128", "complex", 16, "complex128", -1.7976931348623157e308, 1.7976931348623157e308),
)}


def info(name: str) -> DtypeInfo | None:
    """Facts about a canonical dtype name, or None when generation does not support it."""
    return DTYPES.get(name)
