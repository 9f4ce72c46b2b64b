"""The arguments as the user wrote the call, for APIs implemented in Python.

A Python-level API (``F.layer_norm``, ``F.cross_entropy``, ``Tensor.split``) re-packs its arguments
before it reaches ``__torch_function__``: ``F.layer_norm(x, shape, w, b, eps)`` arrives as
``(x, shape)`` plus ``weight=, bias=, eps=`` keywords, defaults included. msprobe records the call as
written. The calling frame's ``CALL`` instruction says how many positional arguments and which keyword
names were written; binding the received arguments to the function's signature gives their values.
"""
from __future__ import annotations

import bisect
import dis
import inspect
import os
from typing import Any, Optional
from dumpers.frames import frame_above as _frame

_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
_SKIP = (os.path.join("torch", "overrides.py"),)
_CALLS = ("CALL", "CALL_KW", "CALL_FUNCTION", "CALL_METHOD", "CALL_FUNCTION_KW")

_signatures: dict = {}
_shapes: dict = {}
_instructions: dict = {}               # code object -> its instructions (disassembled once)




def _signature(func: Any) -> Optional[inspect.Signature]:
    try:
        return _signatures[func]
    except KeyError:
        pass
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        sig = None
    _signatures[func] = sig
    return sig


def _call_shape(code: Any, offset: int) -> Optional[tuple]:
    """(argument count, keyword names) of the call instruction at ``offset``, or None."""
    key = (code, offset)
    if key in _shapes:
        return _shapes[key]
    shape = None
    try:
        instrs = instructions(code)
        idx = instruction_index(instrs, offset)
        ins = instrs[idx]
        if ins.opname in _CALLS and isinstance(ins.arg, int):
            names: tuple = ()
            for back in instrs[max(0, idx - 3):idx][::-1]:
                if back.opname == "KW_NAMES":
                    names = tuple(code.co_consts[back.arg])
                    break
                if ins.opname in ("CALL_KW", "CALL_FUNCTION_KW") and back.opname == "LOAD_CONST":
                    names = tuple(back.argval) if isinstance(back.argval, tuple) else ()
                    break
            shape = (ins.arg, names)
    except Exception:
        shape = None
    _shapes[key] = shape
    return shape


def instructions(code: Any) -> list:
    """``dis.get_instructions(code)`` as a list, disassembled once per code object."""
    instrs = _instructions.get(code)
    if instrs is None:
        if len(_instructions) > 4096:
            _instructions.clear()
        instrs = _instructions[code] = list(dis.get_instructions(code))
    return instrs


def instruction_index(instrs: list, offset: int) -> int:
    """Index of the instruction executing at ``offset`` (``f_lasti`` may point into its cache entries)."""
    idx = bisect.bisect_right([ins.offset for ins in instrs], offset) - 1
    if idx < 0:
        raise ValueError(f"no instruction at offset {offset}")
    return idx


_WRAPPER_FILES = (os.path.join("torch", "_jit_internal.py"),)   # boolean_dispatch wrappers (F.max_pool2d)


def _frames(func_code: Any) -> tuple:
    """(the frame that called handle_torch_function, the frame of the user's call), or Nones."""
    frame = _frame(3)
    while frame is not None and (frame.f_code.co_filename.startswith(_OWN_DIR)
                                 or frame.f_code.co_filename.endswith(_SKIP)):
        frame = frame.f_back
    impl = frame
    if impl is None:
        return None, None
    files = (func_code.co_filename, impl.f_code.co_filename)
    while frame is not None and (frame.f_code is func_code or frame.f_code.co_filename in files
                                 or frame.f_code.co_filename.endswith(_WRAPPER_FILES)):
        frame = frame.f_back
    return impl, frame


def _parameters(code: Any) -> tuple:
    """(positional parameter names, keyword-only names, *args name or None) of a code object."""
    n_pos, n_kw = code.co_argcount, code.co_kwonlyargcount
    names = code.co_varnames
    var = names[n_pos + n_kw] if code.co_flags & inspect.CO_VARARGS else None
    return names[:n_pos], names[n_pos:n_pos + n_kw], var


def as_written(func: Any, args: tuple, kwargs: dict, bound_method: bool) -> tuple:
    """``(args, kwargs)`` as the caller wrote them; the received ones when that cannot be told.

    The values come from the implementation's frame (the function that called
    ``handle_torch_function``, whose locals hold every parameter), the shape of the call from the
    user's ``CALL`` instruction: the first ``n`` parameters were written positionally, the keyword
    names are listed by the instruction.
    """
    code = getattr(func, "__code__", None)
    if code is None:
        return args, kwargs
    impl, caller = _frames(code)
    if impl is None or caller is None:
        return args, kwargs
    shape = _call_shape(caller.f_code, caller.f_lasti)
    if shape is None:
        return args, _drop_defaults(func, kwargs)
    argc, names = shape
    n_pos = argc - len(names) + (1 if bound_method else 0)
    positional, keyword_only, var = _parameters(impl.f_code)
    if n_pos > len(positional) and var is None:
        return args, kwargs
    values = _received(impl.f_code, positional, args, kwargs, n_pos, names)
    if values is None:
        values = impl.f_locals   # builds a dict of every local of the implementation: the slow way
    try:
        out_args = [values[n] for n in positional[:n_pos]]
        if n_pos > len(positional):
            out_args.extend(values[var][: n_pos - len(positional)])
        out_kw = {n: values[n] for n in names}
    except (KeyError, TypeError):
        return args, kwargs
    return tuple(out_args), out_kw


def _received(code: Any, positional: tuple, args: tuple, kwargs: dict, n_pos: int, names: tuple) -> Optional[dict]:
    """Parameter values as handed to ``handle_torch_function``, when they cover every written argument.

    Implementations pass their parameters on unchanged (``handle_torch_function(f, (x,), x, p=p)``),
    so the received arguments, bound to the implementation's parameter names, hold the values the
    user wrote without reading the frame's locals. None when a written argument is not among them.
    """
    if n_pos > len(positional) or len(args) > len(positional):
        return None
    values = dict(zip(positional, args))
    values.update(kwargs)
    for n in positional[:n_pos]:
        if n not in values:
            return None
    for n in names:
        if n not in values:
            return None
    return values


def _drop_defaults(func: Any, kwargs: dict) -> dict:
    """For ``f(*a, **k)`` calls: keep keywords whose value differs from the parameter's default."""
    sig = _signature(func)
    if sig is None:
        return kwargs
    out = {}
    for k, v in kwargs.items():
        p = sig.parameters.get(k)
        if p is None or p.default is inspect.Parameter.empty or not _same(p.default, v):
            out[k] = v
    return out


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False
