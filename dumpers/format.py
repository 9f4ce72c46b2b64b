"""The text msprobe's files hold: the dump format (entry names, entry body keys, data file names, CSV row names,
dump.json layout, JSON style) and the cell text of its CSV files.

This module is the single definition of msprobe's dump layout. The PyTorch and MindSpore dumpers
write with it and the reader in :mod:`generators` parses with it. The online-dispatch compare CSV (written by
:mod:`dumpers.online_dispatch`) and the checker's CSVs (:mod:`pytest_msprobe.report`) write their cells with its
cell functions (:func:`format_cell`, :func:`safe_text`; spec precision-standard.md section 6.3). It imports only
the standard library (and :mod:`dumpers.json_render`, the fast renderer of the same JSON style, and
:mod:`dumpers.atomic`, the one atomic write its files go through).
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from dumpers import atomic
from dumpers.json_render import dumps_json_fast

# --- directory layout ------------------------------------------------------------------------------
DUMP_JSON = "dump.json"
STACK_JSON = "stack.json"
CONSTRUCT_JSON = "construct.json"
TENSOR_DIR = "dump_tensor_data"
JOURNAL = "dump.journal"          # our crash-safe append-only log beside dump.json (see repair)

DIR_MODE = 0o750
FILE_MODE = 0o640

TOP_LEVEL_KEYS = ("task", "level", "framework", "dump_data_dir", "data")
# A top-level key of our own (msprobe's readers ignore it): what the dumper saw run but could not record.
UNCAPTURED = "uncaptured"
UNCAPTURED_COMPILED = ("torch.compile: the calls inside compiled regions were not recorded (only what ran eagerly: "
                       "code outside them, graph breaks, and library kernels the compiled code calls); to record "
                       "the same step in full, run it under torch.compiler.set_stance('force_eager')")

# --- names -----------------------------------------------------------------------------------------
FORWARD = "forward"
BACKWARD = "backward"
DIRECTIONS = (FORWARD, BACKWARD)
PARAMETERS_GRAD = "parameters_grad"

# EntryName.kind
KIND_API, KIND_MODULE, KIND_JIT, KIND_PARAMETERS_GRAD = "api", "module", "jit", PARAMETERS_GRAD
CALL_KINDS = (KIND_API, KIND_JIT)                       # entries of one call (forward/backward)
MODULE_KINDS = (KIND_MODULE, KIND_PARAMETERS_GRAD)      # entries of a module or cell

TORCH_API_PREFIXES = ("Functional", "Tensor", "Torch", "NPU", "Aten", "VF", "Distributed")
MINDSPORE_API_PREFIXES = ("Functional", "Tensor", "Primitive", "Mint", "MintFunctional", "Jit", "Distributed")
MODULE_PREFIXES = ("Module", "Cell")
COMMUNICATION_PREFIXES = ("Distributed",)

# --- entry bodies: the keys of a forward and of a backward entry -------------------------------------------
INPUT_ARGS = "input_args"        # forward: the positional arguments (a list of items)
INPUT_KWARGS = "input_kwargs"    # forward: the keyword arguments (an object of items)
OUTPUT = "output"                # forward: the results; backward: the gradients of the inputs
INPUT = "input"                  # backward: the gradients of the outputs (input[0]: of output 0)
FORWARD_KEYS = (INPUT_ARGS, INPUT_KWARGS, OUTPUT)
BACKWARD_KEYS = (INPUT, OUTPUT)
DATA_NAME = "data_name"          # item key: the tensor file of a tensor item
# forward: a key of our own (msprobe's readers ignore it), present when the call ran under an enabled autocast:
# {"device_type": "cpu", "dtype": "torch.bfloat16", "enabled": true}
AUTOCAST = "autocast"
AUTOCAST_DEVICE, AUTOCAST_DTYPE, AUTOCAST_ENABLED = "device_type", "dtype", "enabled"

# data_name categories
CAT_INPUT = "input"
CAT_KWARGS = "kwargs"
CAT_OUTPUT = "output"


@dataclass(frozen=True)
class EntryName:
    """A parsed dump.json entry key.

    kind is "api", "module" (Module/Cell), "parameters_grad" or "jit".
    For APIs, ``api`` may contain dots (``linalg.vector_norm``, ``add.Tensor``).
    """

    key: str
    kind: str
    prefix: str
    api: str            # API name, or "{attr_path}.{ClassName}" for modules
    index: Optional[int]
    direction: Optional[str]

    @property
    def api_call(self) -> str:
        """``{Prefix}.{api}.{index}``: the name shared by a call's forward and backward entries."""
        if self.kind in CALL_KINDS:
            return f"{self.prefix}.{self.api}" if self.index is None else f"{self.prefix}.{self.api}.{self.index}"
        return self.key.rsplit(".", 2)[0] if self.kind == KIND_MODULE else self.key


