"""Run one captured API call: inputs -> bench (CPU, raised precision) and device -> compare -> rows.

No pytest here: the plugin turns a :class:`CaseResult` into an item outcome and CSV rows. torch is
imported on first use. The bench set-up follows spec precision-standard.md section 1: the same inputs
feed both sides; the bench tensors are raised (fp16/bf16 -> fp32, fp32 -> fp64, mixed -> fp32) and
never go through a device backend; the device tensors keep their dtype.
"""
from __future__ import annotations

import dataclasses
import os
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

from .precision import verdict
from .precision.fields import reason_metrics
from .settings import DEFAULT_FAIL_ON, DEFAULT_SEED, DEFAULT_STANDARD

REAL_DATA = "real_data"
RANDOM_DATA = "random_data"
OUT_KWARG_MESSAGE = "function with out=... arguments don't support automatic differentiation, skip backward."
NO_BACKWARD_MESSAGE = "function backward result is None, skip backward."
MULTI_BACKWARD_MESSAGE = "Multiple backward is not supported."

def item_seed(name: str, seed: int) -> int:
    """Per-API seed from the run seed and the API's dump name: the same on every worker and every run."""
    return zlib.crc32(f"{seed}:{name}".encode()) & 0x7FFFFFFF


@dataclass
class RunOptions:
    """What the plugin's options decide for every case."""

    standard: str = DEFAULT_STANDARD
    random: bool = False
    seed: int = DEFAULT_SEED
    max_bytes: int | None = None
    edge_values: bool = False
    examples: int = 1
    fail_on: str = DEFAULT_FAIL_ON
    error_data_dir: str | None = None       # save inputs/outputs of failing APIs here when set
    reproduce: str = ""                     # command template with {name}, shown for failing examples


@dataclass
class CaseResult:
    """Everything known about one API after its run (or why it was not run)."""

    name: str
    forward: str
    backward: str | None                  # None: blank cell
    message: str | None                   # the result CSV's 4th field (None: three fields)
    details: list = field(default_factory=list)
    data_mode: str = REAL_DATA
    seed: int | None = None
    summary: str = ""                        # inputs summary (random data)
    note: str = ""                           # extra text for the pytest report (shrunk example, ...)

    def failing(self, fail_on: str = DEFAULT_FAIL_ON) -> bool:
        return verdict.is_failing(self.forward, self.backward, fail_on=fail_on)

    @property
    def skipped(self) -> bool:
        return verdict.item_outcome(self.forward, self.backward) == verdict.SKIPPED

    def worst(self) -> tuple:
        """(row name, reason) of the first error row, else the first warning row, else ('', '')."""
        for level in (verdict.ERROR_KEY, verdict.WARNING_KEY):
            for row in self.details:
                if verdict.norm(row.status) == level:
                    return row.name, _reason(row)
        if self.failing(verdict.WARNING):
            return self.name, (self.message or "").strip()
        return "", ""

    def standards(self) -> list:
        return sorted({str(getattr(r, "standard", "") or "") for r in self.details} - {""})


def _reason(row: Any) -> str:
    lines = [ln for ln in str(row.message or "").splitlines() if ln.strip()]
    text = lines[-1] if lines else str(row.status)
    parts = reason_metrics(row.metrics or {})
    return text + (f" [{parts}]" if parts else "")


def skip_result(name: str, message: str, *, data_mode: str = REAL_DATA, seed: int | None = None,
                direction_row: bool = True) -> CaseResult:
    """API-level SKIP (spec 3.4): result row with the message, one SKIP details row."""
    rows = []
    if direction_row:
        rows.append(_precision("skip_row")(f"{name}.forward.output.0", message))
    return CaseResult(name, verdict.SKIP, verdict.SKIP, message, rows, data_mode, seed)


def error_result(name: str, message: str, *, data_mode: str = REAL_DATA, seed: int | None = None) -> CaseResult:
    """API reported as error without metrics (timeout, crashed worker)."""
    row = _precision("skip_row")(f"{name}.forward.output.0", message)
    row = dataclasses.replace(row, status=verdict.ERROR)
    return CaseResult(name, verdict.ERROR, None, message, [row], data_mode, seed)


def _precision(name: str) -> Any:
    from pytest_msprobe.precision import compare
    return getattr(compare, name)


# --- bench / device preparation ----------------------------------------------------------------------
def _torch() -> Any:
    import torch
    return torch


