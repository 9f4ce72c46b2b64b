"""Runs the user's step again and again from the same state: RNG restored, gradients cleared, nothing kept.

Before each run: torch's CPU generator, the accelerator's generators (the device backend's module), Python's
``random`` and numpy's global generator are put back to the state they had when attribution started, every
gradient is cleared and the model's buffers (running statistics) are restored. After the last run the
gradients the parameters had before and every RNG state are put back. The parameters themselves are never
written; a step that changes them (an optimizer step inside it) is refused.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch


class StepError(RuntimeError):
    """The step cannot be attributed (it changes the parameters, returns no loss, is not deterministic)."""


@dataclass
class StepResult:
    """The loss and gradients of one run, on the CPU (gradients: name -> tensor in float32, or float64 for
    float64 parameters; None if absent)."""

    loss: float
    grads: dict
    seconds: float
    log: Any = None


def _accelerator_module(device_type: str) -> Any:
    if device_type in ("", "cpu"):
        return None
    module = getattr(torch, device_type, None)
    if module is None or not hasattr(module, "get_rng_state_all"):
        return None
    try:
        return module if module.is_available() else None
    except Exception:  # noqa: BLE001 - an accelerator module that cannot answer has no state to keep
        return None


class RngState:
    """Every generator a training step may draw from, captured once and restored on demand."""

    def __init__(self, device_type: str = "cpu") -> None:
        self.accel = _accelerator_module(device_type)
        self.cpu = torch.get_rng_state()
        self.accel_states = self.accel.get_rng_state_all() if self.accel is not None else None
        self.py = random.getstate()
        try:
            import numpy as np
            self.np = np.random.get_state()
        except ImportError:          # pragma: no cover - numpy is a dependency
            self.np = None

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.accel is not None:
            self.accel.set_rng_state_all(self.accel_states)
        random.setstate(self.py)
        if self.np is not None:
            import numpy as np
            np.random.set_state(self.np)


def graph_parameters(loss: torch.Tensor) -> list:
    """The leaf tensors requiring grad that ``loss`` depends on, in the graph's order, named ``param{i}``."""
    seen: set = set()
    found: list = []
    stack = [loss.grad_fn] if loss.grad_fn is not None else []
    visited: set = set()
    while stack:
        node = stack.pop()
        if node is None or node in visited:
            continue
        visited.add(node)
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor) and id(variable) not in seen:
            seen.add(id(variable))
            found.append(variable)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return [(f"param{i}", p) for i, p in enumerate(found)]


def _fingerprint(params: list) -> list:
    """A witness of the parameters' values: each one's sum and sum of squares, in float64."""
    with torch.no_grad():
        return [(float(p.detach().sum(dtype=torch.float64)), float(p.detach().double().square().sum()))
                for _, p in params]


def _host_copy(grad: torch.Tensor) -> torch.Tensor:
    """A gradient on the CPU, exactly: float32 holds bf16/fp16/fp32 values, float64 stays float64."""
    return grad.detach().to("cpu", torch.float64 if grad.dtype == torch.float64 else torch.float32)


class StepRunner:
    """Runs ``step()`` from the saved state; ``run(mode)`` gives a :class:`StepResult`."""

    def __init__(self, step: Callable, *, model: Any = None, parameters: Any = None, device_type: str = "cpu",
                 synchronize: Optional[Callable] = None) -> None:
        self.step = step
        self.model = model
        self.device_type = device_type
        self.synchronize = synchronize
        self.rng = RngState(device_type)
        self.params: list = []
        if parameters is not None:
            self.params = [(n, p) for n, p in parameters]
        elif model is not None:
            self.params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.saved_grads = {id(p): p.grad for _, p in self.params}
        self.buffers = ([(b, b.detach().clone()) for b in model.buffers()] if model is not None else [])
        self.runs = 0
        self.seconds = 0.0

    def _reset(self) -> None:
        for _, p in self.params:
            p.grad = None
        with torch.no_grad():
            for buf, value in self.buffers:
                if buf.shape == value.shape:
                    buf.copy_(value)
        self.rng.restore()

    def run(self, mode: Any = None) -> StepResult:
        """One run of the step, under ``mode`` (a TorchFunctionMode) when given."""
        self._reset()
        before = _fingerprint(self.params)
        start = time.perf_counter()
        if mode is None:
            loss = self.step()
        else:
            with mode:
                loss = self.step()
        if self.synchronize is not None:
            self.synchronize()
        seconds = time.perf_counter() - start
        self.runs += 1
        self.seconds += seconds
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise StepError(f"step() must return the loss as a one-element tensor, got {type(loss).__name__}"
                            + (f" of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else ""))
        if not self.params:
            if loss.grad_fn is None:
                raise StepError("the loss returned by step() has no autograd graph; run the forward pass with "
                                "gradients on, and pass model= or parameters= to attribute()")
            self.params = graph_parameters(loss)
            self.saved_grads = {id(p): None for _, p in self.params}
            before = _fingerprint(self.params)
        if _fingerprint(self.params) != before:
            changed = [n for (n, _), a, b in zip(self.params, before, _fingerprint(self.params)) if a != b]
            raise StepError(f"step() changed the parameters ({', '.join(changed[:3])}...); it must run the forward "
                            "and backward pass only, not the optimizer step")
        grads = {n: (_host_copy(p.grad) if p.grad is not None else None) for n, p in self.params}
        return StepResult(float(loss.detach().to("cpu", torch.float64)), grads, seconds,
                          getattr(mode, "log", None))

    def finish(self) -> None:
        """Give back the gradients, buffers and RNG states the user had before attribution started."""
        for _, p in self.params:
            p.grad = self.saved_grads.get(id(p))
        with torch.no_grad():
            for buf, value in self.buffers:
                if buf.shape == value.shape:
                    buf.copy_(value)
        self.rng.restore()