class NameError_(ValueError):
    """An entry key that does not follow the naming grammar."""


_INT = re.compile(r"(0|[1-9][0-9]*)\Z")      # the whole part: "$" would also match before a "\n"


def parse_entry_key(key: str) -> EntryName:
    """Parse a dump.json key, splitting from the right (API names may contain dots).

    Raises:
        ValueError: the key does not follow any form of the grammar; the message says which forms exist.
    """
    if not isinstance(key, str) or not key:
        raise NameError_(f"entry key must be a non-empty string, got {key!r}")
    parts = key.split(".")
    prefix = parts[0]
    if prefix in MODULE_PREFIXES:
        # Module.{path}.{Class}.{direction}.{idx} or Module.{path}.{Class}.parameters_grad[.{idx}]
        if len(parts) >= 4 and parts[-1] == PARAMETERS_GRAD:
            return EntryName(key, KIND_PARAMETERS_GRAD, prefix, ".".join(parts[1:-1]), None, None)
        if len(parts) >= 5 and parts[-2] == PARAMETERS_GRAD and _INT.match(parts[-1]):
            return EntryName(key, KIND_PARAMETERS_GRAD, prefix, ".".join(parts[1:-2]), int(parts[-1]), None)
        if len(parts) >= 5 and parts[-2] in DIRECTIONS and _INT.match(parts[-1]):
            return EntryName(key, KIND_MODULE, prefix, ".".join(parts[1:-2]), int(parts[-1]), parts[-2])
        raise NameError_(
            f"module entry {key!r} must look like '{prefix}.<path>.<Class>.<forward|backward>.<index>'")
    if prefix == "Jit" and len(parts) == 3 and parts[-1] in DIRECTIONS:
        return EntryName(key, KIND_JIT, prefix, parts[1], None, parts[-1])
    if len(parts) < 4 or parts[-1] not in DIRECTIONS or not _INT.match(parts[-2]):
        raise NameError_(
            f"API entry {key!r} must look like '<Prefix>.<api>.<index>.<forward|backward>'")
    kind = KIND_JIT if prefix == "Jit" else KIND_API
    return EntryName(key, kind, prefix, ".".join(parts[1:-2]), int(parts[-2]), parts[-1])


def api_call_name(prefix: str, api: str, index: int) -> str:
    return f"{prefix}.{api}.{index}"


def data_name(entry_key: str, category: str, path: tuple, ext: str) -> str:
    """File name of a dumped tensor: ``{entry_key}.{category}.{path}{ext}`` (0-based positions)."""
    return ".".join([entry_key, category, *(str(p) for p in path)]) + ext


def output_row_name(api_call: str, direction: str, i: int) -> str:
    """Name of one compared output in the details CSV: ``{api_call}.{direction}.output.{i}``."""
    return f"{api_call}.{direction}.{OUTPUT}.{i}"


class RowName(NamedTuple):
    """A parsed details-CSV row name: ``Functional.linear.0.backward.output.2``."""

    call: str                    # everything before ``.{direction}.output.{index}``: ``Functional.linear.0``
    api: Optional[str]           # ``linear`` when ``call`` is ``{Prefix}.{api}.{n}``, else None
    direction: str               # forward or backward
    index: int                   # the output's position


def parse_row_name(text: str) -> Optional[RowName]:
    """The parts of a row name made by :func:`output_row_name`, or None when ``text`` does not end in
    ``.{forward|backward}.output.{digits}``. The call may hold dots and a source label (``step0/rank0::...``)."""
    if not isinstance(text, str):
        return None
    parts = text.rsplit(".", 3)
    if len(parts) != 4:
        return None
    call, direction, word, index = parts
    if not call or direction not in DIRECTIONS or word != OUTPUT or not index.isdecimal():
        return None
    return RowName(call, _call_api(call), direction, int(index))


def _call_api(call: str) -> Optional[str]:
    """``Functional.linear.0`` -> ``linear`` (API names may hold dots); None without a prefix or a number."""
    prefix, _, rest = call.partition(".")
    api, _, n = rest.rpartition(".")
    return api if prefix and api and n.isdecimal() else None


def step_rank_dir(dump_path: str, step: int, rank: Optional[int]) -> str:
    return os.path.join(dump_path, f"step{step}", "rank" if rank is None else f"rank{rank}")


# --- tensor items ----------------------------------------------------------------------------------
TORCH_TENSOR_TYPE = "torch.Tensor"
MINDSPORE_TENSOR_TYPE = "mindspore.Tensor"
TENSOR_TYPES = (TORCH_TENSOR_TYPE, MINDSPORE_TENSOR_TYPE)
STAT_KEYS = ("Max", "Min", "Mean", "Norm")

