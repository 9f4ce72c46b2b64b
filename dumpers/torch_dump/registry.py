"""Which callable is which recorded API: ``func`` object -> (prefix, api name).

A :class:`~torch.overrides.TorchFunctionMode` receives the framework's own callable (``torch.relu``,
``torch.nn.functional.linear``, ``torch.Tensor.softmax``); the registry maps it to its dump name using
the wrap lists. Python operators are the one ambiguity: ``a * b`` reaches the mode as
``Tensor.mul``, exactly like ``a.mul(b)``. For those callables the registry reads the instruction the
calling frame is executing (``BINARY_OP *`` vs a call) to tell ``Tensor.__mul__`` from ``Tensor.mul``,
the way msprobe, which wraps the dunders themselves, names them. Reflected operators (``0.5 * x``) arrive
as the same plain method with the same arguments; the dumper's wrappers of those slots
(:class:`~dumpers.torch_dump.capture.ReflectedSlots`) mark the call with :func:`mark_reflected`.
"""
from __future__ import annotations

import operator
import os
import threading
import types
from typing import Any, Callable, Optional

import torch

from dumpers.torch_dump import wrap_lists
from dumpers.frames import frame_above as _frame

ApiName = tuple  # (prefix, api)

_SKIP_FRAME_FILES = ("torch/overrides.py", "torch\\overrides.py")
_TENSOR_FILES = ("torch/_tensor.py", "torch\\_tensor.py")
# the operator module's functions for every Python operator (they call the same Tensor slots)
_OPERATOR_FUNCTIONS = ("add", "and_", "floordiv", "lshift", "matmul", "mul", "mod", "or_", "pow", "rshift", "sub",
                       "truediv", "xor", "eq", "ne", "lt", "le", "gt", "ge", "iadd", "iand", "ifloordiv",
                       "ilshift", "imatmul", "imul", "imod", "ior", "ipow", "irshift", "isub", "itruediv", "ixor")
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
_REFLECTED = threading.local()        # .call = (tensor, dunder) while a reflected slot wrapper runs




def mark_reflected(tensor: Any, dunder: Optional[str]) -> Any:
    """Note that Python chose ``tensor.<dunder>`` (a reflected operator); returns the previous mark."""
    previous = getattr(_REFLECTED, "call", None)
    _REFLECTED.call = None if dunder is None else (tensor, dunder)
    return previous


def restore_reflected(previous: Any) -> None:
    """Put back the mark :func:`mark_reflected` returned (nested operators)."""
    _REFLECTED.call = previous


def _resolve_attr(root: Any, dotted: str) -> Any:
    obj = root
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


class _ByName:
    """The dump names of callables that compare equal, by their ``__name__``."""

    __slots__ = ("names",)

    def __init__(self, names: dict) -> None:
        self.names = names


