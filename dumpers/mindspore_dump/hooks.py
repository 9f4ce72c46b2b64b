"""How calls are seen: API namespace wrappers, primitive proxies on cells, the jit executor, gradient hooks.

MindSpore has no function mode, so at L1/mix the names of :mod:`.api_table` are replaced by thin wrappers while
the dump is started and put back on stop. Primitives held by the model's cells (``Dense.matmul``) are replaced
by proxies in the cell's ``__dict__``; calls of ``mindspore.jit`` functions go through a wrapped executor.
Backward entries of an API call come from tensor hooks: while a gradient is being recorded (inside ``ms.grad``
& co) the call runs on views of the inputs a gradient can reach, and hooks on those views and on the outputs
report exactly this call's input and output gradients.
"""
from __future__ import annotations

import functools
import importlib
from typing import Any, Callable

from dumpers.mindspore_dump.api_table import INPLACE, NAMESPACES

_MISSING = object()


def resolve_namespace(path: str) -> Any:
    """The object whose attributes are wrapped: a module, or the Tensor class for "mindspore.Tensor"."""
    if path == "mindspore.Tensor":
        import mindspore
        return mindspore.Tensor
    return importlib.import_module(path)


def is_inplace(prefix: str, name: str) -> bool:
    """Calls that must run on the caller's own tensors (no backward entry): in-place APIs (``add_``,
    ``__iadd__``, ``__setitem__``, ``ops.assign``) and collective communication."""
    if prefix == "Distributed":
        return True                   # collectives: forward only
    if name.startswith("__"):
        return name.startswith("__i") or name == "__setitem__"
    return name.endswith("_") or (prefix == "Functional" and name in INPLACE)


class ApiPatcher:
    """Installs and removes the API wrappers of every namespace in the wrap tables."""

    def __init__(self, call: Callable) -> None:
        self._call = call              # call(prefix, name, original, args, kwargs)
        self._saved: list = []         # (owner, name, original, had_own_attribute)
        self.installed = False

    def install(self) -> int:
        if self.installed:
            return len(self._saved)
        for prefix, path, names in NAMESPACES:
            try:
                owner = resolve_namespace(path)
            except Exception:  # noqa: BLE001 - a namespace this MindSpore build lacks or cannot load
                continue
            own = vars(owner)
            for name in names:
                original = getattr(owner, name, _MISSING)
                if original is _MISSING or not callable(original):
                    continue
                self._saved.append((owner, name, original, name in own))
                setattr(owner, name, self._wrapper(prefix, name, original))
        self.installed = True
        return len(self._saved)

    def _wrapper(self, prefix: str, name: str, original: Callable) -> Callable:
        call = self._call

        def api_wrapper(*args: Any, **kwargs: Any) -> Any:
            return call(prefix, name, original, args, kwargs)

        try:
            functools.update_wrapper(api_wrapper, original)
        except (AttributeError, TypeError):
            pass
        api_wrapper.__msprobe_original__ = original
        return api_wrapper

    def uninstall(self) -> None:
        for owner, name, original, had_own in reversed(self._saved):
            if had_own:
                setattr(owner, name, original)
            else:
                try:
                    delattr(owner, name)
                except AttributeError:
                    setattr(owner, name, original)
        self._saved.clear()
        self.installed = False