# dtype strings as written by each framework -> canonical torch dtype name (without "torch.")
TORCH_DTYPES = {
    "torch.float32": "float32", "torch.float": "float32", "torch.float16": "float16", "torch.half": "float16",
    "torch.bfloat16": "bfloat16", "torch.float64": "float64", "torch.double": "float64",
    "torch.int64": "int64", "torch.long": "int64", "torch.int32": "int32", "torch.int": "int32",
    "torch.int16": "int16", "torch.short": "int16", "torch.int8": "int8", "torch.uint8": "uint8",
    "torch.bool": "bool", "torch.complex64": "complex64", "torch.complex128": "complex128",
    "torch.float8_e4m3fn": "float8_e4m3fn", "torch.float8_e5m2": "float8_e5m2",
}
MINDSPORE_DTYPES = {
    "Float32": "float32", "Float16": "float16", "BFloat16": "bfloat16", "Float64": "float64",
    "Int64": "int64", "Int32": "int32", "Int16": "int16", "Int8": "int8", "UInt8": "uint8",
    "Bool": "bool", "Complex64": "complex64", "Complex128": "complex128",
}


def canonical_dtype(dtype_str: Any) -> Optional[str]:
    """Canonical dtype name for a dumped dtype string of either framework, or None if unknown."""
    if not isinstance(dtype_str, str):
        return None
    return TORCH_DTYPES.get(dtype_str) or MINDSPORE_DTYPES.get(dtype_str)


# facts of each canonical dtype: numpy working type, item size, finite range, subnormals (what generating data
# for a tensor item and sizing it need)
@dataclass(frozen=True)
class DtypeInfo:
    """What making and sizing a tensor of one canonical dtype (:func:`canonical_dtype`) needs to know."""

    name: str
    kind: str            # "float" | "int" | "bool" | "complex"
    itemsize: int        # bytes per element of the final tensor
    numpy: str           # numpy dtype the values are generated in (bf16/fp8 go through float32)
    lo: float            # most negative finite value
    hi: float            # largest finite value
    tiny_sub: float = 0.0   # smallest positive subnormal (floats)
    tiny: float = 0.0       # smallest positive normal (floats)


_F = "float"
DTYPE_FACTS = {d.name: d for d in (
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


def dtype_facts(name: str) -> Optional[DtypeInfo]:
    """Facts about a canonical dtype name, or None for a dtype no tensor item can be made in."""
    return DTYPE_FACTS.get(name)


# --- JSON style ------------------------------------------------------------------------------------
def dumps_json(obj: Any) -> str:
    """msprobe's JSON style: indent=1, ASCII-escaped, NaN/Infinity literals allowed."""
    return json.dumps(obj, indent=1, ensure_ascii=True, allow_nan=True)


def write_json_atomic(path: str, obj: Any, fsync: bool = True) -> None:
    """Write ``obj`` to ``path`` via a temporary file and rename, so readers never see half a file.

    ``fsync=False`` skips flushing to the device: the rename is still atomic for every reader and a
    killed process, only a power loss may lose the new content.
    """
    atomic.write_text(path, dumps_json_fast(obj), mode=FILE_MODE, fsync=fsync)


# --- CSV cells -------------------------------------------------------------------------------------
BLANK = " "   # msprobe's SPACE: an unused cell holds one ASCII space
DEFAULT_PRECISION = 14
FORMULA_LEAD = ("=", "+", "-", "@", "\t", "\r")   # first characters a spreadsheet reads as a formula


def format_cell(value: Any, precision: int = DEFAULT_PRECISION) -> str:
    """Format one metric cell the way msprobe writes it.

    None -> blank (" "); bool -> "True"/"False"; int -> plain integer; Python float and float64 ->
    fixed-point with ``precision`` decimals ("nan"/"inf" for non-finite); float32/float16 numpy scalars ->
    their shortest ``str()`` (msprobe does not convert them); strings unchanged.
    """
    if value is None:
        return BLANK
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    tname = type(value).__name__
    if tname in ("float32", "float16"):
        return str(value)
    if tname in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        return str(int(value))
    if tname == "bool_":
        return str(bool(value))
    x = float(value)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{precision}f}"


def safe_text(text: str) -> str:
    """Neutralise spreadsheet formula injection in free-text cells taken from a dump (names, messages).

    A cell that starts with =, +, -, @, tab or CR gets a leading apostrophe. Numbers are never passed here.
    """
    if text and text[0] in FORMULA_LEAD:
        return "'" + text
    return text