def _walk_dtypes(obj: Any, found: set, torch: Any, depth: int = 0) -> None:
    if depth > 16:
        return
    if isinstance(obj, torch.Tensor):
        if obj.dtype in (torch.float16, torch.bfloat16, torch.float32):
            found.add(obj.dtype)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _walk_dtypes(x, found, torch, depth + 1)
    elif isinstance(obj, dict):
        for x in obj.values():
            _walk_dtypes(x, found, torch, depth + 1)


def raise_target(args: Any, kwargs: dict, api: str) -> Any:
    """The bench dtype of spec 1.2: None (no cast), torch.float32 or torch.float64."""
    torch = _torch()
    from pytest_msprobe.precision.standards import HF32_APIS, NO_RAISE_APIS
    if api in NO_RAISE_APIS:
        return None
    found: set = set()
    _walk_dtypes(list(args), found, torch)
    _walk_dtypes(kwargs, found, torch)
    if not found:
        return None
    if found == {torch.float32}:
        return None if api in HF32_APIS else torch.float64
    return torch.float32


def _map(fn: Callable, obj: Any, depth: int = 0) -> Any:
    if depth > 16:
        return obj
    if isinstance(obj, list):
        return [_map(fn, x, depth + 1) for x in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_map(fn, x, depth + 1) for x in obj)
    if isinstance(obj, dict):
        return {k: _map(fn, v, depth + 1) for k, v in obj.items()}
    return fn(obj)


def _copy_tensor(x: Any, target: Any, api: str, torch: Any) -> Any:
    """Detached copy (spec 1.2.5: a few in-place view APIs keep the graph), raised to ``target``."""
    from pytest_msprobe.precision.standards import HF32_APIS, NO_DETACH_APIS
    if not isinstance(x, torch.Tensor):
        return x
    y = x.clone() if api in NO_DETACH_APIS else x.detach().clone()
    raisable = y.dtype in (torch.float16, torch.bfloat16, torch.float32) and y.dtype != target
    if target is not None and raisable and not (api in HF32_APIS and y.dtype == torch.float32):
        y = y.to(target)
    return y


def _with_grad(x: Any, torch: Any) -> Any:
    """Spec 1.2.6: leaf with requires_grad, times 1 and cast back (a non-leaf), gradient retained."""
    leaf = x.detach().requires_grad_(True)
    y = (leaf * 1).to(x.dtype)
    y.retain_grad()
    return y


def _grad_flags(case: Any, args: list, kwargs: dict, torch: Any) -> tuple:
    """Which top-level positional args / kwargs need a gradient (dump's requires_grad or the tensor's)."""
    fwd = case.forward if isinstance(case.forward, dict) else {}
    dump_args = fwd.get("input_args") or []
    dump_kwargs = fwd.get("input_kwargs") or {}

    def wants(t: Any, info: Any) -> bool:
        if not isinstance(t, torch.Tensor) or not (t.is_floating_point() or t.is_complex()):
            return False
        return bool(t.requires_grad or (isinstance(info, dict) and info.get("requires_grad") is True))

    arg_flags = [wants(a, dump_args[i] if i < len(dump_args) else None) for i, a in enumerate(args)]
    kw_flags = {k: wants(v, dump_kwargs.get(k) if isinstance(dump_kwargs, dict) else None)
                for k, v in kwargs.items()}
    return arg_flags, kw_flags


def _to_cpu(obj: Any, torch: Any) -> Any:
    return _map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, obj)


def _seed(torch: Any, backend: Any, seed: int) -> None:
    """Seed the CPU generator (and CUDA's when that is the device); torch.manual_seed would also queue
    lazy seeding of every accelerator type, which costs milliseconds per call."""
    torch.default_generator.manual_seed(seed)
    if getattr(backend, "torch_device", "cpu") == "cuda":
        torch.cuda.manual_seed_all(seed)


def _call(func: Callable, args: list, kwargs: dict) -> Any:
    return func(*args, **kwargs)


