"""``PtdbgDispatch``: compare every aten op run on the device with a CPU re-run (spec online-dispatch.md).

Usage::

    with PtdbgDispatch(dump_mode="auto", dump_path="/home/dump"):
        out = model(x)                      # forward ops
    with PtdbgDispatch(dump_mode="auto", dump_path="/home/dump"):
        loss.backward()                     # backward ops, in their own block

The device op always runs on the caller's own arguments and its result is returned unchanged; the bench
works on CPU copies, and random ops never touch the training generator, so training is bit-identical with
the mode on and off.
"""
from __future__ import annotations

import logging
import os
import time
import traceback
from collections import deque
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from . import config, ops, tensors
from .job import DUMP_ALWAYS, DUMP_IF_FAILED, DUMP_NEVER, Job, OpResult, evaluate, run_bench, skip_rows
from .output import CompareCsv, console, csv_name, make_run_dir

LOG = logging.getLogger("pytest_msprobe.online_dispatch")

BANNER = r"""
  ___  _ __ | (_)_ __   ___    ___ ___  _ __ ___  _ __   __ _ _ __ ___
 / _ \| '_ \| | | '_ \ / _ \  / __/ _ \| '_ ` _ \| '_ \ / _` | '__/ _ \
| (_) | | | | | | | | |  __/ | (_| (_) | | | | | | |_) | (_| | | |  __/
 \___/|_| |_|_|_|_| |_|\___|  \___\___/|_| |_| |_| .__/ \__,_|_|  \___|
                                                 |_|"""

HOTSPOT_SECONDS = 5.0
_OWN_FILES = (os.path.dirname(os.path.abspath(__file__)),)


def device_index() -> int:
    """Index of the accelerator in use (CUDA, NPU, ...); 0 on a CPU-only machine."""
    acc = getattr(torch, "accelerator", None)
    try:
        if acc is not None and acc.is_available():
            return int(acc.current_device_index())
    except RuntimeError as err:  # a broken accelerator runtime must not stop the tool
        LOG.warning("cannot read the current device index (%s); using 0", err)
    return 0


def _override_key(key: Any) -> str:
    """Normalise a bench-override key (OpOverload, OpOverloadPacket or "ns::op[.overload]" / "op")."""
    if isinstance(key, str):
        return key if "::" in key else f"aten::{key}"
    if isinstance(key, torch._ops.OpOverload):
        return ops.qualified_name(*ops.split_name(key))
    qual = getattr(key, "_qualified_op_name", None)
    if isinstance(qual, str):
        return qual
    raise TypeError(f"bench_overrides key {key!r}: pass an op such as torch.ops.aten.add.Tensor or a "
                    "string 'ns::op' / 'ns::op.overload'.")


