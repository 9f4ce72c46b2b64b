"""The one replay of a captured call: prepare inputs, raise the bench dtype, seed, call, backward, judge.

The bench set-up follows spec precision-standard.md section 1: the same inputs feed both sides; the bench
tensors are raised (fp16/bf16 -> fp32, fp32 -> fp64, mixed -> fp32) and never go through a device backend;
the device tensors keep their dtype. What differs between frameworks (how the callable is found, how tensors
cross over, how a gradient is taken) is a framework adapter (:mod:`.torch_adapter`, :mod:`.mindspore_adapter`);
everything else is here, once. Never raises for a bad case: whatever prevents the comparison becomes an
API-level SKIP with the reason (spec 3.4). torch is imported on first use.
"""
from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any

from ..precision.verdict import WARNING, is_skip
from .result import (
    BENCH,
    DEVICE,
    RANDOM_DATA,
    REAL_DATA,
    Call,
    CaseResult,
    RunOptions,
    Side,
    backward_messages,
    case_name,
    copy_leaves,
    data_mode,
    error_result,
    exc_text,
    item_seed,
    judge,
    raise_target,
    skip_result,
)
from . import torch_adapter


def run_side(adapter: Any, call: Call, role: str, raise_to: Any, backend: Any, index: int,
             backward: bool, clone: bool = True) -> Side:
    """Prepare the inputs of one side (copy, raise, convert, move), seed, call, backward, read back.

    ``clone`` False: the side's unraised tensors are the inputs themselves, for a side that may change them
    (nothing reads them after it)."""
    args = adapter.to_framework(copy_leaves(list(call.args), raise_to, call.api, clone))
    kwargs = adapter.to_framework(copy_leaves(dict(call.kwargs), raise_to, call.api, clone))
    if role == DEVICE:
        args, kwargs = list(backend.to_device(args, index)), dict(backend.to_device(kwargs, index))
    if backward:
        args, kwargs = adapter.with_grad(args, kwargs, call.plan)
    adapter.seed(backend, call.seed)
    if role == BENCH:
        out = call.func(*args, **kwargs)
    else:
        with torch_adapter.device_context(call.autocast, backend):      # as training ran it (None: no autocast)
            out = backend.call(call.func, args, kwargs)
    side = Side(out, [])
    if backward:
        side = adapter.backward(call, role, args, kwargs, out, raise_to, backend, index)
    if role == DEVICE:
        backend.synchronize(index)
    side.out = adapter.to_torch(side.out)
    side.grads = adapter.to_torch(side.grads)
    side.node_grads = adapter.to_torch(side.node_grads)
    return side


def recorded_side(adapter: Any, call: Call, bench: Side, recorded: Any) -> tuple:
    """The device side of the ``recorded`` device type, from the bench side: (Side, {row name: SKIP reason})."""
    from .expected import device_backward, device_forward
    out, skips = device_forward(call.name, call.api, bench.out, recorded)
    grads: list = []
    if bench.backward_ran:
        grads, more = device_backward(call.name, list(bench.grads), adapter.gradient_mapping(bench, call), recorded,
                                      bench.node_name)
        skips.update(more)
    return Side(out, grads, backward_ran=bench.backward_ran), skips


