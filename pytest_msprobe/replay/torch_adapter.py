"""The PyTorch side of the replay: torch callables, autograd backward, any PyTorch device backend."""
from __future__ import annotations

from typing import Any

from dumpers import format as fmt

from .result import BENCH, MULTI_BACKWARD_MESSAGE, Side, copy_tensor, cpu_leaves, first_grad, raise_target

FRAMEWORK = "pytorch"


def _with_grad(x: Any) -> Any:
    """Spec 1.2.6: leaf with requires_grad, times 1 and cast back (a non-leaf), gradient retained."""
    leaf = x.detach().requires_grad_(True)
    y = (leaf * 1).to(x.dtype)
    y.retain_grad()
    return y


def run_backward(target: Any, grad: Any) -> None:
    """``target.backward(grad)``, straight into autograd's engine when the gradient plainly fits the output.

    The Python front end of ``Tensor.backward`` checks the gradient's shape through torch.fx's symbolic
    shapes, whose first import (sympy with it) costs about half a second per process. For plain tensors
    (no ``__torch_function__`` override or mode) of the same shape, both real or both complex, that check
    cannot fail, and the engine gets exactly the arguments the front end would give it; anything else goes
    through ``Tensor.backward``.
    """
    import torch

    engine = getattr(torch.autograd.graph, "_engine_run_backward", None)
    plain = (type(target) is torch.Tensor and type(grad) is torch.Tensor and not target.is_nested
             and not torch.overrides.has_torch_function((target, grad)))
    if (engine is None or not plain or grad.shape != target.shape
            or grad.dtype.is_complex != target.dtype.is_complex):
        target.backward(grad)
        return
    engine((target,), (grad,), False, False, (), allow_unreachable=True, accumulate_grad=True)


def _cast_like(grad: Any, like: Any) -> Any:
    return grad.to(like.dtype) if grad.is_floating_point() and grad.dtype != like.dtype else grad


class TorchAdapter:
    """How a PyTorch case is called, converted and differentiated."""

    framework = FRAMEWORK

    def setup(self) -> str | None:
        return None

    def choose_backend(self, backend: Any, index: int, named: str | None) -> tuple:
        """(backend, index, problem): a MindSpore backend cannot run a PyTorch call."""
        if getattr(backend, "framework", FRAMEWORK) != FRAMEWORK:
            return backend, index, (f"device type {backend.name!r} runs MindSpore calls; check a PyTorch dump "
                                    "with a PyTorch backend (cpu, cuda, npu)")
        return backend, index, None

    def resolve(self, case: Any) -> Any:
        from generators.apis import resolve_api
        return resolve_api(case.prefix, case.api)

    def to_framework(self, obj: Any) -> Any:
        return obj

    def to_torch(self, obj: Any) -> Any:
        return cpu_leaves(obj)

    def seed(self, backend: Any, seed: int) -> None:
        """Seed the CPU generator (and CUDA's when that is the device); torch.manual_seed would also queue
        lazy seeding of every accelerator type, which costs milliseconds per call."""
        import torch
        torch.default_generator.manual_seed(seed)
        if getattr(backend, "torch_device", "cpu") == "cuda":
            torch.cuda.manual_seed_all(seed)

    def backward_plan(self, case: Any, args: list, kwargs: dict) -> Any:
        """Which top-level positional args / kwargs need a gradient (the dump's requires_grad or the tensor's);
        None when none does."""
        import torch
        fwd = case.forward if isinstance(case.forward, dict) else {}
        dump_args = fwd.get(fmt.INPUT_ARGS) or []
        dump_kwargs = fwd.get(fmt.INPUT_KWARGS) or {}

        def wants(t: Any, info: Any) -> bool:
            if not isinstance(t, torch.Tensor) or not (t.is_floating_point() or t.is_complex()):
                return False
            return bool(t.requires_grad or (isinstance(info, dict) and info.get("requires_grad") is True))

        arg_flags = [wants(a, dump_args[i] if i < len(dump_args) else None) for i, a in enumerate(args)]
        kw_flags = {k: wants(v, dump_kwargs.get(k) if isinstance(dump_kwargs, dict) else None)
                    for k, v in kwargs.items()}
        return (arg_flags, kw_flags) if any(arg_flags) or any(kw_flags.values()) else None

    def with_grad(self, args: list, kwargs: dict, plan: Any) -> tuple:
        arg_flags, kw_flags = plan
        args = [_with_grad(a) if i < len(arg_flags) and arg_flags[i] else a for i, a in enumerate(args)]
        kwargs = {k: _with_grad(v) if kw_flags.get(k) else v for k, v in kwargs.items()}
        return args, kwargs

    def backward(self, call: Any, role: str, args: list, kwargs: dict, out: Any, raise_to: Any, backend: Any,
                 index: int) -> Side:
        """Backward from the graded output, fed the dumped output gradient (raised on the bench).

        The bench decides whether backward runs (a tensor output that requires grad); the device follows it."""
        import torch

        from ..precision.standards import GRAD_INDEX
        grad_index = GRAD_INDEX.get(call.api)
        target = out[grad_index] if grad_index is not None and isinstance(out, (list, tuple)) else out
        if role == BENCH:
            if not isinstance(target, torch.Tensor):
                return Side(out, [], message=MULTI_BACKWARD_MESSAGE)
            grad = first_grad(call.grad_output)
            if not target.requires_grad or not isinstance(grad, torch.Tensor):
                return Side(out, [])
            grad_in = _cast_like(copy_tensor(grad, raise_target([grad], {}, call.api), call.api), target)
        else:
            grad = first_grad(call.grad_output)
            grad_in = _cast_like(backend.to_device(grad.detach().clone(), index), target)
        node: list = []                 # what the dumper records: the input gradients of the output's node
        hook = target.grad_fn.register_hook(lambda grad_inputs, _: node.extend(grad_inputs)) if target.grad_fn else None
        run_backward(target, grad_in)
        if hook is not None:
            hook.remove()
        grads = [a.grad for a in args if isinstance(a, torch.Tensor)]
        return Side(out, grads, grad_in=grad_in if role == BENCH else None, backward_ran=True, node_grads=node,
                    node_name=type(target.grad_fn).__name__ if target.grad_fn is not None else "")

    def gradient_mapping(self, side: Side, call: Any) -> list:
        """Which recorded node gradient is which argument's: found on this side by value (see
        :func:`generators.recorded.match_gradients`)."""
        from generators.recorded import match_gradients
        return match_gradients(list(side.grads), list(side.node_grads))

    def bench_retry(self, exc: BaseException, target: Any) -> tuple:
        raise exc

    def failure(self, role: str, exc: BaseException, backend: Any) -> BaseException:
        return exc


ADAPTER = TorchAdapter()
