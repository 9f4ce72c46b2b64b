"""``PrecisionDebugger``: msprobe's PyTorch dump API (spec section 2) over the capture mechanisms."""
from __future__ import annotations

import atexit
import functools
import logging
import os
from typing import Any, Optional

import torch

from dumpers.config import ConfigError, DumpConfig, load_config
from dumpers.format import UNCAPTURED_COMPILED
from dumpers.torch_dump.capture import ApiCaptureMode, DistributedWrappers
from dumpers.torch_dump import stack as stacklib
from dumpers.torch_dump import stats
from dumpers.torch_dump.module_hooks import ModuleHooks, is_compiled_module
from dumpers.torch_dump.session import DumpPathError, DumpSession

log = logging.getLogger("pytest_msprobe.dump")

DUMP_TASKS = ("statistics", "tensor")


def check_writable(dump_path: str) -> None:
    """Fail early, before training runs, when ``dump_path`` cannot be created or written."""
    path = os.path.abspath(dump_path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise DumpPathError(f"dump_path {dump_path!r} exists and is not a directory; choose another dump_path")
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.access(probe, os.W_OK | os.X_OK):
        raise DumpPathError(f"dump_path {dump_path!r} is not writable ({probe!r} denies writing); choose a writable "
                            f"dump_path in config.json or PrecisionDebugger(dump_path=...)")


def current_rank() -> Optional[int]:
    """The global rank when torch.distributed is initialised, else None (the directory is then ``rank``)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return None


class _on_singleton:
    """A method callable on the instance or on the class (msprobe style: ``PrecisionDebugger.start()``)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __get__(self, obj: Any, cls: Any) -> Any:
        if obj is None:
            obj = cls._instance
            if obj is None or not getattr(obj, "_initialized", False):
                name = self.fn.__name__

                def not_built(*args: Any, **kwargs: Any) -> None:
                    raise RuntimeError(f"PrecisionDebugger.{name}() was called before PrecisionDebugger(...) was "
                                       f"constructed; build the debugger first")
                return not_built
        return self.fn.__get__(obj, cls)


class PrecisionDebugger:
    """Dumps the API calls (and, at L0/mix, module calls) of selected training steps.

    Typical loop: build once, then per iteration ``start()``, forward, backward, optimizer step,
    ``stop()``, ``step()``. ``with debugger:`` does ``start()`` on entry and ``stop()`` + ``step()``
    on exit. The first construction wins (msprobe's singleton); :meth:`reset` forgets it.
    """

    _instance: Optional["PrecisionDebugger"] = None

    def __new__(cls, *args: Any, **kwargs: Any) -> "PrecisionDebugger":
        if cls._instance is None:
            inst = super().__new__(cls)
            inst._initialized = False
            cls._instance = inst
        return cls._instance

    def __init__(self, config_path: Optional[str] = None, task: Optional[str] = None,
                 dump_path: Optional[str] = None, level: Optional[str] = None,
                 model: Optional[torch.nn.Module] = None, step: Optional[list] = None) -> None:
        if self._initialized:
            log.info("msprobe dump: PrecisionDebugger already exists; the new arguments are ignored.")
            return
        if model is not None and not isinstance(model, torch.nn.Module):
            raise ConfigError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        config = load_config(config_path, framework="pytorch", task=task, dump_path=dump_path, level=level,
                             step=step)
        self.config: DumpConfig = config
        self.task = config.task
        self.model = model
        self.gradient_monitor: Any = None
        self.session: Optional[DumpSession] = None
        if config.task == "grad_probe":
            self._build_gradient_monitor(config)
        elif config.task in DUMP_TASKS:
            check_writable(config.dump_path)
            if model is not None and config.level == "L1":
                log.warning("The current level is not L0 or mix level, so the model parameters will not be used.")
            self.session = DumpSession(config)
            stats.warm_up()
        self._mode: Optional[ApiCaptureMode] = None
        self._dist: Optional[DistributedWrappers] = None
        self._hooks: dict = {}
        self._finished = False
        self._compile_warned = False
        self._initialized = True
        atexit.register(self._at_exit)

    def _build_gradient_monitor(self, config: DumpConfig) -> None:
        from dumpers.grad_probe import GradientMonitor

        raw = dict(config.raw)
        raw.update(task="grad_probe", dump_path=config.dump_path, rank=list(config.rank), step=list(config.step))
        self.gradient_monitor = GradientMonitor(raw, framework="pytorch")

    # --- singleton -----------------------------------------------------------------------------
    @classmethod
    def reset(cls) -> None:
        """Stop and forget the current debugger, so a new one can be built (tests, notebooks)."""
        inst = cls._instance
        cls._instance = None
        if inst is not None and getattr(inst, "_initialized", False):
            inst.close()

    # --- lifecycle -----------------------------------------------------------------------------
    @_on_singleton
    def start(self, model: Optional[torch.nn.Module] = None) -> None:
        """Switch the dump on for the current step (no-op for unselected steps and ranks)."""
        s = self.session
        if s is None or self._finished or s.check_writer():
            return                          # an I/O error switched the dump off: training goes on without it
        steps = self.config.step
        if steps and s.step > max(steps):
            self._finish_all()
            return
        if steps and s.step not in steps:
            return
        rank = current_rank()
        if self.config.rank and (rank is None or rank not in self.config.rank):
            return
        model = model if model is not None else self.model
        level = self.config.level
        if level in ("L0", "mix"):
            if model is None:
                raise ConfigError(f"For level {level}, PrecisionDebugger is missing the parameter 'model': pass "
                                  f"PrecisionDebugger(..., model=model) or start(model)")
            if not isinstance(model, torch.nn.Module):
                raise ConfigError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        s.rank = rank
        s.pid = os.getpid()
        s.open_step()
        if s.failed is not None:
            return
        s.parents.clear()
        if level in ("L0", "mix") and id(model) not in self._hooks:
            hooks = ModuleHooks(s, model)
            hooks.install()
            self._hooks[id(model)] = hooks
        if any(hooks.compiled for hooks in self._hooks.values()):
            s.compiled = True               # modules inside a torch.compile wrapper are not hooked
        if is_compiled_module(model):
            s.saw_compiled = True           # its kernels write without a version bump: no reuse from the start
        if level in ("L1", "mix"):
            self._install_api_capture()
        s.on = True
        log.info("Dump switch is turned on at step %d.", s.step)

    def _install_api_capture(self) -> None:
        if self._mode is None:
            self._mode = ApiCaptureMode(self.session)
            self._mode.push()
        if self._dist is None:
            self._dist = DistributedWrappers(self.session)
            self._dist.install()

    def _remove_api_capture(self) -> None:
        if self._mode is not None:
            if self._mode.pop():
                self._mode = None
        if self._dist is not None:
            self._dist.remove()
            self._dist = None

    @_on_singleton
    def stop(self) -> None:
        """Switch the dump off and write dump.json, stack.json and construct.json of the step."""
        if self.gradient_monitor is not None:
            self.gradient_monitor.stop()
            return
        s = self.session
        if s is None:
            return
        was_on = s.on
        s.on = False
        s.forget_reuse()                    # what runs while the dump is off is not watched for writes
        self._remove_api_capture()          # also after an I/O error: the capture installed by start() goes
        stacklib.release()
        if s.compiled and not self._compile_warned:
            self._compile_warned = True
            log.warning("msprobe dump: step %d ran torch.compile'd code; %s.", s.step, UNCAPTURED_COMPILED)
        if (was_on or s.dir is not None) and s.failed is None:
            s.write_files()

    @_on_singleton
    def step(self) -> None:
        """Advance the step counter; call counters restart. A step still on is written first."""
        s = self.session
        if s is None or s.failed is not None:
            return
        if s.on:
            self.stop()
        s.next_step()

    @_on_singleton
    def forward_backward_dump_end(self) -> None:
        """API calls after this point are neither dumped nor counted; backward and module hooks still record."""
        if self.session is not None:
            self._remove_api_capture()

    @_on_singleton
    def monitor(self, model: Any) -> None:
        """grad_probe: start monitoring ``model``'s gradients (a no-op for other tasks)."""
        if self.gradient_monitor is not None:
            self.gradient_monitor.monitor(model)

    def flush(self) -> None:
        """Wait until the files of every stopped step are on disk (its tensor files, then its dump.json)."""
        if self.session is not None and self.session.writer is not None:
            self.session.writer.flush()

    def _finish_all(self) -> None:
        self.stop()
        self._finished = True
        for hooks in self._hooks.values():
            hooks.remove()
        self._hooks.clear()
        log.info("msprobe dump: the last selected step is done; the dump is switched off.")

    def close(self) -> None:
        """Stop, remove every hook and wait for the tensor writer (the debugger is unusable afterwards)."""
        if self.session is not None:
            if self.session.on:
                self.stop()
            self._remove_api_capture()
            for hooks in self._hooks.values():
                hooks.remove()
            self._hooks.clear()
            self.session.close()
        self._finished = True

    def _at_exit(self) -> None:
        try:
            if self.session is not None and not self._finished:
                if self.session.on:
                    self.stop()
                self.session.close()
        except Exception as exc:  # noqa: BLE001 - interpreter shutdown
            log.warning("msprobe dump: final write at exit failed: %s", exc)

    # --- context manager -----------------------------------------------------------------------
    def __enter__(self) -> "PrecisionDebugger":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        self.step()
