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
import sys
from typing import Any, Optional

_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
_SKIP = (os.path.join("torch", "overrides.py"),)
_CALLS = ("CALL", "CALL_KW", "CALL_FUNCTION", "CALL_METHOD", "CALL_FUNCTION_KW")

_signatures: dict = {}
_shapes: dict = {}


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
        instrs = list(dis.get_instructions(code))
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


def instruction_index(instrs: list, offset: int) -> int:
    """Index of the instruction executing at ``offset`` (``f_lasti`` may point into its cache entries)."""
    idx = bisect.bisect_right([ins.offset for ins in instrs], offset) - 1
    if idx < 0:
        raise ValueError(f"no instruction at offset {offset}")
    return idx


def _caller(func_code: Any) -> Optional[Any]:
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_OWN_DIR) or name.endswith(_SKIP) or frame.f_code is func_code:
            frame = frame.f_back
            continue
        return frame
    return None


def as_written(func: Any, args: tuple, kwargs: dict, bound_method: bool) -> tuple:
    """``(args, kwargs)`` as the caller wrote them; the received ones when that cannot be told."""
    code = getattr(func, "__code__", None)
    if code is None:
        return args, kwargs
    sig = _signature(func)
    if sig is None:
        return args, kwargs
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return args, kwargs
    frame = _caller(code)
    shape = _call_shape(frame.f_code, frame.f_lasti) if frame is not None else None
    values = bound.arguments
    params = list(sig.parameters.values())
    if shape is None:       # f(*a, **k) and the like: keep positionals, drop keywords left at their default
        out_kw = {}
        for k, v in kwargs.items():
            p = sig.parameters.get(k)
            if p is None or p.default is inspect.Parameter.empty or not _same(p.default, v):
                out_kw[k] = v
        return args, out_kw
    argc, names = shape
    n_pos = argc - len(names) + (1 if bound_method else 0)
    out_args: list = []
    for p in params:
        if len(out_args) >= n_pos:
            break
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            out_args.extend(values.get(p.name, ()))
            break
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) \
                and p.name in values:
            out_args.append(values[p.name])
        else:
            return args, kwargs
    var_kw = next((p.name for p in params if p.kind is inspect.Parameter.VAR_KEYWORD), None)
    extra = values.get(var_kw, {}) if var_kw else {}
    out_kw = {}
    for n in names:
        if n in values and n != var_kw:
            out_kw[n] = values[n]
        elif n in extra:
            out_kw[n] = extra[n]
        else:
            return args, kwargs
    return tuple(out_args), out_kw


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False
