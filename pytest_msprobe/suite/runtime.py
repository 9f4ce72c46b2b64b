"""The runtime of generated regression suites (``pytest-msprobe generate``) and of hand-written tests.

Generated files import it as :mod:`pytest_msprobe.testing`, its public face.

A generated test calls :func:`check_call` with pytest's ``pytestconfig``: the call's inputs come from the
suite's mini dump, the device backend from ``--msprobe-device-type`` (any backend a conftest registers
through ``pytest_msprobe_register_devices``), the standard and failure level from ``--msprobe-standard`` and
``--msprobe-fail-on``, exactly as in ``pytest --msprobe-api-info``. The reproduction scripts use the same
functions without pytest. Nothing here imports torch or pytest at module level.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import os
from typing import Any

from ..precision import verdict
from ..settings import DEFAULT_SEED, DEFAULT_STANDARD
_KEYS: list = []         # the config.stash key of a run's session (made on first use: pytest is lazy)


# --- cases ----------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=32)
def _cases(dump_json: str) -> dict:
    from generators.loader import load_dump
    return load_dump(dump_json).by_name()


def load_case(data_dir: str | os.PathLike, call: str) -> Any:
    """The :class:`generators.ApiCase` named ``call`` in ``data_dir/dump.json`` (loaded once per process).

    Raises:
        LookupError: the suite's dump has no such call (the module and its data directory disagree).
    """
    dump_json = os.path.realpath(os.path.join(os.fspath(data_dir), "dump.json"))
    if not os.path.isfile(dump_json):
        raise LookupError(f"{dump_json} is missing: the generated test module needs its data directory; "
                          "commit it with the module, or regenerate the suite (pytest-msprobe generate)")
    cases = _cases(dump_json)
    try:
        return cases[call]
    except KeyError:
        raise LookupError(f"{dump_json} has no call {call!r}; the test module and its data directory disagree: "
                          "regenerate the suite (pytest-msprobe generate)") from None


def describe_case(case: Any) -> str:
    """One line: name, API and the recorded shapes (as in the generated comments)."""
    from .code import signature
    return f"{case.call_name}: {signature(case)}"


# --- devices and options ------------------------------------------------------------------------------
def _session(config: Any) -> Any:
    """This process's session of generated cases (settings + backend registry), made on first use.

    It is the plugin's own :class:`~pytest_msprobe.session.CheckSession` (device choice, xdist device
    sharing, ``--msprobe-timeout``), with the run options of the case at hand swapped in.
    """
    if not _KEYS:
        import pytest
        _KEYS.append(pytest.StashKey["Any"]())
    sess = config.stash.get(_KEYS[0], None)
    if sess is None:
        from ..settings import Settings
        from ..session import CheckSession

        class SuiteSession(CheckSession):
            overrides: dict = {}

            def run_options(self, dump_path: str) -> Any:
                return dataclasses.replace(super().run_options(dump_path), **self.overrides)

        if not hasattr(config.option, "msprobe_device_type"):
            raise RuntimeError("the pytest-msprobe plugin is not active in this run (disabled with "
                               "-p no:msprobe?); generated suites need its options and device backends")
        sess = SuiteSession(config, Settings.from_config(config))
        config.stash[_KEYS[0]] = sess
    return sess


def backend_for(config: Any) -> tuple:
    """(backend, device index) that this process uses: ``--msprobe-device-type``/``--msprobe-devices``,
    the xdist worker's share of the devices, backends registered by conftests included.

    Raises:
        ValueError: unknown or unavailable device type, naming the registered ones.
    """
    return _session(config).backend()


def options_for(config: Any, *, random: bool = False, seed: int = DEFAULT_SEED, standard: str | None = None,
                dump_json: str = "") -> Any:
    """The :class:`~pytest_msprobe.replay.RunOptions` of one generated case: the module's data mode and seed,
    the run's --msprobe-standard (else the module's), --msprobe-fail-on, --msprobe-max-bytes, error data and,
    for random data, --msprobe-examples and --msprobe-edge-values."""
    sess = _session(config)
    sess.overrides = {}
    opts = sess.run_options(dump_json)
    explicit_standard = getattr(config.option, "msprobe_standard", None)
    explicit_seed = getattr(config.option, "msprobe_seed", None)
    rand = bool(random) or bool(sess.settings.random)
    return dataclasses.replace(opts, random=rand, seed=explicit_seed if explicit_seed is not None else int(seed),
                               standard=explicit_standard or standard or opts.standard,
                               examples=opts.examples if rand else 1, reproduce="")


def get_backend(name: str | None = None, spec: str | None = None) -> Any:
    """A device backend outside pytest: ``spec`` (``module:attribute``, an object or a class) or a built-in
    one by ``name`` (default: the first available accelerator, else cpu).

    Raises:
        ValueError: unknown/unavailable name or a spec that cannot be imported.
    """
    from ..devices import builtin_registry
    reg = builtin_registry()
    if spec:
        obj = _import_backend(spec)
        reg.register(obj)
        name = name or str(obj.name)
    return reg.usable(name or reg.default_name())


def _import_backend(spec: str) -> Any:
    """``module:attr`` or ``path/to/file.py:attr`` -> a backend object (a class is instantiated)."""
    import importlib
    import importlib.util
    module, _, attr = spec.rpartition(":") if ":" in spec else (spec, "", "")
    attr = attr or "backend"
    try:
        if module.endswith(".py"):
            mod_spec = importlib.util.spec_from_file_location(f"msprobe_backend_{abs(hash(module))}", module)
            if mod_spec is None or mod_spec.loader is None:
                raise ImportError(f"cannot load {module}")
            mod = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(mod)
        else:
            mod = importlib.import_module(module)
        obj = getattr(mod, attr)
    except (ImportError, AttributeError, OSError) as exc:
        raise ValueError(f"--backend {spec!r}: {exc}; pass module:attribute or file.py:attribute of a device "
                         "backend (an object or a class)") from None
    return obj() if isinstance(obj, type) else obj


# --- running --------------------------------------------------------------------------------------------
def run_call(case: Any, backend: Any, device_index: int = 0, *, random: bool = False, seed: int = DEFAULT_SEED,
             standard: str = DEFAULT_STANDARD, options: Any = None) -> Any:
    """Run one case on ``backend`` and the CPU bench and judge it: a :class:`~pytest_msprobe.replay.CaseResult`
    (never raises for a bad case: it becomes SKIP with the reason)."""
    from ..replay import RunOptions, run_case
    if options is None:
        options = RunOptions(standard=standard, random=random, seed=seed)
    return run_case(case, backend, device_index, options)


def check_call(config: Any, data_dir: str | os.PathLike, call: str, *, random: bool = False,
               seed: int = DEFAULT_SEED, standard: str | None = None) -> Any:
    """Replay ``call`` of the suite in ``data_dir`` and assert on its verdict (the body of a generated test).

    SKIP becomes ``pytest.skip`` with the reason; error (or warning with ``--msprobe-fail-on warning``)
    fails the test with every failing output, its metrics and the message. Returns the result otherwise.
    """
    import pytest

    from ..replay import describe
    case = load_case(data_dir, call)
    try:
        backend, _ = backend_for(config)
    except ValueError as exc:
        pytest.fail(f"--msprobe-device-type: {exc}", pytrace=False)
    options = options_for(config, random=random, seed=seed, standard=standard, dump_json=case.dump_json)
    sess = _session(config)
    sess.overrides = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    result = sess.run(case, case.dump_json)          # the checker's own path: timeout included
    seed_note = f" (random data, seed {result.seed})" if result.data_mode == "random_data" else ""
    if result.skipped:
        pytest.skip(f"{result.message}{seed_note}")
    if result.failing(options.fail_on):
        pytest.fail(f"{describe(result, seed_note)}\n(device {backend.name}, standard {options.standard})",
                    pytrace=False)
    if result.fidelity_failure(options.fidelity):
        pytest.fail(result.fidelity_failure(options.fidelity), pytrace=False)
    return result


# --- reproduction scripts -------------------------------------------------------------------------------
def reproduce_parser(call: str, *, default_standard: str = DEFAULT_STANDARD) -> argparse.ArgumentParser:
    """Options of a generated reproduction script."""
    p = argparse.ArgumentParser(description=f"Replay {call} on a device and the CPU bench; print the verdict.")
    p.add_argument("--device-type", default=None,
                   help="cpu, cuda, npu, or the name of --backend's backend (default: first accelerator, else cpu)")
    p.add_argument("--device-index", type=int, default=0, help="device index (default 0)")
    p.add_argument("--backend", default=None, metavar="MODULE:ATTR",
                   help="import a custom device backend (object or class), e.g. mybackends:Planted")
    p.add_argument("--standard", default=default_standard, help=f"precision standard (default {default_standard})")
    p.add_argument("--fail-on", choices=verdict.FAIL_ON_CHOICES, default=verdict.DEFAULT_FAIL_ON,
                   help="exit 1 on error (default) or also on warning")
    return p


def format_result(result: Any) -> str:
    """Every output row with its status, standard and non-blank metrics, then the API verdict."""
    lines = []
    for row in result.details:
        metrics = ", ".join(f"{k}={float(v):.6g}" for k, v in (row.metrics or {}).items()
                            if isinstance(v, (int, float)) and not isinstance(v, bool))
        std = f" ({row.standard})" if getattr(row, "standard", "") else ""
        lines.append(f"  {row.name}: {row.status}{std}" + (f"  {metrics}" if metrics else ""))
        message = " ".join(str(row.message or "").split())
        if message and verdict.norm(row.status) != verdict.PASS_KEY:
            lines.append(f"    {message}")
    lines.append(f"verdict: forward {result.forward}, backward {result.backward or '-'}"
                 + (f" ({result.data_mode}, seed {result.seed})" if result.data_mode == "random_data" else ""))
    if result.skipped and result.message:
        lines.append(f"skipped: {result.message}")
    return "\n".join(lines)


def exit_status(result: Any, fail_on: str = verdict.DEFAULT_FAIL_ON) -> int:
    """0 pass, 1 failing the standard, 2 skipped (could not run)."""
    if result.skipped:
        return 2
    return 1 if verdict.is_failing(result.forward, result.backward, fail_on=fail_on) else 0
