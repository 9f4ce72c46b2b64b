"""The correcting function mode: chosen API calls of the live step get the bench's output.

Calls are named by the dumper's own naming (:class:`dumpers.torch_dump.naming.NamedCallMode`), so a name
here is the name in dump.json and in the checker's and the compare's CSVs. A corrected call runs on its
device as usual, then once more on the bench (CPU, raised precision: the checker's
:func:`~pytest_msprobe.replay.raise_target` and :func:`~pytest_msprobe.replay.result.copy_tensor`) on the same
input values; each floating-point output is given the bench's value rounded to the call's dtype, on the
call's device, with the device output's layout. When the call is differentiated, its backward is the bench's
too: the bench ran with its own graph, and the gradients of the call's inputs come from it, rounded to each
input's dtype and put back on its device (``backward=False``: the device's backward of the call runs, the
gradient passing through the replacement unchanged).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from dumpers.torch_dump import statcache
from dumpers.torch_dump.naming import CallCounter, NamedCallMode

from ..replay.result import copy_tensor, raise_target

# APIs that draw random numbers: the bench would draw others, so "correct" has no meaning for them
RANDOM_APIS = frozenset((
    "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "rrelu", "rrelu_",
    "gumbel_softmax", "bernoulli", "bernoulli_", "multinomial", "normal_", "uniform_", "exponential_",
    "geometric_", "cauchy_", "log_normal_", "random_", "rand_like", "randn_like", "randint_like", "poisson",
    "native_dropout", "fused_dropout", "npu_dropout", "npu_dropout_with_add_softmax",
))

REASON_RANDOM = "random: the bench would draw other numbers"
REASON_COLLECTIVE = "communication: runs across processes"
REASON_INPLACE_VIEW = "in-place on a view, or on a tensor autograd tracks: a new value cannot be written back"
REASON_NO_FLOAT = "no floating-point tensor output"
REASON_ALIAS = "output shares memory with an input (a view): nothing to correct"
REASON_BENCH = "the bench could not run it: {}"
REASON_SHAPE = "the bench's output has another structure or shape than the device's"


@dataclass
class CallRecord:
    """One named call seen in a run: its name, and why it was not corrected ("" when it was, or could be)."""

    name: str
    reason: str = ""
    device_err: Optional[float] = None      # max |device - bench| over its outputs (a corrected call)
    expected_err: Optional[float] = None    # the error model's estimate for the same outputs
    multiple: Optional[float] = None        # device_err as a multiple of the model's estimate (largest output)
    backward_multiple: Optional[float] = None   # the same for its device backward (largest input gradient)
    dtype: str = ""
    note: str = ""


@dataclass
class RunLog:
    """What one run of the step saw: every named call, in order."""

    calls: list = field(default_factory=list)


def _is_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def _whole_storage(t: torch.Tensor) -> bool:
    """``t`` covers its storage exactly (not a view of a larger tensor)."""
    try:
        return (t.storage_offset() == 0 and t.is_contiguous()
                and t.untyped_storage().nbytes() == t.numel() * t.element_size())
    except (RuntimeError, NotImplementedError):
        return False


def _storages(values: Any) -> set:
    found = set()
    for leaf in tree_flatten(values)[0]:
        if _is_tensor(leaf):
            try:
                if leaf.untyped_storage().nbytes():
                    found.add(leaf.untyped_storage().data_ptr())
            except (RuntimeError, NotImplementedError):
                pass
    return found


def _written(api: str, args: tuple, kwargs: dict) -> list:
    """The tensors an in-place call (or ``out=``) writes; running statistics of a norm are not counted (the
    device call updates them as usual, the bench updates its own copies)."""
    if statcache.writes_of(api) == 2:
        return [kwargs["out"]] if _is_tensor(kwargs.get("out")) else []
    if not statcache.writes_of(api) and not kwargs:
        return []
    return [t for t in statcache.written_tensors(api, args, kwargs) if _is_tensor(t)]


def _fixed(dev: torch.Tensor, bench: torch.Tensor) -> torch.Tensor:
    """The bench's value in the device output's dtype, device and layout (a new tensor)."""
    fixed = torch.empty_like(dev)
    fixed.copy_(bench)
    return fixed


class _Replace(torch.autograd.Function):
    """Forward: the bench's value as a new tensor; backward: the gradient passes to the device output unchanged."""

    @staticmethod
    def forward(ctx: Any, device_out: torch.Tensor, bench: torch.Tensor) -> torch.Tensor:
        return _fixed(device_out, bench)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return grad, None