class ApiRegistry:
    """Maps callables seen by the function mode to ``(prefix, api)`` dump names."""

    def __init__(self) -> None:
        self.by_func: dict = {}
        self.tensor_names = frozenset(wrap_lists.TENSOR)
        self.operator_funcs: dict = {}      # func -> method name, for callables an operator can reach
        self.transparent: frozenset = frozenset(_python_dunders(wrap_lists.TRANSPARENT_DUNDERS))
        self._instr_cache: dict = {}
        self._build()

    # --- construction ------------------------------------------------------------------------
    def _add(self, func: Any, prefix: str, name: str) -> None:
        if func is None or not callable(func):
            return
        try:
            known = self.by_func.get(func)
            if known is None:
                self.by_func[func] = (prefix, name)
                return
        except TypeError:                  # unhashable callables cannot be looked up
            return
        # first table wins (Functional before Torch: F.conv2d is torch.conv2d, the same callable). Builtins that
        # share one C function compare equal while they are distinct functions (``torch.mm`` and the deprecated
        # ``torch.dsmm``): those keep a name each, told apart by the ``__name__`` of the callable called
        own = getattr(func, "__name__", None)
        if not isinstance(known, _ByName):
            first = next(f for f in self.by_func if f == func)
            theirs = getattr(first, "__name__", None)
            if own == theirs or not isinstance(own, str) or not isinstance(theirs, str):
                return
            known = self.by_func[func] = _ByName({theirs: known})
        known.names.setdefault(own, (prefix, name))

    def _build(self) -> None:
        import torch.nn.functional as F

        for name in wrap_lists.FUNCTIONAL:
            self._add(getattr(F, name, None), "Functional", name)
        for name in wrap_lists.TENSOR:
            self._add(getattr(torch.Tensor, name, None), "Tensor", name)
        for name in wrap_lists.TORCH:
            self._add(_resolve_attr(torch, name), "Torch", name)
        vf = getattr(torch, "_VF", None)
        for name in wrap_lists.VF:
            self._add(getattr(vf, name, None), "VF", name)
        try:
            import torch_npu  # noqa: F401  (only present on Ascend machines)
        except Exception:      # pragma: no cover - torch_npu is absent on CPU machines
            torch_npu = None
        if torch_npu is not None:  # pragma: no cover
            for name in wrap_lists.NPU:
                self._add(getattr(torch_npu, name, None), "NPU", name)
        self._probe_operators()

    def _probe_operators(self) -> None:
        """Find the callables Python operators arrive as (they differ between torch versions)."""
        from torch.overrides import TorchFunctionMode

        seen: list = []

        class _Probe(TorchFunctionMode):
            def __torch_function__(self, func, types_, args=(), kwargs=None):
                seen.append(func)
                return func(*args, **(kwargs or {}))

        a = torch.ones(2, 2)
        b = torch.ones(2, 2)
        ai = torch.ones(2, 2, dtype=torch.int64)
        bi = torch.ones(2, 2, dtype=torch.int64)
        binary = [getattr(operator, name) for name in _OPERATOR_FUNCTIONS]
        unary = [operator.neg, operator.invert, operator.pos]
        for op in binary + unary:
            for x, y in ((a, b), (ai, bi)):
                operands = (y,) if op is operator.invert else (x,) if op in unary else (x.clone(), y)
                seen.clear()
                try:
                    with _Probe():
                        op(*operands)
                except Exception:
                    pass
                self._note_operator(seen)

    def _note_operator(self, seen: list) -> None:
        for func in seen:
            name = getattr(func, "__name__", None)
            if not isinstance(name, str) or (name.startswith("__") and name.endswith("__")):
                continue        # arrives as its own dunder (``__getitem__``, ``__eq__``): no ambiguity
            try:
                self.operator_funcs[func] = name
            except TypeError:
                pass

    # --- look-up -------------------------------------------------------------------------------
    def lookup(self, func: Callable, args: tuple, infer_reflected: bool = False) -> Optional[ApiName]:
        """The dump name of a call, or None when the call is not recorded.

        ``infer_reflected``: without the dumper's slot wrappers, tell ``0.5 * x`` (``Tensor.__rmul__``) from
        ``x * 0.5`` by the calling code (:func:`reflected_operand`)."""
        marked = getattr(_REFLECTED, "call", None)
        if marked is not None and args and args[0] is marked[0]:
            _REFLECTED.call = None
            return ("Tensor", marked[1]) if marked[1] in self.tensor_names else None
        try:
            op_method = self.operator_funcs.get(func)
        except TypeError:
            return None
        if op_method is not None:
            dunder = self._operator_dunder(args, infer_reflected)
            if dunder is not None:
                return ("Tensor", dunder) if dunder in self.tensor_names else None
        if infer_reflected and len(args) > 1 and not isinstance(args[1], torch.Tensor):
            via = _REFLECTED_VIA.get(getattr(func, "__name__", None))     # ``True | b`` arrives as bitwise_or
            if via is not None and self._operator_dunder(args, True) == via:
                return ("Tensor", via) if via in self.tensor_names else None
        try:
            name = self.by_func.get(func)
        except TypeError:
            return None
        if name is not None:
            if name.__class__ is _ByName:
                return name.names.get(getattr(func, "__name__", None))
            return name
        if isinstance(func, torch._ops.OpOverload):
            if func.namespace == "aten":
                return ("Aten", func.name().split("::", 1)[1])
        elif isinstance(func, torch._ops.OpOverloadPacket):
            qual = func._qualified_op_name
            if qual.startswith("aten::"):
                return ("Aten", qual.split("::", 1)[1])
        return None

    def _operator_dunder(self, args: tuple, infer_reflected: bool = False) -> Optional[str]:
        """The dunder the user's frame is executing, or None when it is a plain call.

        torch's own frames are passed over unless they execute the operator themselves (the body of
        ``Tensor.__rdiv__`` multiplies with ``*``).
        """
        frame: Optional[types.FrameType] = _frame(1)
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename.endswith(_SKIP_FRAME_FILES) or filename.startswith(_OWN_DIR):
                frame = frame.f_back
                continue
            dunder = self._instruction_info(frame.f_code, frame.f_lasti)
            if dunder is None and filename.endswith(_TENSOR_FILES):
                frame = frame.f_back
                continue
            twin = _REFLECTED_TWIN.get(dunder) if infer_reflected else None
            if twin is not None and len(args) > 1 and not isinstance(args[1], torch.Tensor) \
                    and reflected_operand(frame, args[0]):
                return twin
            return dunder
        return None

    def _instruction_info(self, code: types.CodeType, offset: int) -> Optional[str]:
        key = (code, offset)
        try:
            return self._instr_cache[key]
        except KeyError:
            pass
        info = None
        try:
            from dumpers.torch_dump.callargs import instruction_index, instructions

            instrs = instructions(code)
            info = self._classify(instrs, instruction_index(instrs, offset))
        except Exception:
            info = None
        if len(self._instr_cache) > 100_000:
            self._instr_cache.clear()
        self._instr_cache[key] = info
        return info

    @staticmethod
    def _classify(instrs: list, index: int) -> Optional[str]:
        ins = instrs[index]
        op = ins.opname
        if op == "BINARY_OP":
            symbol = ins.argrepr
            dunder = wrap_lists.BINARY_OPERATORS.get(symbol)
            return dunder
        if op == "COMPARE_OP":
            symbol = str(ins.argval).replace("bool(", "").rstrip(")")
            return wrap_lists.COMPARE_OPERATORS.get(symbol)
        if op in wrap_lists.UNARY_OPERATORS:
            return wrap_lists.UNARY_OPERATORS[op]
        return None