class PrimitiveProxy:
    """Stands in for a primitive held by a cell; calls go through the dumper as ``Primitive.{attr}``."""

    def __init__(self, primitive: Any, attr: str, call: Callable) -> None:
        self.__dict__["_msprobe"] = (primitive, attr, call)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        primitive, attr, call = self.__dict__["_msprobe"]
        return call("Primitive", attr, primitive, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_msprobe"][0], name)

    def __repr__(self) -> str:
        return f"PrimitiveProxy({self.__dict__['_msprobe'][0]!r})"


class PrimitivePatcher:
    """Replaces the primitives of every cell of a model by :class:`PrimitiveProxy` objects, and back."""

    def __init__(self, call: Callable) -> None:
        self._call = call
        self._saved: list = []
        self.installed = False

    def install(self, model: Any) -> int:
        if self.installed:
            return len(self._saved)
        from mindspore.ops import Primitive
        for _, cell in model.cells_and_names():
            for attr, prim in list(getattr(cell, "_primitives", {}).items()):
                current = cell.__dict__.get(attr, _MISSING)
                if attr.startswith("_") or not isinstance(prim, Primitive) or current is not prim:
                    continue                   # MindSpore's own hook primitives are not the model's
                object.__setattr__(cell, attr, PrimitiveProxy(prim, attr, self._call))
                self._saved.append((cell, attr, prim))
        self.installed = True
        return len(self._saved)

    def uninstall(self) -> None:
        for cell, attr, prim in reversed(self._saved):
            object.__setattr__(cell, attr, prim)
        self._saved.clear()
        self.installed = False


class JitPatcher:
    """Records each call of a ``mindspore.jit`` function or cell (PSJit) as one ``Jit.{name}`` API call.

    ``name`` is the cell's class name for a jit cell or method, else ``JitFunction`` (msprobe's naming).
    """

    def __init__(self, call: Callable) -> None:
        self._call = call
        self._saved: tuple = ()

    def install(self) -> None:
        if self._saved:
            return
        try:
            from mindspore.graph.api import _JitExecutor
        except ImportError:
            try:
                from mindspore.common.api import _JitExecutor
            except ImportError:
                return
        original = _JitExecutor.__call__
        call = self._call

        def jit_call(executor: Any, *args: Any, **kwargs: Any) -> Any:
            owner = getattr(executor, "obj", None)
            if owner is not None and args and args[0] is owner:
                return call("Jit", type(owner).__name__, functools.partial(original, executor, owner),
                            args[1:], kwargs)
            return call("Jit", "JitFunction", functools.partial(original, executor), args, kwargs)

        _JitExecutor.__call__ = jit_call
        self._saved = (_JitExecutor, original)

    def uninstall(self) -> None:
        if self._saved:
            cls, original = self._saved
            cls.__call__ = original
            self._saved = ()


class PendingBackward:
    """The gradients of one API call, gathered from tensor hooks until every hooked tensor has reported.

    ``grads_of_inputs`` (one per positional argument) becomes the backward entry's ``output``,
    ``grads_of_outputs`` its ``input``, as in msprobe.
    """

    def __init__(self, api_call: str, n_inputs: int, done: Callable) -> None:
        self.api_call = api_call
        self.grads_of_inputs: list = [None] * n_inputs
        self.grads_of_outputs: list = []
        self.waiting = 0
        self.finished = False
        self._done = done

    def set_outputs(self, n: int) -> None:
        self.grads_of_outputs = [None] * n

    def expect(self, of_input: bool, i: int, j: int | None = None) -> Callable:
        """A tensor hook that stores the gradient of input (or output) ``i`` (item ``j`` of a list argument)."""
        self.waiting += 1
        slots = self.grads_of_inputs if of_input else self.grads_of_outputs
        if j is not None and not isinstance(slots[i], list):
            slots[i] = [None] * (j + 1)

        def hook(grad: Any) -> None:
            if self.finished:
                return
            if j is None:
                slots[i] = grad
            else:
                slots[i] += [None] * (j + 1 - len(slots[i]))
                slots[i][j] = grad
            self.waiting -= 1
            if self.waiting == 0:
                self.finish()
        return hook

    def finish(self) -> None:
        if not self.finished:
            self.finished = True
            self._done(self)


_FLOAT_DTYPES: tuple = ()


def is_float_tensor(obj: Any) -> bool:
    """A MindSpore tensor of a floating or complex dtype (the ones gradients flow through)."""
    global _FLOAT_DTYPES
    import mindspore as ms
    if not _FLOAT_DTYPES:
        _FLOAT_DTYPES = (ms.float16, ms.float32, ms.float64, ms.bfloat16, ms.complex64, ms.complex128)
    return isinstance(obj, ms.Tensor) and obj.dtype in _FLOAT_DTYPES


def takes_part_in_grad(obj: Any) -> bool:
    """Can a gradient reach this tensor in the grad computation being recorded?

    True for tensors produced inside it from differentiable inputs and for trainable Parameters; False for
    data and integer tensors (no hook, no wait).
    """
    if not is_float_tensor(obj):
        return False
    if getattr(obj, "requires_grad", False):          # a trainable Parameter
        return True
    probe = getattr(obj, "_has_auto_grad", None)
    if probe is None:                                  # a MindSpore without this query: assume it does
        return True
    try:
        return bool(probe())
    except (RuntimeError, TypeError):
        return True


def identity(tensor: Any) -> Any:
    """A new tensor (a view: no copy) equal to ``tensor``; its gradient is that of this one use of ``tensor``."""
    try:
        return tensor.view(tensor.shape)
    except (RuntimeError, TypeError, ValueError):
        from mindspore import ops
        return ops.deepcopy(tensor)


def recording_grad() -> bool:
    """True inside ``ms.grad`` / ``value_and_grad`` / ``GradOperation`` in PyNative mode."""
    try:
        try:
            from mindspore.graph.api import _pynative_executor
        except ImportError:
            from mindspore.common.api import _pynative_executor
        return bool(_pynative_executor.requires_grad())
    except (ImportError, AttributeError):     # a MindSpore without this query: assume grads are recorded
        return True
