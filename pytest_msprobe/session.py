"""Per-process state of an accuracy-check run: settings, the device backend, the cases, running one case.

One :class:`CheckSession` lives in ``config.stash`` of every process (controller and xdist workers).
The backend and torch are set up on the first item, not at start-up. A worker runs on the device of its
slot on its host, which the controller gives it in its brief (:mod:`.brief`; else the number of its worker id).
"""
from __future__ import annotations

import os
from typing import Any

from .api_items import freeze_long_lived
from .devices.base import device_for_slot, worker_index
from .replay import CaseResult, RunOptions, prepare_compare, run_case
from .settings import DEFAULT_STANDARD, Settings


class CheckSession:
    """Settings plus what is needed to run cases in this process."""

    def __init__(self, config: Any, settings: Settings, dump_paths: list | None = None, *,
                 timestamp: str = "", node_ids: dict | None = None, brief: Any = None) -> None:
        self.config = config
        self.settings = settings
        self.worker_id = (getattr(config, "workerinput", None) or {}).get("workerid")
        self.host = getattr(brief, "host", None)            # a worker's host, as the controller names it
        slot = getattr(brief, "slot", None)                 # its device slot there (else its worker number)
        self.slot = int(slot) if slot is not None else worker_index(self.worker_id)
        self.host_workers = int(getattr(brief, "host_workers", 0) or 0)    # the workers of that host
        self.dump_paths = list(dump_paths or [])            # the dump.json files being checked, in order
        self.dump_files = {os.path.realpath(f) for f in self.dump_paths}     # the same, as real paths
        # real path -> node id the controller gave it (workers on other hosts); else pytest's own
        self.node_ids = {os.path.realpath(p): n for p, n in (node_ids or {}).items()}
        self.timestamp = timestamp          # of the CSV pair (error-data directory name)
        self._backend: Any = None
        self._device_index = 0
        self._registry: Any = None
        self._cases: dict | None = None
        self._gpu: Any = None

    def gpu_reference(self) -> Any:
        """The ``--msprobe-gpu-csv`` rows, read once per process (None without the option)."""
        if self._gpu is None and self.settings.gpu_csv:
            from .gpu_reference import GpuReference
            self._gpu = GpuReference(self.settings.gpu_csv, self.settings.standard)
        return self._gpu

    # --- devices ----------------------------------------------------------------------------------------
    def registry(self) -> Any:
        if self._registry is None:
            from .devices import builtin_registry
            reg = builtin_registry()
            self.config.hook.pytest_msprobe_register_devices(registry=reg)
            self._registry = reg
        return self._registry

    def backend_name(self) -> str:
        return self.settings.device_type or self.registry().default_name()

    def check_backend(self, runs_calls: bool = True, in_process: bool = True) -> None:
        """The backend is registered and, where calls run on this host, usable, and it can judge these dumps
        (``recorded`` needs recorded outputs); ValueError naming what to change. A controller whose workers
        are all on other hosts needs no device of its own; one whose workers run here (``in_process`` False)
        checks the device without taking it (nor importing torch for a backend that does not need it)."""
        if self.settings.reference and runs_calls:
            try:
                self.registry().usable(self.settings.reference)
            except (KeyError, ValueError) as exc:
                raise ValueError(f"--msprobe-reference: {exc.args[0] if exc.args else exc}") from None
        if runs_calls and in_process:
            backend, _ = self.backend()
        elif runs_calls:
            backend = self.registry().usable(self.backend_name())
        else:
            try:
                backend = self.registry().get(self.backend_name())
            except KeyError as exc:
                raise ValueError(str(exc.args[0])) from None
        from .devices.base import is_recorded
        if not is_recorded(backend):
            return                  # nothing more to check (nor numpy to import, for --collect-only)
        from .replay.expected import usage_problem
        problem = usage_problem(backend, (c for f in self.dump_paths for c in self.cases_of(f)))
        if problem:
            raise ValueError(f"{self.backend_name()}: {problem}")

    def backend(self) -> tuple:
        """(backend, device index) of this process; raises ValueError naming what to change."""
        if self._backend is None:
            reg = self.registry()
            backend = reg.usable(self.backend_name())
            ids = self.settings.devices or list(range(max(1, backend.device_count())))
            self._device_index = device_for_slot(self.slot, ids)
            self._backend = backend
            self._share_cpu_threads()
            prepare_compare()                  # the compare layer imported before the first call
            freeze_long_lived(self.config)     # torch's objects and the run's live to its end
        return self._backend, self._device_index

    def _share_cpu_threads(self) -> None:
        """Fix the CPU thread count of this process (``--msprobe-threads``, default 1).

        The same count in every process makes results identical with and without xdist (CPU kernels reduce in
        an order that depends on the thread count), and N workers do not fight over the cores."""
        import torch
        self._threads_before = torch.get_num_threads()
        torch.set_num_threads(self.settings.threads)

    def close(self) -> None:
        """Give the process back its CPU thread count (the plugin may run inside a longer-lived process)."""
        before = getattr(self, "_threads_before", None)
        if before is not None:
            import torch
            torch.set_num_threads(before)
            self._threads_before = None

    def call_modules(self) -> list:
        """What this process imports before its first call: numpy and, for PyTorch dumps, torch (MindSpore is
        left to its adapter)."""
        frameworks = {cases[0].framework for cases in (self._cases or {}).values() if cases}
        return ["numpy"] + (["torch"] if "pytorch" in frameworks else [])

    def call_costs(self, node_id: Any) -> dict:
        """File node id (``node_id(path)``) -> the cost of each of its calls in dump order
        (:func:`.api_items.call_cost`): worked out once on the controller of a run with xdist workers, which
        then order their calls by it without parsing the entries of calls they do not run. The entries parsed
        here are not kept: this process runs none of the calls."""
        from generators.dumpjson import paused_gc

        from .api_items import call_cost
        with paused_gc():
            return {node_id(path): [call_cost(case.peek()) for case in self.cases_of(path)]    # nothing kept
                    for path in self.dump_paths}

    def import_call_modules(self) -> None:
        """Import what this process's calls need (:meth:`call_modules`) with automatic garbage collection paused:
        torch's objects live to the end and hold no garbage, and the full passes their number triggers would
        walk them all, about 150 ms before the first call."""
        import importlib
        import sys

        from generators.dumpjson import paused_gc
        with paused_gc():
            for name in self.call_modules():
                if name not in sys.modules:
                    try:
                        importlib.import_module(name)
                    except ImportError:
                        pass            # the backend reports what is missing, as without this

    # --- running ----------------------------------------------------------------------------------------
    def _plugin_args(self) -> list:
        """The ``-p NAME`` plugins of this run (a reproduce command needs the same backend plugins)."""
        args = [str(a) for a in getattr(self.config.invocation_params, "args", ())]
        names = []
        for i, arg in enumerate(args):
            if arg == "-p" and i + 1 < len(args):
                names.append(args[i + 1])
            elif arg.startswith("-p") and len(arg) > 2 and not arg.startswith("--"):
                names.append(arg[2:])
        return [n for n in names if not n.startswith("no:")]

    def run_options(self, dump_path: str) -> RunOptions:
        s = self.settings
        error_dir = None
        if s.save_error_data:
            base = s.error_data_path or s.out_dir
            error_dir = os.path.join(base, f"ut_error_data{self.timestamp}")
        cmd = (f"pytest --msprobe-api-info {dump_path} --msprobe-seed {s.seed} -k '{{name}}'"
               + "".join(f" -p {name}" for name in self._plugin_args())
               + (f" --msprobe-device-type {s.device_type}" if s.device_type else "")
               + (f" --msprobe-standard {s.standard}" if s.standard != DEFAULT_STANDARD else "")
               + (" --msprobe-random" if s.random else "")
               + (f" --msprobe-examples {s.examples}" if s.examples > 1 else ""))
        return RunOptions(standard=s.standard, random=s.random, seed=s.seed, max_bytes=s.max_bytes,
                          edge_values=s.edge_values, examples=s.examples, fail_on=s.fail_on,
                          error_data_dir=error_dir, reproduce=cmd, device_type=s.device_type, timeout=s.timeout,
                          fidelity=s.fidelity)

    def run(self, case: Any, dump_path: str) -> CaseResult:
        """Run one case on this process's backend, under ``--msprobe-timeout`` when set."""
        backend, index = self.backend()
        options = self.run_options(dump_path)
        return run_case(case, backend, index, options)

    # --- cases -------------------------------------------------------------------------------------------
    def load(self) -> None:
        """Load every dump now. Raises ValueError saying which file could not be read (as a whole)."""
        from generators.loader import DumpError
        try:
            if self.dump_paths:
                self.cases_of(self.dump_paths[0])
        except DumpError as exc:
            raise ValueError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - anything else a damaged file raises
            raise ValueError(f"cannot load {', '.join(self.dump_paths)}: {type(exc).__name__} {exc}".rstrip()) from None

    def check_workers(self, workers: Any, host: str | None = None) -> None:
        """Refuse more xdist workers (on ``host``) than ``--msprobe-max-workers-per-device`` allows: ValueError,
        naming the host when given. The device count is this process's (with no ``--msprobe-devices``)."""
        from .devices import check_worker_limit
        if not isinstance(workers, int) or workers <= 0:
            return
        backend = self._backend or self.registry().get(self.backend_name())
        ids = self.settings.devices or list(range(max(1, backend.device_count())))
        try:
            check_worker_limit(backend, workers, ids, self.settings.max_workers_per_device)
        except ValueError as exc:
            raise ValueError(f"on host {host}: {exc}" if host else str(exc)) from None

    def check_host_workers(self) -> None:
        """On a worker: the limit for the workers of its host, against this host's devices (ValueError)."""
        if self.host is not None:
            self.check_workers(self.host_workers, self.host)

    def cases_of(self, path: str) -> list:
        """The cases of one dump file. All dumps are loaded together (once), so that call names shared by
        several dumps (step0 and step1 both have ``Functional.linear.0``) become ``{label}::{name}``."""
        if self._cases is None:
            from generators.loader import load_dump
            grouped: dict = {}
            real: dict = {}              # dump_json as the cases spell it -> its real path (one look-up per file)
            for case in load_dump(self.dump_paths or sorted(self.dump_files)).cases:
                key = real.get(case.dump_json)
                if key is None:
                    key = real[case.dump_json] = os.path.realpath(case.dump_json)
                grouped.setdefault(key, []).append(case)
            self._cases = grouped
        return self._cases.get(os.path.realpath(path), [])