class _Corrected(torch.autograd.Function):
    """Forward: the bench's outputs as new tensors; backward: the bench's gradients (its graph, raised
    precision, on the CPU) rounded to each input's dtype and put back on its device."""

    @staticmethod
    def forward(ctx: Any, state: Any, *device_inputs: torch.Tensor) -> tuple:
        ctx.state = state
        return tuple(_fixed(d, b) for d, b in zip(state.device_outs, state.bench_outs))

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple:
        state = ctx.state
        outs, feed = [], []
        for b, g in zip(state.bench_outs, grads):
            if g is not None and b.requires_grad:
                outs.append(b)
                feed.append(g.detach().to("cpu", b.dtype))
        found = torch.autograd.grad(outs, state.bench_ins, feed, allow_unused=True) if outs else \
            [None] * len(state.bench_ins)
        back = [None if r is None else r.to(device=d.device, dtype=d.dtype)
                for r, d in zip(found, state.device_ins)]
        if state.measure is not None and outs:
            state.measure(state, grads, found)
        ctx.state = None
        return (None, *back)


@dataclass
class _BenchGraph:
    device_outs: list
    bench_outs: list
    device_ins: list
    bench_ins: list
    measure: Optional[Callable] = None      # (state, output grads, bench input grads): the device's own backward
                                            # measured against the bench's (the ideal run only)


def bench_inputs(api: str, args: tuple, kwargs: dict) -> tuple:
    """(args, kwargs) for the bench: CPU copies raised as the checker raises them."""
    def to_cpu(x: Any) -> Any:
        return x.detach().cpu() if _is_tensor(x) else x

    cargs, ckwargs = tree_map(to_cpu, (list(args), dict(kwargs)))
    ckwargs.pop("out", None)
    ckwargs.pop("device", None)         # as the checker's bench: the CPU's own default
    target = raise_target(cargs, ckwargs, api)
    cargs, ckwargs = tree_map(lambda x: copy_tensor(x, target, api), (cargs, ckwargs))
    return cargs, ckwargs


def _grad_pairs(args: tuple, kwargs: dict, cargs: list, ckwargs: dict, out: Any) -> Optional[tuple]:
    """(device inputs, bench inputs) that need a gradient, the bench's set to require one; None when no
    output is differentiated (nothing for the bench's backward to do)."""
    if not any(_is_tensor(x) and x.requires_grad for x in tree_flatten(out)[0]):
        return None
    dev_leaves = tree_flatten((list(args), {k: kwargs[k] for k in ckwargs}))[0]
    bench_leaves = tree_flatten((cargs, ckwargs))[0]
    if len(dev_leaves) != len(bench_leaves):
        return None
    device_ins, bench_ins = [], []
    for d, b in zip(dev_leaves, bench_leaves):
        if _is_tensor(d) and d.requires_grad and _is_tensor(b) and (b.is_floating_point() or b.is_complex()):
            b.requires_grad_(True)
            device_ins.append(d)
            bench_ins.append(b)
    return (device_ins, bench_ins) if device_ins else None


def _isolated(func: Callable, args: tuple, kwargs: dict, device_ins: list) -> tuple:
    """(floating outputs, inputs) of the call run again on the device from detached copies of ``device_ins``."""
    copies = {id(t): t.detach().requires_grad_(True) for t in device_ins}
    cargs, ckwargs = tree_map(lambda x: copies.get(id(x), x) if _is_tensor(x) else x, (list(args), dict(kwargs)))
    with torch.enable_grad():
        out = func(*cargs, **ckwargs)
    outs = [x for x in tree_flatten(out)[0] if _is_tensor(x) and (x.is_floating_point() or x.is_complex())]
    return outs, [copies[id(t)] for t in device_ins]


