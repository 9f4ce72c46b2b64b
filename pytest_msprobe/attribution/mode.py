"""The correcting function mode: chosen API calls of the live step get the bench's output.

Calls are named by the dumper's own naming (:class:`dumpers.torch_dump.naming.NamedCallMode`), so a name
here is the name in dump.json and in the checker's and the compare's CSVs. A corrected call runs on its
device as usual, then once more on the bench (CPU, raised precision: the checker's
:func:`~pytest_msprobe.replay.raise_target` and :func:`~pytest_msprobe.replay.sides.copy_tensor`) on the same
input values; each floating-point output is given the bench's value rounded to the call's dtype, on the
call's device, with the device output's layout. Autograd still runs the device's backward of the call (the
gradient passes through the replacement unchanged): a correction fixes the call's forward output.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from dumpers.torch_dump import statcache
from dumpers.torch_dump.naming import CallCounter, NamedCallMode

from ..replay.sides import copy_tensor, raise_target

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


class CorrectionMode(NamedCallMode):
    """Names every call as the dumper does; the calls in ``correct`` get the bench's forward output.

    Args:
        correct: the names to correct (``Functional.silu.0``...); everything else runs untouched.
        expected: ``expected(api, device_out, bench_out, bench_inputs) -> (observed, expected, multiple)``,
            the device error of one output against the error model's estimate (None: not measured).
    """

    infer_reflected = True          # no slot wrappers here: ``0.5 * x`` is read from the calling code

    def __init__(self, correct: frozenset, *, expected: Optional[Callable] = None) -> None:
        super().__init__()
        self.correct = correct
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
            with torch.no_grad(), torch.autocast("cpu", enabled=False):    # the bench's dtype, never autocast's
                bench = func(*cargs, **ckwargs)
        except Exception as exc:  # noqa: BLE001 - left as it ran, with the reason
            record.reason = REASON_BENCH.format(f"{type(exc).__name__}: {exc}".splitlines()[0][:200])
            return out
        if written:
            return self._write_back(record, api, out, bench, written, (cargs, ckwargs))
        return self._replace(record, api, out, bench, (cargs, ckwargs))

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

    def _replace(self, record: CallRecord, api: str, out: Any, bench: Any, cargs: Any) -> Any:
        dev_leaves, spec = tree_flatten(out)
        bench_leaves, bench_spec = tree_flatten(bench)
        if len(dev_leaves) != len(bench_leaves):
            record.reason = REASON_SHAPE
            return out
        new = []
        for d, b in zip(dev_leaves, bench_leaves):
            if not (_is_tensor(d) and (d.is_floating_point() or d.is_complex())):
                new.append(d)
                continue
            if not _is_tensor(b) or b.shape != d.shape:
                record.reason = REASON_SHAPE
                return out
            self._measure(record, api, d, b, cargs)
            new.append(_Replace.apply(d, b) if d.requires_grad else _fixed(d, b))
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