# --- running ------------------------------------------------------------------------------------------
def run_case(case: Any, backend: Any, device_index: int, options: RunOptions) -> CaseResult:
    """Run one API call on the bench and on the device and judge it. Never raises for a bad case:
    anything that prevents the comparison becomes an API-level SKIP with the reason (spec 3.4)."""
    name = case_name(case)
    mode = data_mode(case, options)
    seed = options.seed
    if getattr(case, "problem", None):
        return skip_result(name, str(case.problem), data_mode=mode, seed=seed)
    if getattr(case, "framework", "pytorch") == "mindspore":
        try:        # imported before Hypothesis runs: importing MindSpore changes the recursion limit
            from .devices.mindspore_backends import mindspore
            mindspore()
        except ImportError:
            return skip_result(name, "MindSpore is not installed here; pip install 'pytest-msprobe[mindspore]' "
                                     "to check MindSpore dumps", data_mode=mode, seed=seed)
        except Exception as exc:  # noqa: BLE001 - spec 3.4: whatever stops the set-up is the SKIP reason
            return skip_result(name, f"MindSpore could not be set up: {_exc_text(exc)}", data_mode=mode, seed=seed)
    if options.examples > 1 and mode == RANDOM_DATA:
        return _run_examples(case, backend, device_index, options, seed)
    try:
        from generators.inputs import build_inputs
        inputs = build_inputs(case, random=(mode == RANDOM_DATA), seed=options.seed, max_bytes=options.max_bytes,
                              edge_values=options.edge_values)
    except Exception as exc:  # noqa: BLE001 - spec 3.4: any failure to build inputs is a SKIP
        return skip_result(name, _exc_text(exc), data_mode=mode, seed=seed)
    return run_with_inputs(case, inputs, backend, device_index, options, mode=mode, seed=seed)


def case_name(case: Any) -> str:
    return getattr(case, "name", None) or f"{case.prefix}.{case.api}.{case.index}"


def data_mode(case: Any, options: RunOptions) -> str:
    if options.random or not getattr(case, "has_tensor_files", True):
        return RANDOM_DATA
    return REAL_DATA


def _exc_text(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, KeyError) and text.startswith("'") and text.endswith("'"):
        text = text[1:-1]
    return text or type(exc).__name__


def run_with_inputs(case: Any, inputs: Any, backend: Any, device_index: int, options: RunOptions, *,
                    mode: str, seed: int) -> CaseResult:
    """Bench and device runs and the comparison, for inputs already built."""
    name = case_name(case)
    replay = _run
    if getattr(case, "framework", "pytorch") == "mindspore":
        from .ms_replay import run_ms as replay
    elif getattr(backend, "framework", "pytorch") == "mindspore":
        return skip_result(name, f"device type {backend.name!r} runs MindSpore calls; check a PyTorch dump "
                                 "with a PyTorch backend (cpu, cuda, npu)", data_mode=mode, seed=seed)
    try:
        result, saved = replay(case, inputs, backend, device_index, options, mode, seed)
    except Exception as exc:  # noqa: BLE001 - spec 3.4: the API becomes SKIP with the error text
        return skip_result(name, _exc_text(exc), data_mode=mode, seed=seed)
    result.summary = str(getattr(inputs, "summary", "") or "")
    if options.error_data_dir and result.failing(verdict.WARNING):
        try:
            save_error_data(options.error_data_dir, name, saved)
        except (OSError, RuntimeError) as exc:     # RuntimeError: torch.save's writer (disk full)
            result.note += f"\ncould not save error data to {options.error_data_dir}: {exc}"
    return result


def backward_messages(api: str, kwargs: dict) -> list:
    """Why backward is not run for this call (spec 1.4), before anything runs."""
    from pytest_msprobe.precision.standards import NO_BACKWARD_APIS
    messages = []
    if "out" in kwargs:
        messages.append(OUT_KWARG_MESSAGE)
    if api in NO_BACKWARD_APIS:
        messages.append(NO_BACKWARD_MESSAGE)
    return messages


def judge(name: str, api: str, std: Any, outputs: tuple, messages: list, mode: str, seed: int,
          note: str = "") -> CaseResult:
    """Detail rows and roll-up of one call from its CPU-side outputs (bench, device, bench grads, device grads).

    Shared by every framework's replay: dropout rule (spec 3.5), compare_outputs, roll-up (3.6), the backward
    SKIP row for ``messages`` (3.3) and the result row's message. ``note`` is appended to every row's message.
    """
    b_cmp, d_cmp, bg_cmp, dg_cmp = outputs
    compare_outputs = _precision("compare_outputs")
    rollup = _precision("rollup")
    details: list = []
    if "dropout" in name:
        dropout_status = _precision("dropout_status")
        forward = dropout_status(b_cmp, d_cmp)
        backward = dropout_status(bg_cmp[0], dg_cmp[0]) if bg_cmp and dg_cmp and bg_cmp[0] is not None else None
    else:
        fwd_rows = compare_outputs(api, name, "forward", b_cmp, d_cmp, version=std.name)
        bwd_rows = compare_outputs(api, name, "backward", bg_cmp, dg_cmp, version=std.name) if bg_cmp else []
        details = list(fwd_rows) + list(bwd_rows)
        forward = rollup([r.status for r in fwd_rows], version=std.name) or verdict.PASS
        backward = rollup([r.status for r in bwd_rows], version=std.name) if bwd_rows else None
    if note:
        for row in details:
            row.message = f"{row.message}\n{note}" if str(row.message or "").strip() else note
    message = None
    if messages:
        text = "".join(messages)
        details.append(_precision("skip_row")(f"{name}.backward.output.0", text))
        if backward is None and std.all_skip_is_skip:
            backward = verdict.SKIP
            message = text
    if forward == verdict.SKIP:
        first = next((r for r in details if ".forward." in r.name), None)
        message = first.message if first is not None else (message or "")
    result = CaseResult(name, forward, backward, message, details, mode, seed)
    if note:
        result.note += f"\n{note}"
    return result