class CorrectionMode(NamedCallMode):
    """Names every call as the dumper does; the calls in ``correct`` get the bench's forward output.

    Args:
        correct: the names to correct (``Functional.silu.0``...); everything else runs untouched.
        expected: ``expected(api, device_out, bench_out, bench_inputs) -> (observed, expected, multiple)``,
            the device error of one output against the error model's estimate (None: not measured).
        expected_backward: the same for the gradient of input ``index`` (``(api, device_grad, bench_grad,
            bench_inputs, index, grad_output)``); needed with ``expected`` when ``backward``.
        backward: a corrected call's backward is the bench's too (its gradients from the bench's graph,
            rounded to the inputs' dtypes); False: the device's backward of the call runs as it did.
    """

    infer_reflected = True          # no slot wrappers here: ``0.5 * x`` is read from the calling code

    def __init__(self, correct: frozenset, *, expected: Optional[Callable] = None,
                 expected_backward: Optional[Callable] = None, backward: bool = True) -> None:
        super().__init__()
        self.correct = correct
        self.backward = backward
        self.expected_backward = expected_backward
        self.expected = expected
        self.counter = CallCounter()
        self.log = RunLog()

    def named(self, prefix: str, api: str, func: Callable, args: tuple, kwargs: dict) -> Any:
        name = self.counter.next(prefix, api)
        record = CallRecord(name)
        self.log.calls.append(record)
        static = self._static_reason(prefix, api, args, kwargs)
        if static:
            record.reason = static
            return func(*args, **kwargs)
        if name not in self.correct:
            out = func(*args, **kwargs)
            record.reason = self._output_reason(out, args, kwargs, api)
            return out
        written = _written(api, args, kwargs)
        before = bench_inputs(api, args, kwargs) if written else None
        out = func(*args, **kwargs)
        record.reason = self._output_reason(out, args, kwargs, api)
        if record.reason:
            return out
        try:
            cargs, ckwargs = before if before is not None else bench_inputs(api, args, kwargs)
            graph = None if written or not self.backward else _grad_pairs(args, kwargs, cargs, ckwargs, out)
            try:
                with torch.set_grad_enabled(graph is not None), torch.autocast("cpu", enabled=False):
                    bench = func(*cargs, **ckwargs)         # the bench's dtype, never autocast's
            except Exception:  # noqa: BLE001 - not differentiable on the bench: its forward output only
                if graph is None:
                    raise
                graph = None
                cargs, ckwargs = bench_inputs(api, args, kwargs)
                with torch.no_grad(), torch.autocast("cpu", enabled=False):
                    bench = func(*cargs, **ckwargs)
        except Exception as exc:  # noqa: BLE001 - left as it ran, with the reason
            record.reason = REASON_BENCH.format(f"{type(exc).__name__}: {exc}".splitlines()[0][:200])
            return out
        if written:
            return self._write_back(record, api, out, bench, written, (cargs, ckwargs))
        if graph is not None and self.expected is not None:
            graph = (*graph, lambda: _isolated(func, args, kwargs, graph[0]))
        return self._replace(record, api, out, bench, (cargs, ckwargs), graph)

    # --- why a call is left as it is -------------------------------------------------------------
    @staticmethod
    def _static_reason(prefix: str, api: str, args: tuple, kwargs: dict) -> str:
        if prefix == "Distributed":
            return REASON_COLLECTIVE
        if api in RANDOM_APIS:
            return REASON_RANDOM
        for t in _written(api, args, kwargs):
            if _is_tensor(t) and (t.requires_grad or t.grad_fn is not None or not _whole_storage(t)):
                return REASON_INPLACE_VIEW
        return ""

    @staticmethod
    def _output_reason(out: Any, args: tuple, kwargs: dict, api: str) -> str:
        if _written(api, args, kwargs):
            return ""                       # judged by _static_reason; the output is the written input
        leaves = [x for x in tree_flatten(out)[0] if _is_tensor(x)]
        floats = [x for x in leaves if x.is_floating_point() or x.is_complex()]
        if not floats:
            return REASON_NO_FLOAT
        if _storages(floats) & _storages((args, kwargs)):
            return REASON_ALIAS
        return ""

    # --- the correction ----------------------------------------------------------------------------
    def _measure(self, record: CallRecord, api: str, dev: torch.Tensor, bench: torch.Tensor, cargs: Any) -> None:
        """The device output's error against the bench's, and the model's estimate (the ideal run only)."""
        if self.expected is not None and dev.numel():
            try:
                observed, expected, multiple = self.expected(api, dev, bench, cargs)
            except Exception as exc:  # noqa: BLE001 - the correction stands; the verdict is left blank
                record.note = f"no error estimate: {type(exc).__name__}: {exc}"[:200]
            else:
                if record.multiple is None or multiple > record.multiple:
                    record.device_err, record.expected_err, record.multiple = observed, expected, multiple

    def _backward_measure(self, record: CallRecord, api: str, cargs: Any, isolated: Callable) -> Callable:
        """A measure of the call's device backward against the bench's gradients: the call is run again on the
        device from detached copies of its inputs (a graph of its own), and differentiated there."""
        def measure(state: _BenchGraph, grads: tuple, bench_grads: list) -> None:
            try:
                outs, ins = isolated()
                pairs = [(d, g) for d, g in zip(outs, grads) if g is not None and d.requires_grad]
                device_grads = torch.autograd.grad([d for d, _ in pairs], ins, [g for _, g in pairs],
                                                   allow_unused=True)
                for index, (dev, bench) in enumerate(zip(device_grads, bench_grads)):
                    if dev is not None and bench is not None and dev.numel():
                        observed, expected, multiple = self.expected_backward(
                            api, dev, bench, cargs, index, pairs[0][1])
                        if record.backward_multiple is None or multiple > record.backward_multiple:
                            record.backward_multiple = multiple
                            record.note = (f"backward: gradient of input {index} {multiple:.3g}x expected "
                                           f"(max abs error {observed:.3g}, expected {expected:.3g})")
            except Exception as exc:  # noqa: BLE001 - the correction stands; the verdict is the forward's
                record.note = f"no backward error estimate: {type(exc).__name__}: {exc}"[:200]
        return measure

    def _replace(self, record: CallRecord, api: str, out: Any, bench: Any, cargs: Any,
                 graph: Optional[tuple] = None) -> Any:
        dev_leaves, spec = tree_flatten(out)
        bench_leaves, bench_spec = tree_flatten(bench)
        if len(dev_leaves) != len(bench_leaves):
            record.reason = REASON_SHAPE
            return out
        new: list = []
        floats: list = []                   # (position, device output, bench output)
        for d, b in zip(dev_leaves, bench_leaves):
            new.append(d)
            if not (_is_tensor(d) and (d.is_floating_point() or d.is_complex())):
                continue
            if not _is_tensor(b) or b.shape != d.shape:
                record.reason = REASON_SHAPE
                return out
            self._measure(record, api, d, b.detach(), cargs)
            floats.append((len(new) - 1, d, b))
        if graph is not None and any(d.requires_grad for _, d, _ in floats):
            device_ins, bench_ins = graph[0], graph[1]
            measure = self._backward_measure(record, api, cargs, graph[2]) if len(graph) > 2 else None
            state = _BenchGraph([d for _, d, _ in floats], [b for _, _, b in floats], device_ins, bench_ins, measure)
            for (i, _, _), fixed in zip(floats, _Corrected.apply(state, *device_ins)):
                new[i] = fixed
        else:
            for i, d, b in floats:
                new[i] = _Replace.apply(d, b.detach()) if d.requires_grad else _fixed(d, b.detach())
        record.dtype = record.dtype or next((str(d.dtype).replace("torch.", "") for d in dev_leaves
                                             if _is_tensor(d) and d.is_floating_point()), "")
        return tree_unflatten(new, spec)

    def _write_back(self, record: CallRecord, api: str, out: Any, bench: Any, written: list, cargs: tuple) -> Any:
        """An in-place call (on a whole tensor autograd does not track): the bench's value written into it."""
        targets = [t for t in written if _is_tensor(t) and t.is_floating_point()]
        if not targets:
            record.reason = REASON_NO_FLOAT
            return out
        first = cargs[0][0] if cargs[0] else None
        bench_value = bench if _is_tensor(bench) else (first if _is_tensor(first) else None)
        if bench_value is None or bench_value.shape != targets[0].shape:
            record.reason = REASON_SHAPE
            return out
        self._measure(record, api, targets[0], bench_value, cargs)
        with torch.no_grad():
            targets[0].copy_(bench_value)
        record.dtype = str(targets[0].dtype).replace("torch.", "")
        return out
