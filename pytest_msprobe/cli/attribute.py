"""``pytest-msprobe attribute train.py:step``: which API calls explain the drift of a training step.

The script is imported and run, as any training script is run (it is trusted code: it runs with your rights);
its function ``step`` must run one forward and backward pass and return the loss. A module-level ``model``
(a ``torch.nn.Module``) is used for the parameters and buffers when the script defines one.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import Any

DESCRIPTION = ("Attribute the drift of a training step to its API calls: runs the step repeatedly, each time with "
               "chosen calls given the bench's output (CPU, raised precision), and reports how much of the loss "
               "and gradient drift each call explains. IMPORTS AND RUNS THE SCRIPT, as training does.")
EPILOG = """examples:
  pytest-msprobe attribute train.py:step -o attr/
  pytest-msprobe attribute train.py:step --candidates out/ --fail-share 0.5
  pytest-msprobe attribute train.py:step --candidates 'Functional.silu.*' 'Torch.matmul.*' --device cuda

exit status: 0, or 1 when a dominant call (beyond the rounding of a correct kernel) explains more than
--fail-share of the drift; 2 for bad arguments or a step that cannot be attributed."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="SCRIPT.py:FUNCTION, the function that runs one forward and backward pass "
                                       "and returns the loss")
    parser.add_argument("--candidates", nargs="+", default=None, metavar="NAME_OR_CSV",
                        help="dump names (Functional.silu.0), glob patterns, or an accuracy_checking_result / "
                             "compare CSV (or an output folder: its newest) whose failing APIs are the candidates "
                             "(default: every call)")
    parser.add_argument("-o", "--out-dir", default=".", help="where the CSV and the HTML page go (default .)")
    parser.add_argument("--budget", type=int, default=None, help="the most runs of the step")
    parser.add_argument("--min-share", type=float, default=None,
                        help="search a set of calls further while it explains at least this share (default 0.1)")
    parser.add_argument("--fail-share", type=float, default=None,
                        help="exit 1 when a dominant call explains more than this share of the drift (0..1)")
    parser.add_argument("--check-result", default=None,
                        help="a checker result CSV: its flagged APIs are shown with their share in the HTML page")
    parser.add_argument("--device", default=None,
                        help="device backend of the step: cpu, cuda, npu, cuda:1, or one a --device-plugin "
                             "registers (default: the first available accelerator, else cpu)")
    parser.add_argument("--device-plugin", default=None, metavar="MODULE_OR_FILE",
                        help="a module or .py file defining pytest_msprobe_register_devices(registry), "
                             "e.g. your conftest.py")
    parser.add_argument("--model-name", default="model",
                        help="the script's global holding the model (default 'model'; absent: the loss's graph)")
    parser.add_argument("--forward-only", action="store_true",
                        help="correct the calls' forward outputs only; their backward runs as on the device")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def _load(path: str, name: str) -> Any:
    if not os.path.isfile(path):
        raise FileNotFoundError(2, "no such file", path)
    spec = importlib.util.spec_from_file_location(f"msprobe_attribute_{abs(hash(os.path.abspath(path)))}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path}: cannot be imported as a Python script")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec.loader.exec_module(module)
    return module


def _plugin_register(source: str | None) -> Any:
    if not source:
        return None
    module = _load(source, "plugin") if source.endswith(".py") else importlib.import_module(source)
    hook = getattr(module, "pytest_msprobe_register_devices", None)
    if hook is None:
        raise ValueError(f"{source}: defines no pytest_msprobe_register_devices(registry)")
    return lambda registry: hook(registry=registry)


def run(args: argparse.Namespace) -> int:
    script, sep, func = args.target.rpartition(":")
    if not sep or not script or not func:
        raise ValueError(f"{args.target!r}: write the target as SCRIPT.py:FUNCTION (train.py:step)")
    if args.fail_share is not None and not 0.0 <= args.fail_share <= 1.0:
        raise ValueError(f"--fail-share {args.fail_share}: give a share between 0 and 1 (0.5 = half the drift)")
    from ..attribution import StepError, attribute
    from ..attribution.api import DEFAULT_MIN_SHARE
    from ..attribution.devices import resolve_backend

    backend = resolve_backend(args.device, _plugin_register(args.device_plugin))
    module = _load(script, func)
    step = getattr(module, func, None)
    if not callable(step):
        raise ValueError(f"{script}: defines no function {func!r}")
    model = getattr(module, args.model_name, None)
    try:
        import torch
        if not isinstance(model, torch.nn.Module):
            model = None
        result = attribute(step, candidates=args.candidates, out_dir=args.out_dir, budget=args.budget,
                           device=backend, model=model,
                           min_share=args.min_share if args.min_share is not None else DEFAULT_MIN_SHARE,
                           check_result=args.check_result, progress=not args.quiet,
                           backward=not args.forward_only)
    except StepError as exc:
        print(f"pytest-msprobe attribute: error: {exc}", file=sys.stderr)
        return 2
    return result.exit_status(args.fail_share)
