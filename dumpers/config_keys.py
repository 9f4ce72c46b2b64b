"""Every config.json key that msprobe 1.x and 26.x document, and what this project does with each one.

Three kinds of key: ``USED`` (this project implements it), ``CHECKER`` (read by the accuracy checker's
``--msprobe-config``, not by the dumper) and ignored keys, which carry a sentence telling what msprobe does with
the key and what happens here instead. An ignored key is warned about once, when a debugger is built, unless
its value is one under which msprobe behaves as this project does (``quiet``). A key no msprobe release
documents is an error that suggests the nearest documented key.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Iterable, Optional

USED = "used"
CHECKER = "checker"
IGNORED = "ignored"


@dataclass(frozen=True)
class Key:
    """One documented key: its kind, the msprobe releases that document it, and (ignored keys) why."""

    kind: str
    since: str = "1.x"
    msprobe_does: str = ""
    here: str = "it is ignored"
    quiet: tuple = ()

    def is_quiet(self, value: Any) -> bool:
        """True when ``value`` makes msprobe behave as this project does (no warning needed)."""
        return any(value == q and type(value) is type(q) for q in self.quiet)


TOP_LEVEL: dict = {
    "task": Key(USED),
    "dump_path": Key(USED),
    "rank": Key(USED),
    "step": Key(USED),
    "level": Key(USED),
    "framework": Key(USED, "26.x", here="the debugger you import (PyTorch or MindSpore) decides"),
    "seed": Key(IGNORED, "1.0.4", "seeds Python, NumPy and torch with it when the debugger is built",
                "the dumper never changes training: call seed_all(seed) from pytest_msprobe yourself"),
    "is_deterministic": Key(IGNORED, "1.0.4", "switches torch to deterministic algorithms when true",
                            "the dumper never changes training: call seed_all(seed, mode=True) yourself",
                            quiet=(False,)),
    "enable_dataloader": Key(IGNORED, "1.x (deprecated)",
                             "hooks torch's DataLoader to call start/stop/step by itself for the configured steps, "
                             "then ends training",
                             "call start(), stop() and step() in the training loop", quiet=(False,)),
    "acl_config": Key(IGNORED, "1.x", "names the ACL dump configuration of a PyTorch level L2 (kernel) dump",
                      "there is no PyTorch kernel dump", quiet=("",)),
    "async_dump": Key(IGNORED, "26.x",
                      "keeps the collected data on the device and writes it when the step ends",
                      "data is written as it is collected (tensor files by a writer process), which is what "
                      "async_dump false does", quiet=(False,)),
    "dump_enable": Key(IGNORED, "26.x",
                       "re-reads config.json while training runs, switching the dump on or off as the key changes",
                       "the dump is switched by start() and stop()"),
    "extra_info": Key(IGNORED, "26.x", "writes no stack.json and no construct.json when it is false",
                      "stack.json and construct.json are always written (extra_info true)", quiet=(True,)),
    "precision": Key(IGNORED, "26.x", "computes the statistics in float32 when it is \"high\"",
                     "statistics are computed as msprobe's default \"low\" does, in the tensor's own dtype",
                     quiet=("low",)),
    "risk_level": Key(USED, "26.x"),
}

# risk_level (dumpers.torch_dump.risk): which APIs a PyTorch dump at L1 or mix records. msprobe 26.2 dumps
# "FOCUS" when the key is absent and "ALL" for an empty value (null, ""); its MindSpore dumper checks the value
# and records every API whatever it is.
RISK_CORE = "CORE"
RISK_FOCUS = "FOCUS"
RISK_ALL = "ALL"
RISK_LEVELS = (RISK_CORE, RISK_FOCUS, RISK_ALL)
RISK_DEFAULT = RISK_FOCUS


def risk_level_of(value: Any) -> Optional[str]:
    """The risk level a config value means (an empty one is "ALL", as msprobe 26.2 takes it); None when invalid."""
    if value is None or value == "":
        return RISK_ALL
    if isinstance(value, str) and value in RISK_LEVELS:
        return value
    return None


# Task sections: key -> Key. The effective task's section is the one read (msprobe reads only that one).
_DUMP_SECTION: dict = {
    "scope": Key(USED),
    "list": Key(USED),
    "data_mode": Key(USED),
    "summary_mode": Key(USED),
}
_ONLINE = "sends the calls to a GPU machine for online run_ut (online accuracy pre-check)"
SECTIONS: dict = {
    "statistics": {
        **_DUMP_SECTION,
        "tensor_list": Key(IGNORED, "26.x", "also saves the full tensors of the APIs and modules it names",
                           "only statistics are written: dump those calls with task \"tensor\" and \"list\"",
                           quiet=([],)),
        "device": Key(IGNORED, "26.x", "chooses where MindSpore static-graph statistics are computed",
                      "statistics are computed where the tensor is", quiet=("host",)),
    },
    "tensor": {
        **_DUMP_SECTION,
        "file_format": Key(USED),
        "backward_input": Key(IGNORED, "1.x", "names backward input files for a PyTorch level L2 (kernel) dump",
                              "there is no PyTorch kernel dump", quiet=([],)),
        "online_run_ut": Key(IGNORED, "1.x", _ONLINE, "the calls are written to the dump directory; check them "
                             "with pytest --msprobe-api-info", quiet=(False,)),
        "nfs_path": Key(IGNORED, "1.x", "is the shared directory of online run_ut", "there is no online run_ut",
                        quiet=("",)),
        "host": Key(IGNORED, "1.x", "is the receiving GPU machine of online run_ut", "there is no online run_ut",
                    quiet=("",)),
        "port": Key(IGNORED, "1.x", "is the receiving port of online run_ut", "there is no online run_ut",
                    quiet=(-1,)),
        "tls_path": Key(IGNORED, "1.x", "holds the TLS certificates of online run_ut", "there is no online run_ut",
                        quiet=("",)),
        "bench_path": Key(IGNORED, "26.x", "compares each tensor's md5 with a previous md5 dump and saves the "
                          "tensors that differ", "every selected tensor is saved", quiet=("",)),
        "diff_nums": Key(IGNORED, "26.x", "stops the bench_path comparison after that many differences",
                         "there is no bench_path comparison", quiet=(1,)),
    },
    "run_ut": {
        "white_list": Key(CHECKER), "black_list": Key(CHECKER), "error_data_path": Key(CHECKER),
        "is_online": Key(IGNORED, "1.x", "runs run_ut online, receiving calls from an NPU training job",
                         "the checker runs on dump files (pytest --msprobe-api-info)", quiet=(False,)),
        "nfs_path": Key(IGNORED, "1.x", "is the shared directory of online run_ut", "there is no online run_ut",
                        quiet=("",)),
        "host": Key(IGNORED, "1.x", "is the listening address of online run_ut", "there is no online run_ut",
                    quiet=("",)),
        "port": Key(IGNORED, "1.x", "is the listening port of online run_ut", "there is no online run_ut",
                    quiet=(-1,)),
        "rank_list": Key(IGNORED, "1.x", "names the ranks checked by online run_ut", "there is no online run_ut",
                         quiet=([0],)),
        "tls_path": Key(IGNORED, "1.x", "holds the TLS certificates of online run_ut", "there is no online run_ut",
                        quiet=("",)),
    },
    "acc_check": {
        "white_list": Key(CHECKER, "26.x"), "black_list": Key(CHECKER, "26.x"),
        "error_data_path": Key(CHECKER, "26.x"),
    },
    "overflow_check": {"overflow_nums": Key(IGNORED), "check_mode": Key(IGNORED)},
    "free_benchmark": {name: Key(IGNORED) for name in (
        "scope", "list", "fuzz_device", "pert_mode", "handler_type", "fuzz_level", "fuzz_stage", "if_preheat",
        "preheat_step", "max_sample")},
    "grad_probe": {"grad_level": Key(USED), "param_list": Key(USED), "bounds": Key(USED)},
}

# Tasks: those implemented, and those documented that the dumper accepts and does nothing for.
DUMP_TASKS = ("statistics", "tensor")
WORKING_TASKS = ("statistics", "tensor", "grad_probe")
INERT_TASKS: dict = {
    "overflow_check": "detects inf/nan overflows in API outputs and dumps the calls that overflow",
    "free_benchmark": "re-runs APIs with perturbed inputs on the device and reports those whose outputs move",
    "run_ut": "is msprobe 1.x's accuracy pre-check task, not a dump task",
    "acc_check": "is msprobe 26.x's accuracy pre-check task, not a dump task",
    "structure": "collects only the model structure and call stacks (construct.json, stack.json), no data",
    "exception_dump": "dumps the kernels that raise an exception (MindSpore level L2)",
}
ALL_TASKS = (*WORKING_TASKS, *INERT_TASKS)

# Levels: those the dumper runs for each framework, and the documented ones it does not.
LEVELS = {"pytorch": ("L0", "L1", "mix"), "mindspore": ("L0", "L1", "L2", "mix")}
UNAVAILABLE_LEVELS = {
    "L2": "is msprobe's kernel dump, which needs the ACL dump of an Ascend NPU (PyTorch)",
    "debug": "is msprobe 26.x's single-point saving with debugger.save()",
}
ALL_LEVELS = ("L0", "L1", "L2", "mix", "debug")


def nearest(name: str, known: Iterable[str]) -> Optional[str]:
    """The documented name closest to ``name`` (None when nothing is close)."""
    found = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'X'?)`` for the nearest documented name, or an empty string."""
    best = nearest(name, known)
    return f" (did you mean {best!r}?)" if best else ""


def ignored_message(source: str, where: str, key: Key, value: Any) -> str:
    """The one-line warning for an ignored key: the key, that it is ignored, and what msprobe does with it."""
    what = f" msprobe {key.msprobe_does};" if key.msprobe_does else ""
    return f"{source}: {where!r} = {value!r} is ignored ({key.since} msprobe key):{what} here {key.here}."
