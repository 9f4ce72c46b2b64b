"""Module-level capture (levels L0 and mix): forward/backward hooks on every submodule.

Names follow spec 5.1: ``Module.{attr_path}.{ClassName}.{forward|backward}.{idx}``; the root model is
never hooked. Backward entries use full-module semantics (``register_full_backward_hook``), parameter
gradients are recorded once every direct parameter of a module has received its gradient
(``Module.{path}.{Class}.parameters_grad.{idx}``), and ``optimizer.step()`` calls are grouped under an
``optimizer`` node of construct.json, as msprobe 26.2.0 writes them.
"""
from __future__ import annotations

import functools
import os
import sys
import warnings
from typing import Any

import torch

from dumpers import format as fmt
from dumpers.torch_dump.session import OPTIMIZER_NODE, DumpSession

# torch's notes on the full backward hooks the dump registers on every submodule; the user can act on neither (a
# module returning a model-output object, as transformers' models do, has no backward entry, as with msprobe)
warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients are computed with respect "
                                          "to module outputs since no inputs require gradients")
warnings.filterwarnings("ignore", message="For backward hooks to be called, module output should be a Tensor or a "
                                          "tuple of Tensors")


_WRAPPER_NAME = "OptimizedModule"   # that class's name (tests/test_dumper_compile.py holds it for the torch installed)


@functools.lru_cache(maxsize=1)
def _compiled_module_type() -> type:
    """The class of the wrapper ``torch.compile`` returns for a module (compiling is lazy: nothing is traced).
    The wrapper's class is the same for every backend; the ``eager`` one spares the import of inductor's
    machinery (about 0.15 s instead of about 1 s)."""
    return type(torch.compile(torch.nn.Identity(), backend="eager"))


def is_compiled_module(module: torch.nn.Module) -> bool:
    """Whether ``module`` is a ``torch.compile`` wrapper. Nothing can be one before torch.compile's machinery
    is loaded, and loading it takes seconds: it is not loaded for this question."""
    # the class name first: only a module that may be one pays for learning the wrapper's class (0.15 s)
    return ("torch._dynamo" in sys.modules and type(module).__name__ == _WRAPPER_NAME
            and isinstance(module, _compiled_module_type()))