def _run(case: Any, inputs: Any, backend: Any, device_index: int, options: RunOptions, mode: str,
         seed: int) -> tuple:
    torch = _torch()
    from pytest_msprobe.precision.standards import GRAD_INDEX, get_standard
    std = get_standard(options.standard)
    name = case_name(case)
    api = case.api
    from generators.apis import resolve_api
    func = resolve_api(case.prefix, api)

    args = list(inputs.args or ())
    kwargs = dict(inputs.kwargs or {})
    kwargs.pop("device", None)

    has_backward_entry = getattr(case, "backward", None) is not None
    messages = backward_messages(api, kwargs)
    want_backward = has_backward_entry and not messages and getattr(inputs, "grad_output", None) is not None
    arg_flags, kw_flags = _grad_flags(case, args, kwargs, torch) if want_backward else ([], {})

    # bench: CPU, raised precision, never through a backend
    target = raise_target(args, kwargs, api)
    # (an ``out=`` tensor is copied like the others, so the two sides never write into one tensor)
    bench_args = [_map(lambda x: _copy_tensor(x, target, api, torch), a) for a in args]
    bench_kwargs = {k: _map(lambda x: _copy_tensor(x, target, api, torch), v) for k, v in kwargs.items()}
    # device: same values, own dtype, moved by the backend
    dev_args = [_map(lambda x: _copy_tensor(x, None, api, torch), a) for a in args]
    dev_kwargs = {k: _map(lambda x: _copy_tensor(x, None, api, torch), v) for k, v in kwargs.items()}
    dev_args = list(backend.to_device(dev_args, device_index))
    dev_kwargs = dict(backend.to_device(dev_kwargs, device_index))
    if want_backward:
        for side_args, side_kwargs in ((bench_args, bench_kwargs), (dev_args, dev_kwargs)):
            for i, flag in enumerate(arg_flags):
                if flag:
                    side_args[i] = _with_grad(side_args[i], torch)
            for k, flag in kw_flags.items():
                if flag:
                    side_kwargs[k] = _with_grad(side_kwargs[k], torch)

    call_seed = item_seed(name, seed)       # random ops (dropout) draw alike on both sides
    _seed(torch, backend, call_seed)
    bench_out = _call(func, bench_args, bench_kwargs)
    _seed(torch, backend, call_seed)
    dev_out = backend.call(func, dev_args, dev_kwargs)
    backend.synchronize(device_index)

    bench_grads: list = []
    dev_grads: list = []
    bench_grad_in = None
    if want_backward and (any(arg_flags) or any(kw_flags.values())):
        grad_index = GRAD_INDEX.get(api)
        b_target, d_target = bench_out, dev_out
        if grad_index is not None and isinstance(bench_out, (list, tuple)):
            b_target, d_target = bench_out[grad_index], dev_out[grad_index]
        if not isinstance(b_target, torch.Tensor):
            messages.append(MULTI_BACKWARD_MESSAGE)
        elif b_target.requires_grad:
            grad = inputs.grad_output
            if isinstance(grad, (list, tuple)):
                grad = grad[0] if grad else None
            if isinstance(grad, torch.Tensor):
                g_target = raise_target([grad], {}, api)
                bench_grad_in = _copy_tensor(grad, g_target, api, torch)
                if bench_grad_in.is_floating_point() and bench_grad_in.dtype != b_target.dtype:
                    bench_grad_in = bench_grad_in.to(b_target.dtype)
                dev_grad_in = backend.to_device(grad.detach().clone(), device_index)
                if dev_grad_in.is_floating_point() and dev_grad_in.dtype != d_target.dtype:
                    dev_grad_in = dev_grad_in.to(d_target.dtype)
                b_target.backward(bench_grad_in)
                d_target.backward(dev_grad_in)
                backend.synchronize(device_index)
                bench_grads = [a.grad for a in bench_args if isinstance(a, torch.Tensor)]
                dev_grads = [a.grad for a in dev_args if isinstance(a, torch.Tensor)]

    b_cmp = _to_cpu(bench_out, torch)
    d_cmp = _to_cpu(dev_out, torch)
    bg_cmp = _to_cpu(bench_grads, torch)
    dg_cmp = _to_cpu(dev_grads, torch)

    result = judge(name, api, std, (b_cmp, d_cmp, bg_cmp, dg_cmp), messages, mode, seed)
    saved = {
        "forward.input": [*args, *kwargs.values()],
        "forward.output.bench": bench_out, "forward.output.device": dev_out,
        "backward.input": bench_grad_in,
        "backward.output.bench": bench_grads, "backward.output.device": dev_grads,
    }
    return result, saved