_REFLECTED_TWIN = {"__add__": "__radd__", "__mul__": "__rmul__", "__or__": "__ror__", "__xor__": "__rxor__",
                   "__and__": "__rand__"}
# reflected operators whose slot reaches the function mode as a named method of its own
_REFLECTED_VIA = {"bitwise_or": "__ror__", "bitwise_xor": "__rxor__", "bitwise_and": "__rand__"}
_LOCAL_LOADS = frozenset(("LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR",
                          "LOAD_FAST_LOAD_FAST", "LOAD_NAME", "LOAD_CLASSDEREF"))
_operands: dict = {}                 # (code, offset) -> (left, right) operand descriptions, or None


def _expression_start(instrs: list, end: int) -> Optional[int]:
    """Index of the first instruction of the expression whose last instruction is ``end`` (straight code only).

    In postfix code every proper suffix of an expression pushes at most nothing net, so walking back from its
    end, the first point where the instructions push one value net is where it starts."""
    import dis

    depth = 0
    for j in range(end, -1, -1):
        ins = instrs[j]
        if "JUMP" in ins.opname or ins.opname in ("FOR_ITER", "SEND", "RETURN_VALUE", "YIELD_VALUE"):
            return None
        try:
            depth += dis.stack_effect(ins.opcode, ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None, jump=False)
        except (ValueError, TypeError):
            return None
        if depth == 1:
            inner = instrs[j + 1:end + 1]
            return None if any(getattr(i, "is_jump_target", False) for i in inner) else j
        if depth > 1:
            return None
    return None


def _describe(part: list) -> tuple:
    """An operand's code: ("const",), ("name", kind, name), ("no locals",) or ("other",)."""
    if len(part) == 1:
        ins = part[0]
        if ins.opname in ("LOAD_CONST", "RETURN_CONST", "LOAD_SMALL_INT"):
            return ("const",)
        if ins.opname in _LOCAL_LOADS and isinstance(ins.argval, str):
            return ("name", "local", ins.argval)
        if ins.opname == "LOAD_GLOBAL" and isinstance(ins.argval, str):
            return ("name", "global", ins.argval)
    if not any(ins.opname in _LOCAL_LOADS for ins in part):
        return ("no locals",)
    return ("other",)


def _operand_parts(code: Any, offset: int) -> Optional[tuple]:
    key = (code, offset)
    if key in _operands:
        return _operands[key]
    found = None
    try:
        from dumpers.torch_dump.callargs import instruction_index, instructions

        instrs = instructions(code)
        index = instruction_index(instrs, offset)
        right = _expression_start(instrs, index - 1)
        left = _expression_start(instrs, right - 1) if right is not None and right > 0 else None
        if right is not None and left is not None:
            found = (_describe(instrs[left:right]), _describe(instrs[right:index]))
    except Exception:
        found = None
    if len(_operands) > 100_000:
        _operands.clear()
    _operands[key] = found
    return found


def _value_of(frame: types.FrameType, desc: tuple) -> Any:
    kind, name = desc[1], desc[2]
    if kind == "local":
        return frame.f_locals.get(name, _UNKNOWN)
    if name in frame.f_globals:
        return frame.f_globals[name]
    return frame.f_builtins.get(name, _UNKNOWN)


_UNKNOWN = object()


def reflected_operand(frame: types.FrameType, tensor: Any) -> bool:
    """Whether the binary operator ``frame`` executes has the tensor on its right (``0.5 * x``).

    Read from the code: an operand that is a constant, or a name whose value is known, or (on the left) an
    expression of no local variable (``math.sqrt(2 / math.pi) * x``). Unknown cases read as not reflected."""
    parts = _operand_parts(frame.f_code, frame.f_lasti)
    if parts is None:
        return False
    left, right = parts
    if right[0] == "const":
        return False
    if left[0] == "const":
        return True
    if right[0] == "name":
        value = _value_of(frame, right)
        if value is not _UNKNOWN:
            return value is tensor or isinstance(value, torch.Tensor)
    if left[0] == "name":
        value = _value_of(frame, left)
        if value is not _UNKNOWN:
            return not isinstance(value, torch.Tensor)
    return left[0] == "no locals" and right[0] != "no locals"


def _python_dunders(names: tuple) -> list:
    """The Python-level functions (with a ``__wrapped__`` body) behind these ``torch.Tensor`` dunders."""
    found = []
    for name in names:
        func = torch.Tensor.__dict__.get(name)
        if callable(func) and callable(getattr(func, "__wrapped__", None)):
            found.append(func)
    return found


_REGISTRY: Optional[ApiRegistry] = None


def get_registry() -> ApiRegistry:
    """The process-wide registry (built once, on first use)."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = ApiRegistry()
    return _REGISTRY