def replay(adapter: Any, case: Any, inputs: Any, backend: Any, index: int, options: RunOptions, mode: str,
           seed: int, owned: bool = False) -> tuple:
    """Bench and device runs of one call and the comparison: (CaseResult, saved tensors).

    The bench always works on copies (raised, or cloned). The device side, which runs last, also copies the
    inputs unless they are ``owned`` (built for this call alone and read by nobody after it) and no error
    data will save them, or its backend copies them anyway (another device)."""
    from ..precision.standards import get_standard
    std = get_standard(options.standard)
    name = case_name(case)
    args = list(inputs.args or ())
    kwargs = dict(inputs.kwargs or {})
    kwargs.pop("device", None)
    messages = backward_messages(case.api, kwargs)
    grad_output = getattr(inputs, "grad_output", None)
    plan = None
    if getattr(case, "backward", None) is not None and not messages and grad_output is not None:
        plan = adapter.backward_plan(case, args, kwargs)
    amp = torch_adapter.for_case(case, args, kwargs) if adapter.framework == "pytorch" else None
    call = Call(name, case.api, adapter.resolve(case), args, kwargs, grad_output, plan, item_seed(name, seed), amp)
    # bench: CPU, raised precision, never through a backend; under autocast from the inputs after its cast
    bench_call = call
    if amp is not None:
        bench_args, bench_kwargs = torch_adapter.after_cast(amp, case.api, args, kwargs)
        bench_call = dataclasses.replace(call, args=bench_args, kwargs=bench_kwargs)
    target = raise_target(bench_call.args, bench_call.kwargs, case.api)
    note = amp.note if amp is not None else ""
    try:
        bench = run_side(adapter, bench_call, BENCH, target, backend, index, plan is not None)
    except Exception as exc:  # noqa: BLE001 - the adapter retries in a lower dtype, or says why it failed
        target, retry_note = adapter.bench_retry(exc, target)
        note = "\n".join(n for n in (note, retry_note) if n)
        try:
            bench = run_side(adapter, bench_call, BENCH, target, backend, index, plan is not None)
        except Exception as exc2:  # noqa: BLE001 - reported as the API's SKIP reason
            raise adapter.failure(BENCH, exc2, backend) from None
    from ..devices.base import is_recorded
    from . import expected as rec
    skips: dict = {}
    cells: dict = {}
    if is_recorded(backend):
        # device: what the training run recorded (the value after the call, for in-place APIs)
        device, skips = recorded_side(adapter, call, bench, rec.load(case, options, required=True))
    else:
        # device: same values, own dtype, moved by the backend; backward only where the bench ran one
        read_after = not owned or bool(options.error_data_dir)     # the caller's, or saved as error data
        try:
            device = run_side(adapter, call, DEVICE, None, backend, index, bench.backward_ran,
                              clone=read_after and not backend.copies_inputs)
        except Exception as exc:  # noqa: BLE001 - reported as the API's SKIP reason
            raise adapter.failure(DEVICE, exc, backend) from None
        recording = rec.load(case, options, required=False) if mode == REAL_DATA else None
        if recording is not None:       # replay fidelity: the device output against the recorded one
            mapping = adapter.gradient_mapping(device, call) if device.backward_ran else []
            cells = rec.fidelity(name, case.api, device, mapping, recording, call)
    bench_grads, dev_grads = list(bench.grads), list(device.grads)
    if amp is not None:
        dev_grads = torch_adapter.lowered_grads(amp, case.api, args, kwargs, dev_grads)
    if bench.message or device.message:
        messages.append(bench.message or device.message)
        bench_grads, dev_grads = [], []
    result = judge(name, case.api, std, (bench.out, device.out, bench_grads, dev_grads), messages, mode, seed, note,
                   skips)
    shown = {r.name for r in result.details if not is_skip(r.status)}
    result.fidelity = {row: f.text for row, f in cells.items() if row in shown}
    from .expected import device_multiples
    result.multiples = {row: m for row, m in device_multiples(call, bench.out, device.out, bench_grads,
                                                              dev_grads, result.details).items() if row in shown}
    saved = {
        "forward.input": [*args, *kwargs.values()],
        "forward.output.bench": bench.out, "forward.output.device": device.out,
        "backward.input": bench.grad_in,
        "backward.output.bench": bench_grads, "backward.output.device": dev_grads,
    }
    return result, saved


# --- entry points ---------------------------------------------------------------------------------------------
def adapter_for(case: Any) -> Any:
    """The framework adapter of a case (``case.framework``: pytorch or mindspore)."""
    if getattr(case, "framework", "pytorch") == "mindspore":
        from .mindspore_adapter import ADAPTER
        return ADAPTER
    return torch_adapter.ADAPTER