# --- random data with several examples --------------------------------------------------------------
class _ExampleFailed(AssertionError):
    pass


def _run_examples(case: Any, backend: Any, device_index: int, options: RunOptions, seed: int) -> CaseResult:
    """``--msprobe-examples N``: N generated inputs through Hypothesis; a failure is shrunk and reported."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    name = case_name(case)
    try:
        from generators.inputs import inputs_strategy
        strategy = inputs_strategy(case, edge_values=options.edge_values,
                                                      max_bytes=options.max_bytes)
    except Exception as exc:  # noqa: BLE001 - spec 3.4: the API becomes SKIP with the error text
        return skip_result(name, _exc_text(exc), data_mode=RANDOM_DATA, seed=seed)
    results: list = []

    @hseed(seed)
    @settings(max_examples=options.examples, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(strategy)
    def check(inputs: Any) -> None:
        r = run_with_inputs(case, inputs, backend, device_index, options, mode=RANDOM_DATA, seed=seed)
        results.append(r)
        if r.failing(options.fail_on):
            raise _ExampleFailed(r.name)

    try:
        check()
    except _ExampleFailed:
        final = results[-1]
        cmd = options.reproduce.format(name=name) if options.reproduce else ""
        final.note += (f"\nHypothesis found a failing input after {len(results)} runs; smallest failing "
                       f"example: {final.summary or '(no summary)'}" + (f"\nreproduce: {cmd}" if cmd else ""))
        return final
    except Exception as exc:  # noqa: BLE001 - spec 3.4: the API becomes SKIP with the error text
        return skip_result(name, _exc_text(exc), data_mode=RANDOM_DATA, seed=seed)
    if not results:
        return skip_result(name, "Hypothesis produced no example", data_mode=RANDOM_DATA, seed=seed)
    first = results[0]
    first.note += f"\n{len(results)} generated examples passed"
    return first


# --- error data ---------------------------------------------------------------------------------------
def save_error_data(directory: str, name: str, saved: dict) -> list:
    """``torch.save`` every tensor of a failing API as ``{name}.{role}.{k}.pt`` (spec 7.3), numbering
    args then kwargs without restarting, so nothing is overwritten. Returns the written paths."""
    from .report.acc_csv import make_dirs
    torch = _torch()
    make_dirs(directory)
    flat = name.replace("/", "_").replace("\\", "_")    # "step0/rank::Functional.gelu.0": one file, no subdirs
    written = []
    for role, value in saved.items():
        leaves: list = []
        _leaves(value, leaves, torch)
        for k, leaf in enumerate(leaves):
            if isinstance(leaf, torch.Tensor):
                path = os.path.join(directory, f"{flat}.{role}.{k}.pt")
                # created 0o640 through the umask (a chmod after the fact would widen a stricter umask)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
                with os.fdopen(fd, "wb") as fh:
                    torch.save(leaf.detach().cpu().contiguous(), fh)
                written.append(path)
    return written


def _leaves(obj: Any, out: list, torch: Any, depth: int = 0) -> None:
    if isinstance(obj, (list, tuple)) and depth < 16:
        for x in obj:
            _leaves(x, out, torch, depth + 1)
    elif isinstance(obj, dict) and depth < 16:
        for x in obj.values():
            _leaves(x, out, torch, depth + 1)
    else:
        out.append(obj)
