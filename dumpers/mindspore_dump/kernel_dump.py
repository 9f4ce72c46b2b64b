"""L2 and static-graph dumps: write MindSpore's own dump configuration and point MindSpore at it.

MindSpore then writes its native kernel dump under ``dump_path`` (``rank_{id}/{net}/{graph}/{iteration}/...npy``
plus ``execution_order/``). No dump.json is written for these levels, as in msprobe. The CPU backend can only
save tensors (``saved_data: "tensor"``): a statistics L2 dump on the CPU is refused with an error that says so
(use task "tensor" and :func:`kernel_statistics` to compute the statistics from the tensor files).
"""
from __future__ import annotations

import csv
import os
import re

import numpy as np

from dumpers import format as fmt
from dumpers.mindspore_dump.config import MsDumpConfig

GRAPH_GE = "graph_ge"
GRAPH_KBYK = "graph_kbyk"
PYNATIVE = "pynative"

KBYK_FILE = "kernel_kbyk_dump.json"
GE_FILE = "kernel_graph_dump.json"
ENV_CONFIG = "MINDSPORE_DUMP_CONFIG"
ENV_ACL = "MS_ACL_DUMP_CFG_PATH"

# input_output field of MindSpore's dump config, by data_mode
INPUT_OUTPUT = {"all": 0, "input": 1, "output": 2}
CPU_STATISTICS_ERROR = (
    "MindSpore's CPU backend cannot write a statistics kernel dump (it accepts only saved_data 'tensor'). "
    "Set \"task\": \"tensor\" in {source} for the L2/graph-mode dump on the CPU, then compute the statistics "
    "from the tensor files with dumpers.mindspore_dump.kernel_statistics(dump_path).")


def execution_mode() -> str:
    """pynative, graph_kbyk (GRAPH_MODE, jit_level O0/O1) or graph_ge (GRAPH_MODE, jit_level O2)."""
    import mindspore as ms
    if ms.get_context("mode") != ms.GRAPH_MODE:
        return PYNATIVE
    level = (ms.get_context("jit_config") or {}).get("jit_level") or ""
    if not level:
        level = "O2" if (ms.get_context("ascend_config") or {}).get("soc_version") == "Ascend910" else "O0"
    return GRAPH_GE if level == "O2" else GRAPH_KBYK


def native_config(config: MsDumpConfig, mode: str) -> dict:
    """MindSpore's dump configuration for this debugger config (dump-format spec section 12)."""
    common = {
        "dump_mode": 1 if config.api_list else 0,
        "path": config.dump_path,
        "net_name": "Net",
        "iteration": "|".join(str(s) for s in config.step) if config.step else "all",
        "saved_data": "tensor" if config.task == "tensor" else "statistic",
        "input_output": INPUT_OUTPUT[config.data_mode[0]],
        "kernels": list(config.api_list),
        "support_device": list(config.rank) if config.rank else list(range(8)),
    }
    if mode == GRAPH_GE:
        common["op_debug_mode"] = 0
        common["file_format"] = config.file_format if config.task == "tensor" else "npy"
        return {"common_dump_settings": common}
    return {"common_dump_settings": common, "e2e_dump_settings": {"enable": True, "trans_flag": True}}


def configure(config: MsDumpConfig, mode: str, device_target: str) -> str:
    """Write the native dump config into dump_path and export the environment MindSpore reads.

    Returns:
        The path of the written config file.

    Raises:
        ValueError: the dump cannot be made here (statistics on the CPU, ge mode in kbk run); says what to do.
    """
    if config.task != "tensor" and device_target == "CPU":
        raise ValueError(CPU_STATISTICS_ERROR.format(source=config.source))
    if mode == GRAPH_GE and os.environ.get("GRAPH_OP_RUN") == "1":
        raise ValueError("Must run in graph mode, not kbk mode: unset GRAPH_OP_RUN for a jit_level O2 dump")
    os.makedirs(config.dump_path, mode=fmt.DIR_MODE, exist_ok=True)
    path = os.path.join(config.dump_path, GE_FILE if mode == GRAPH_GE else KBYK_FILE)
    body = native_config(config, mode)
    fmt.write_json_atomic(path, body)
    os.environ[ENV_CONFIG] = path
    if mode == GRAPH_GE and body["common_dump_settings"]["dump_mode"] == 0:
        os.environ[ENV_ACL] = path
    else:
        os.environ.pop(ENV_ACL, None)
    return path