class ModuleHooks:
    """Installs and removes the hooks of one model."""

    def __init__(self, session: DumpSession, model: torch.nn.Module) -> None:
        self.session = session
        self.model = model
        self.handles: list = []
        self.pending: dict = {}          # id(module) -> stack of (Pending, parameters)
        self.backward_keys: dict = {}    # id(module) -> stack of (key, parent)
        self.grad_seen: dict = {}        # id(module) -> {param name: param}
        self.compiled = False            # the model holds torch.compile'd modules (not hooked)

    def install(self) -> None:
        if self.handles:
            return
        inside: list = []                # paths of torch.compile wrappers: what they hold runs compiled
        for path, module in self.model.named_modules():
            if is_compiled_module(module):
                inside.append(path)
            if any(path == p or path.startswith(p + ".") or not p for p in inside):
                continue                 # traced by dynamo: full backward hooks cannot be traced, no entry either
            if module is self.model or not path:
                continue
            name = f"Module.{path}.{type(module).__name__}"
            self.handles.append(module.register_forward_pre_hook(
                functools.partial(self._pre_forward, name), with_kwargs=True))
            self.handles.append(module.register_forward_hook(
                functools.partial(self._post_forward, name), with_kwargs=True))
            self.handles.append(module.register_full_backward_pre_hook(functools.partial(self._pre_backward, name)))
            self.handles.append(module.register_full_backward_hook(functools.partial(self._post_backward, name)))
            params = [(n, p) for n, p in module.named_parameters(recurse=False) if p.requires_grad]
            for pname, param in params:
                self.handles.append(param.register_post_accumulate_grad_hook(
                    functools.partial(self._param_grad, name, id(module), pname, len(params))))
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self.handles.append(register_optimizer_step_pre_hook(self._pre_optimizer))
        self.handles.append(register_optimizer_step_post_hook(self._post_optimizer))
        self.compiled = bool(inside)

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def _active(self) -> bool:
        s = self.session
        return s.on and not s.busy and os.getpid() == s.pid

    # --- forward ---------------------------------------------------------------------------------
    def _pre_forward(self, name: str, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        s = self.session
        if torch.compiler.is_compiling():   # traced into a compiled region: no entry, the graph as without us
            s.compiled = True
            return
        idx = s.next_index(f"{name}.forward")
        stack = self.pending.setdefault(id(module), [])
        if not self._active():
            stack.append(None)
            return
        key = f"{name}.forward.{idx}"
        s.busy = True
        try:
            s.scope_starts(key)
            pending = s.begin(key, args, kwargs, module=True)
            params = None
            if pending.record:
                params = {n: pending.enc.encode(p, ("parameters", n))
                          for n, p in module.named_parameters(recurse=False)}
            s.forward_parent[key] = pending.parent
            s.parents.append(key)
            stack.append((pending, params))
        except Exception as exc:  # noqa: BLE001
            stack.append(None)
            s._internal_error(exc)
        finally:
            s.busy = False

    def _post_forward(self, name: str, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        s = self.session
        if torch.compiler.is_compiling():
            return
        stack = self.pending.get(id(module))
        top = stack.pop() if stack else None
        if top is None:
            return
        pending, params = top
        if s.parents and s.parents[-1] == pending.key:
            s.parents.pop()
        s.scope_ends(pending.key)
        if not self._active():
            return
        s.busy = True
        try:
            s.finish(pending, output, extra={"parameters": params} if params is not None else None)
        except Exception as exc:  # noqa: BLE001
            s._internal_error(exc)
        finally:
            s.busy = False

    # --- backward --------------------------------------------------------------------------------
    def _pre_backward(self, name: str, module: torch.nn.Module, grad_output: tuple) -> None:
        s = self.session
        if torch.compiler.is_compiling():
            return
        idx = s.next_index(f"{name}.backward")
        stack = self.backward_keys.setdefault(id(module), [])
        if not self._active():
            stack.append(None)
            return
        key = f"{name}.backward.{idx}"
        fparent = s.forward_parent.get(f"{name}.forward.{idx}")
        parent = fparent.replace(".forward.", ".backward.") if fparent and fparent != OPTIMIZER_NODE else fparent
        s.scope_starts(key)
        s.parents.append(key)
        stack.append((key, parent))

    def _post_backward(self, name: str, module: torch.nn.Module, grad_input: tuple, grad_output: tuple) -> None:
        s = self.session
        if torch.compiler.is_compiling():
            return
        stack = self.backward_keys.get(id(module))
        top = stack.pop() if stack else None
        if top is None:
            return
        key, parent = top
        if s.parents and s.parents[-1] == key:
            s.parents.pop()
        if not self._active():
            return
        s.busy = True
        try:
            s.record_backward(key, grad_output, grad_input, drop_all_none=True, parent=parent)
        except Exception as exc:  # noqa: BLE001
            s._internal_error(exc)
        finally:
            s.busy = False

    def _param_grad(self, name: str, module_id: int, pname: str, expected: int, param: torch.Tensor) -> None:
        s = self.session
        if torch.compiler.is_compiling():
            return
        if not self._active():
            return
        seen = self.grad_seen.setdefault(module_id, {})
        seen[pname] = param
        if len(seen) < expected:
            return
        self.grad_seen[module_id] = {}
        idx = s.next_index(f"{name}.parameters_grad")
        key = f"{name}.parameters_grad.{idx}"
        if not s.wanted(key):
            return
        s.busy = True
        try:
            from dumpers.torch_dump.encode import Encoder
            from dumpers.torch_dump.stats import StatBatch

            batch = StatBatch(s.md5, s.cache)
            enc = Encoder(batch, s._tensor_hook(key))
            entry = {n: [enc.encode(p.grad, (fmt.PARAMETERS_GRAD, n))] for n, p in seen.items()}
            batch.resolve()
            s.record(key, entry)
        except Exception as exc:  # noqa: BLE001
            s._internal_error(exc)
        finally:
            s.busy = False

    # --- optimizer -------------------------------------------------------------------------------
    def _pre_optimizer(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        s = self.session
        if not self._active():
            return
        if OPTIMIZER_NODE not in s.construct:
            s.add_construct(OPTIMIZER_NODE, None)
        s.parents.append(OPTIMIZER_NODE)

    def _post_optimizer(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        s = self.session
        if s.parents and s.parents[-1] == OPTIMIZER_NODE:
            s.parents.pop()