class PtdbgDispatch(TorchDispatchMode):
    """Compare each aten op of a code block with a CPU re-run and report the ops that miss accuracy.

    Args:
        dump_mode: "OFF" (CSV only), "all" (dump every compared op), "list" (ops named in api_list),
            "auto" (ops that did not reach accuracy).
        api_list: aten packet names to dump in "list" mode.
        debug: verbose tracing on stdout.
        dump_path: an existing directory; results go to ``{dump_path}/msprobe_{tag}_rank{R}_{ts}/``.
        tag: optional text in the directory name.
        process_num: worker processes that judge (and, for aten ops, re-run) ops off the training thread.
        skip_ops: extra aten packet names to skip, on top of msprobe's list.
        bench_overrides: ``{op: callable}`` CPU reference implementations used instead of the op itself
            for the bench (for ops without a CPU kernel, e.g. custom device ops).
    """

    def __init__(self, dump_mode: str = "OFF", api_list: Iterable[str] | None = None, debug: bool = False,
                 dump_path: str | None = None, tag: str | None = None, process_num: int = 0, *,
                 skip_ops: Iterable[str] = (), bench_overrides: Mapping[Any, Callable] | None = None) -> None:
        super().__init__()
        LOG.info(BANNER)
        self.dump_mode = config.check_dump_mode(dump_mode)
        self.api_list = config.check_api_list(api_list, self.dump_mode)
        self.debug = config.check_debug(debug)
        self.dump_path = config.check_dump_path(dump_path)
        self.tag = config.check_tag(tag)
        self.process_num = config.check_process_num(process_num)
        self.skip_ops = ops.ATEN_OPS_BLACKLIST | frozenset(skip_ops)
        self.bench_overrides = {_override_key(k): v for k, v in (bench_overrides or {}).items()}
        self.rank = device_index()
        self.run_dir, self.timestamp = make_run_dir(self.dump_path, self.rank, self.tag)
        self.csv_path = os.path.join(self.run_dir, csv_name(self.rank, self.timestamp))
        self.api_index = 0
        self.single_api_index: dict[str, int] = {}
        self.failed: list[str] = []          # names of the items reported Failed
        self.rows_written = 0
        self.input_rows = self.output_rows = 0
        self._pending: deque = deque()
        self._csv: CompareCsv | None = None
        self._state = "new"
        self._pool = None
        if self.process_num > 0:
            from .workers import WorkerPool

            self._pool = WorkerPool.shared(self.process_num)
        if self.debug:
            console(f"Main pid:{os.getpid()} device:{self.rank} dump_list:{self.api_list} "
                    f"dump_mode:{self.dump_mode} cpu_path[{os.path.join(self.run_dir, 'cpu')}], "
                    f"npu_path[{os.path.join(self.run_dir, 'npu')}], process[{self.process_num}]")

    # --- context -------------------------------------------------------------------------------------
    def __enter__(self) -> PtdbgDispatch:  # noqa: PYI034 - a final class in practice
        if self._state != "new":
            raise RuntimeError("This PtdbgDispatch was already used: create a new PtdbgDispatch(...) for each "
                               "block (one for the forward code, another for loss.backward()).")
        if any(isinstance(mode, PtdbgDispatch) for mode in _get_current_dispatch_mode_stack()):
            raise RuntimeError("PtdbgDispatch blocks cannot be nested: close the forward block before opening "
                               "the one around loss.backward().")
        self._csv = CompareCsv(self.csv_path)
        self._state = "active"
        return super().__enter__()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        super().__exit__(exc_type, exc, tb)
        self._state = "closed"
        try:
            self._finish(interrupted=exc_type is not None and not issubclass(exc_type, Exception))
        except Exception as err:
            if exc_type is None:
                raise
            LOG.error("online dispatch could not finish %s: %s", self.csv_path, err)

    def _finish(self, *, interrupted: bool) -> None:
        if self._pool is not None and interrupted:
            self._pool.terminate()
            self._pending.clear()
        self._drain(until=0)
        if self._csv is not None:
            self._csv.close()
        LOG.info("start write compare csv: Rank[%s], Pid[%s", self.rank, os.getpid())
        if self.debug:
            console(f"Dispatch exit: Device[{self.rank}], Pid[{os.getpid()} Input[{self.input_rows}] "
                    f"Output[{self.output_rows}] Total[{self.rows_written}] API_Total[{self.api_index}]]")

    # --- interception --------------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        try:
            namespace, packet, overload = ops.split_name(func)
        except ValueError as err:
            LOG.warning("%s", err)
            return func(*args, **kwargs)
        self.api_index += 1
        n = self.single_api_index[packet] = self.single_api_index.get(packet, 0) + 1
        cpu = rng_state = None
        stack = "[]"
        try:
            stack = self._stack()
            reason = ops.skip_reason(func, packet, tensors.leaves(args, kwargs), self.skip_ops)
            if reason is None:
                cpu = tensors.copy_tree((args, kwargs))
                if ops.is_dropout(packet) and ops.is_random(func, packet):
                    rng_state = torch.get_rng_state()
        except Exception as err:  # noqa: BLE001 - an input we cannot copy makes the op a SKIP
            reason = f"cannot copy the inputs to the CPU: {type(err).__name__}: {err}"
        start = time.perf_counter()
        try:
            out = func(*args, **kwargs)        # the device run: the caller's own arguments, result untouched
        except BaseException as err:
            self._emit(OpResult(self.api_index, rows=skip_rows(
                f"{packet}_{n}", None, f"the device run raised {type(err).__name__}: {err}", stack)))
            raise
        if self.debug:
            self._timed("NPU RUN", f"{packet}.{overload}", n, time.perf_counter() - start)
        if reason is not None:
            self._emit(OpResult(self.api_index, rows=skip_rows(f"{packet}_{n}", out, reason, stack)))
            return out
        try:
            job = Job(index=self.api_index, packet=packet, overload=overload,
                      qualname=ops.qualified_name(namespace, packet, overload), n=n, rank=self.rank,
                      stack=stack, args=cpu[0], kwargs=cpu[1], device_out=tensors.copy_tree(out),
                      dump=self._dump_policy(packet), run_dir=self.run_dir, mutable=ops.is_mutable(func),
                      dropout=ops.is_dropout(packet), rng_state=rng_state)
            if self.debug:
                console(f"Dispatch Info: Rank[{self.rank}], Pid[{os.getpid()}], Func[{packet}.{overload}], "
                        f"Name[{job.base}], Count[{self.api_index}]")
            start = time.perf_counter()
            self._judge(job, func, namespace, packet)
            if self.debug:
                self._timed("COMPARE OUTPUT", f"{packet}.{overload}", n, time.perf_counter() - start)
        except Exception as err:  # noqa: BLE001 - judging must never break training
            LOG.error("online dispatch could not compare %s.%s: %s", packet, overload, err)
            self._emit(OpResult(self.api_index, rows=skip_rows(
                f"{packet}_{n}", out, f"comparison failed: {type(err).__name__}: {err}", stack)))
        return out

    def _timed(self, tag: str, func: str, n: int, seconds: float) -> None:
        prefix = "Hotspot " if seconds > HOTSPOT_SECONDS else ""
        console(f"{prefix}Time[{tag}]-EXIT: Dev[{self.rank}], Pid[{os.getpid()}], Fun[{func}], Id[{n}], "
                f"time[{seconds:.6f}]")

    def _dump_policy(self, packet: str) -> str:
        if self.dump_mode == "all" or (self.dump_mode == "list" and packet in self.api_list):
            return DUMP_ALWAYS
        return DUMP_IF_FAILED if self.dump_mode == "auto" else DUMP_NEVER

    def _bench_fn(self, func: Any, namespace: str, packet: str, overload: str) -> tuple[Callable, bool]:
        """The bench callable and whether a worker process can run it by name."""
        override = (self.bench_overrides.get(ops.qualified_name(namespace, packet, overload))
                    or self.bench_overrides.get(f"{namespace}::{packet}"))
        if override is not None:
            return override, False
        if namespace not in ("aten", "prims"):
            return func, False       # custom ops may be unknown in a freshly spawned worker
        try:
            return func, ops.resolve(ops.qualified_name(namespace, packet, overload)) is func
        except AttributeError:
            LOG.warning("can not get correct function please set process_num=0 (%s.%s)", packet, overload)
            return func, False

    def _judge(self, job: Job, func: Any, namespace: str, packet: str) -> None:
        fn, by_name = self._bench_fn(func, namespace, packet, job.overload)
        if self._pool is None:
            self._emit(evaluate(job, fn))
            return
        if not by_name:
            run_bench(fn, job)
        fallback = skip_rows(job.base, job.device_out, "worker failed", job.stack)
        self._pending.append((self._pool.submit(job), fallback))
        self._drain(until=self._pool.max_in_flight)

    # --- results -------------------------------------------------------------------------------------
    def _emit(self, result: OpResult) -> None:
        self._pending.append(result)
        self._drain(until=self._pool.max_in_flight if self._pool is not None else 0)

    def _drain(self, *, until: int) -> None:
        """Write finished results in order; wait for the oldest while more than ``until`` are pending."""
        while self._pending:
            head = self._pending[0]
            if not isinstance(head, OpResult):
                pending, fallback = head
                if len(self._pending) <= until and not pending.ready():
                    return
                try:
                    head = pending.get()
                except Exception as err:  # noqa: BLE001 - a worker error becomes a SKIP row
                    LOG.error("multiprocess %s", err)
                    for row in fallback:
                        row[-1] = f"skipped: worker failed: {type(err).__name__}: {err}"
                    head = OpResult(0, rows=fallback)
            self._pending.popleft()
            self._write(head)

    def _write(self, result: OpResult) -> None:
        if self._csv is not None:
            try:
                self._csv.write(result.rows)
            except OSError as err:     # a full disk stops the report, never the training
                LOG.error("cannot write %s (%s); the rest of this block is not recorded", self.csv_path, err)
                self._csv.close()
                self._csv = None
        self.rows_written += len(result.rows)
        for row in result.rows:
            name = row[0]
            if self.debug:
                console(f"summary: Device[{self.rank}], Pid[{os.getpid()}], Data[{row[:16]}]")
            self.input_rows += "_input" in name
            self.output_rows += "_output" in name
        for failed, text in result.lines:
            if failed:
                self.failed.append(text.split(" ", 2)[1])
                console(text, failed=True)
            elif self.debug:
                console(text, failed=False)

    def _stack(self) -> str:
        frames = [f for f in traceback.extract_stack() if not f.filename.startswith(_OWN_FILES)]
        return str([[f.filename, f.lineno, f.name, f.line] for f in reversed(frames)])