# {OpType}.{OpName}.{task}.{stream}.{timestamp}.{input|output}.{slot}.{format}.{dtype}.npy
_NATIVE_FILE = re.compile(r"^(?P<op_type>[^.]+)\.(?P<op_name>.+)\.(?P<task>\d+)\.(?P<stream>\d+)\."
                          r"(?P<timestamp>\d+)\.(?P<io>input|output)\.(?P<slot>\d+)\.(?P<format>[^.]+)\."
                          r"(?P<dtype>[^.]+)\.npy$")
STAT_HEADER = ("Op Type", "Op Name", "Task ID", "Stream ID", "Timestamp", "IO", "Slot", "Data Size",
               "Data Type", "Shape", "Max Value", "Min Value", "Avg Value", "L2Norm Value", "Count",
               "NaN Count", "Negative Inf Count", "Positive Inf Count", "Zero Count")


def kernel_statistics(dump_path: str, out_name: str = "statistic.csv") -> list:
    """Compute per-kernel statistics from a native tensor dump, one ``statistic.csv`` per iteration dir.

    Returns:
        The paths of the CSV files written (empty when dump_path holds no native dump files).
    """
    written = []
    for root, _dirs, files in os.walk(dump_path):
        rows = []
        for name in sorted(files):
            m = _NATIVE_FILE.match(name)
            if not m:
                continue
            arr = np.load(os.path.join(root, name), allow_pickle=False)
            rows.append(_stat_row(m, arr))
        if rows:
            rows.sort(key=lambda r: int(r[4]))
            target = os.path.join(root, out_name)
            with open(target, "w", newline="", encoding="utf-8") as fh:
                writer = csv.writer(fh)
                writer.writerow(STAT_HEADER)
                writer.writerows(rows)
            written.append(target)
    return written


def _stat_row(m: re.Match, arr: np.ndarray) -> list:
    flat = arr.reshape(-1)
    numeric = flat.astype(np.float64)
    finite = numeric[np.isfinite(numeric)]
    stats: list = ["", "", "", ""]
    if finite.size:
        stats = [repr(float(finite.max())), repr(float(finite.min())), repr(float(finite.mean())),
                 repr(float(np.sqrt(np.sum(finite * finite))))]
    shape = "(" + ",".join(str(s) for s in arr.shape) + ")"
    return [m["op_type"], m["op_name"], m["task"], m["stream"], m["timestamp"], m["io"], m["slot"],
            arr.nbytes, m["dtype"], shape, *stats, flat.size, int(np.isnan(numeric).sum()),
            int(np.isneginf(numeric).sum()), int(np.isposinf(numeric).sum()), int((numeric == 0).sum())]


def native_dump_files(dump_path: str) -> list:
    """Paths of the native kernel dump's tensor files under dump_path (for checks that it is not empty)."""
    out = []
    for root, _dirs, files in os.walk(dump_path):
        out += [os.path.join(root, f) for f in files if _NATIVE_FILE.match(f)]
    return sorted(out)


def mode_error(mode: str, level: str) -> str | None:
    """The message for a level that cannot be dumped in this execution mode, or None."""
    if mode != PYNATIVE and level in ("L0", "L1", "mix"):
        kind = {"L0": "cell", "L1": "api", "mix": "cell and api"}[level]
        return (f"Data dump is not supported in {mode} mode when dump level is {kind}: set \"level\": \"L2\" "
                "for a kernel dump in graph mode, or run in PyNative mode (ms.set_context(mode=ms.PYNATIVE_MODE))")
    return None