def run_case(case: Any, backend: Any, device_index: int, options: RunOptions) -> CaseResult:
    """Run one API call on the bench and on the device and judge it (an API-level SKIP when it cannot), within
    ``options.timeout`` seconds when set (``--msprobe-timeout``): a call that runs longer is an error
    ``timeout``, left running in a daemon thread (Python cannot stop it)."""
    if not options.timeout:
        return _run_case(case, backend, device_index, options)
    _warm_up()
    name = case_name(case)
    box: list = []

    def target() -> None:
        try:
            box.append(_run_case(case, backend, device_index, options))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            box.append(exc)

    thread = threading.Thread(target=target, name=f"msprobe-{name}", daemon=True)
    thread.start()
    thread.join(options.timeout)
    if thread.is_alive() or not box:
        return error_result(name, f"timeout: the call did not finish within {options.timeout:g} s "
                                  "(--msprobe-timeout); it was left running in the background")
    if isinstance(box[0], BaseException):
        raise box[0]
    result: CaseResult = box[0]
    return result


@functools.lru_cache(maxsize=None)
def _warm_up() -> None:
    """Import what every case needs and load the metric kernel for the usual dtype pairs, once per process, so
    the first timed call is not charged for them."""
    import torch  # noqa: F401

    import generators.inputs  # noqa: F401
    from dumpers import metrics_engine

    from ..precision import compare  # noqa: F401
    metrics_engine.warm_up()


def _run_case(case: Any, backend: Any, device_index: int, options: RunOptions) -> CaseResult:
    name = case_name(case)
    mode = data_mode(case, options)
    seed = options.seed
    if getattr(case, "problem", None):
        result = skip_result(name, str(case.problem), data_mode=mode, seed=seed)
        result.invalid = True
        return result
    problem = adapter_for(case).setup()     # before Hypothesis runs: importing MindSpore changes the recursion limit
    if problem:
        return skip_result(name, problem, data_mode=mode, seed=seed)
    if options.examples > 1 and mode == RANDOM_DATA:
        from .examples import run_examples
        return run_examples(case, backend, device_index, options, seed, run=run_with_inputs)
    try:
        from generators.inputs import build_inputs
        inputs = build_inputs(case, random=(mode == RANDOM_DATA), seed=options.seed, max_bytes=options.max_bytes,
                              edge_values=options.edge_values)
    except Exception as exc:  # noqa: BLE001 - spec 3.4: any failure to build inputs is a SKIP
        return skip_result(name, exc_text(exc), data_mode=mode, seed=seed)
    return run_with_inputs(case, inputs, backend, device_index, options, mode=mode, seed=seed, owned=True)


def run_with_inputs(case: Any, inputs: Any, backend: Any, device_index: int, options: RunOptions, *,
                    mode: str, seed: int, owned: bool = False) -> CaseResult:
    """Bench and device runs and the comparison, for inputs already built (``owned``: built for this call
    alone, so the device side may change them; otherwise the caller's inputs are left as they were)."""
    name = case_name(case)
    adapter = adapter_for(case)
    from ..devices.base import is_recorded
    problem = None
    if not is_recorded(backend):
        backend, device_index, problem = adapter.choose_backend(backend, device_index, options.device_type)
    if problem:
        return skip_result(name, problem, data_mode=mode, seed=seed)
    try:
        result, saved = replay(adapter, case, inputs, backend, device_index, options, mode, seed, owned)
    except Exception as exc:  # noqa: BLE001 - spec 3.4: the API becomes SKIP with the error text
        return skip_result(name, exc_text(exc), data_mode=mode, seed=seed)
    result.summary = str(getattr(inputs, "summary", "") or "")
    if options.error_data_dir and result.failing(WARNING):
        from .errordata import save_error_data
        try:
            save_error_data(options.error_data_dir, name, saved)
        except (OSError, RuntimeError) as exc:     # RuntimeError: torch.save's writer (disk full)
            result.note += f"\ncould not save error data to {options.error_data_dir}: {exc}"
    return result
