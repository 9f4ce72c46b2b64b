"""What one case is called with: the callable its dump name names, and its inputs.

The callable (:func:`resolve_api`): from a dump name's prefix and API name to the framework callable, refusing what
is not safe to call. A dump names the function to run, so the name is untrusted: only the namespaces msprobe wraps
are looked up, private names and functions that touch files, the network, global state or code loading are refused.

The inputs (:func:`build_inputs`): real tensors from the dump's files, or random ones from its statistics. Random
data is deterministic: every tensor draws from its own numpy generator seeded with (seed, the case name, the
tensor's place in the call), so the same seed gives the same tensors in every process, on every xdist worker,
whatever else was generated before.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from dumpers import format as fmt
from generators import dumpjson
from generators.budget import default_max_bytes
from generators.index_rules import index_bound
from generators.random_data import GenerationError, GenParams, TensorSpec, describe, generate, to_tensor
from generators.tensorfile import TensorFileError, load_tensor_file

# --- the callable ---------------------------------------------------------------------------------
# prefix -> (module holding the callables, how to describe it)
TORCH_NAMESPACES = {
    "Functional": ("torch.nn.functional", "torch.nn.functional"),
    "Tensor": ("torch", "torch.Tensor"),
    "Torch": ("torch", "torch"),
    "Aten": ("torch", "torch.ops.aten"),
    "NPU": ("torch_npu", "torch_npu"),
}
REPLAYABLE_PREFIXES = tuple(TORCH_NAMESPACES)

# sub-namespaces a dotted Torch name may enter (torch.linalg.norm, torch.fft.fft, torch.special.erf)
TORCH_SUBMODULES = frozenset({"linalg", "fft", "special"})

# top-level torch names a dump may never make us call: files, code loading, global state
DENIED_NAMES = frozenset({
    "load", "save", "from_file", "hub", "compile", "jit", "manual_seed", "seed", "initial_seed",
    "use_deterministic_algorithms", "library", "ops", "classes", "utils", "backends", "cuda", "npu",
    "distributed", "multiprocessing", "export", "onnx", "package", "profiler", "serialization", "autograd",
    "testing", "overrides", "fx", "storage", "random", "get_rng_state", "fork_rng", "tofile",
    "register_hook", "register_post_accumulate_grad_hook", "share_memory_", "pin_memory", "backward",
})
DENIED_PREFIXES = {            # per namespace: private names, and torch.set_* (global state)
    "torch": ("set_", "_"), "torch.nn.functional": ("_",), "torch_npu": ("_",), "torch.Tensor": ("_",),
    "torch.ops.aten": (),      # aten ops are pure kernels; many are private-looking (_softmax, _to_copy)
}

# dunder methods of torch.Tensor that are plain operators (everything else with '__' is refused)
_OPERATORS = """add radd iadd sub rsub isub mul rmul imul div rdiv idiv truediv rtruediv itruediv floordiv
rfloordiv ifloordiv mod rmod imod pow rpow ipow matmul rmatmul imatmul and rand iand or ror ior xor rxor ixor
lshift rlshift ilshift rshift rrshift irshift eq ne lt le gt ge neg pos abs invert getitem setitem bool nonzero
float int len"""
OPERATOR_DUNDERS = frozenset(f"__{name}__" for name in _OPERATORS.split())

_NAME_PART = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


class UnknownApiError(LookupError):
    """An API name that cannot be resolved to a callable; the message says why."""


def prefix_problem(prefix: str) -> str | None:
    """Why PyTorch calls with this prefix cannot be replayed here, or None. Cheap: imports nothing."""
    if prefix in fmt.COMMUNICATION_PREFIXES:
        return f"communication op ({prefix}): it needs the other ranks and is not replayed on one process"
    if prefix == "NPU" and importlib.util.find_spec("torch_npu") is None:
        return "NPU custom op: torch_npu is not installed here, so it cannot run"
    if prefix not in REPLAYABLE_PREFIXES:
        return (f"prefix {prefix!r} is not replayable; only {', '.join(REPLAYABLE_PREFIXES)} calls are "
                "re-run (msprobe does the same)")
    return None


def _refused(name: str, namespace: str) -> str | None:
    if name in OPERATOR_DUNDERS and namespace == "torch.Tensor":
        return None
    if name.startswith("__") or name in DENIED_NAMES or name.startswith(DENIED_PREFIXES.get(namespace, ("_",))):
        return f"{namespace}.{name} is refused: a dump may not call private or side-effecting functions"
    return None


@functools.lru_cache(maxsize=4096)
def _resolve(prefix: str, api: str) -> Callable:
    try:
        module_name, namespace = TORCH_NAMESPACES[prefix]
    except KeyError:
        raise UnknownApiError(f"prefix {prefix!r} is not replayable; use one of "
                              f"{', '.join(REPLAYABLE_PREFIXES)}") from None
    parts = api.split(".")
    if not api or not all(_NAME_PART.match(p) for p in parts):
        raise UnknownApiError(f"{api!r} is not a valid API name")
    try:
        module: Any = importlib.import_module(module_name)
    except ImportError:
        raise UnknownApiError(f"{module_name} is not installed here, so {prefix}.{api} cannot run") from None
    if prefix == "Aten":
        if len(parts) > 2:
            raise UnknownApiError(f"Aten name {api!r} must be 'op' or 'op.overload'")
        base: Any = module.ops.aten
    elif prefix == "Tensor":
        if len(parts) != 1:
            raise UnknownApiError(f"Tensor method name {api!r} may not contain dots")
        base = module.Tensor
    else:
        if len(parts) > 2 or (len(parts) == 2 and (prefix != "Torch" or parts[0] not in TORCH_SUBMODULES)):
            raise UnknownApiError(f"{prefix}.{api}: dotted names are only allowed into torch."
                                  f"{{{', '.join(sorted(TORCH_SUBMODULES))}}}")
        base = module
    for i, part in enumerate(parts):
        if not (prefix == "Aten" and i == 1):
            reason = _refused(part, namespace)
            if reason:
                raise UnknownApiError(reason)
        try:
            base = getattr(base, part)
        except (AttributeError, RuntimeError):  # torch.ops raises either for unknown ops
            raise UnknownApiError(f"{namespace}.{api} does not exist in this framework version") from None
    if not callable(base) or isinstance(base, type(importlib)):
        raise UnknownApiError(f"{namespace}.{api} is not a callable")
    return base


def resolve_api(case_or_prefix: Any, api: str | None = None) -> Callable:
    """The framework callable for a case (or a prefix and an API name).

    ``Functional`` -> ``torch.nn.functional.X``, ``Tensor`` -> ``torch.Tensor.X`` (self is the first
    positional argument), ``Torch`` -> ``torch.X`` (``torch.linalg.X`` etc. for dotted names),
    ``Aten`` -> ``torch.ops.aten.X`` (``add.Tensor`` is an overload), ``NPU`` -> ``torch_npu.X``.

    Raises:
        UnknownApiError: prefix not replayable, name refused, or not present in the installed framework.
    """
    if api is None:
        prefix, api = case_or_prefix.prefix, case_or_prefix.api
    else:
        prefix = case_or_prefix
    return _resolve(str(prefix), str(api))


# --- the inputs -----------------------------------------------------------------------------------
# base API name -> dtype swaps applied before generating / after loading (precision spec 7.5)
DTYPE_SWAPS = {"cross_entropy": {"int32": "int64"}}
HF32_APIS = frozenset({"conv1d", "conv2d"})      # fp32 inputs rounded to HF32 (precision spec 7.5)
DROPPED_KWARGS = ("device",)                     # deleted before execution (precision spec 1.1)
SUMMARY_TENSORS = 8                              # tensors described in Inputs.summary


class InputError(Exception):
    """The inputs of a case cannot be built; the message is the SKIP reason and says what to do."""


@dataclass
class Inputs:
    """Arguments ready to call the API with (CPU tensors), and how they were made."""

    args: list
    kwargs: dict
    grad_output: Any | None
    mode: str
    seed: int | None
    summary: str
    params: GenParams | None = None

    def __repr__(self) -> str:
        params = "" if self.params is None else f", params={self.params}"
        return f"Inputs(mode={self.mode!r}, seed={self.seed!r}{params}, summary={self.summary!r})"


def _base(api: str) -> str:
    return api.split(".")[0]


def _target_dtype(case: Any, dtype: str) -> str:
    return DTYPE_SWAPS.get(_base(case.api), {}).get(dtype, dtype)


def _call_dtype(case: Any, item: dict) -> str:
    """The canonical dtype a tensor item has in the call (:data:`DTYPE_SWAPS` applied); GenerationError for a
    dtype no tensor can be made in (the rule of :meth:`TensorSpec.dtype_of`, from the dtype facts alone)."""
    dtype = fmt.canonical_dtype(item.get("dtype"))
    if dtype is None or fmt.dtype_facts(dtype) is None:
        raise GenerationError(f"dtype {item.get('dtype')!r} cannot be generated")
    return _target_dtype(case, dtype)


def _tensor_items(case: Any) -> list:
    """(label, item) of every tensor the inputs need: args, kwargs, then the output gradient."""
    forward = case.forward or {}
    found = [(_label("args", p), item) for p, item in dumpjson.iter_tensor_items(forward.get(fmt.INPUT_ARGS))]
    found += [(_label("kwargs", p), item) for p, item in dumpjson.iter_tensor_items(forward.get(fmt.INPUT_KWARGS))]
    grad = _grad_item(case)
    if grad is not None:
        found.append(("grad_output", grad))
    return found


def _label(part: str, path: tuple) -> str:
    """``args[0][1]``, ``kwargs[weight]``: where a tensor sits in the call (also keys its random stream)."""
    return part + "".join(f"[{p}]" for p in path)


def _grad_item(case: Any) -> dict | None:
    grads = (case.backward or {}).get(fmt.INPUT) or []
    return grads[0] if grads and dumpjson.is_tensor_item(grads[0]) else None


def required_bytes(case: Any) -> tuple:
    """(elements, bytes) the case's input tensors need, computed from the dump alone."""
    elements = total = 0
    for _, item in _tensor_items(case):
        n = dumpjson.element_count(item.get("shape") or [])
        dt = fmt.dtype_facts(_call_dtype(case, item))
        elements += n
        total += n * (dt.itemsize if dt else 8)
    return elements, total


def check_budget(case: Any, max_bytes: int | None) -> int:
    """Raise InputError when the case needs more than ``max_bytes`` (default: from available memory)."""
    limit = default_max_bytes() if max_bytes is None else int(max_bytes)
    try:
        elements, total = required_bytes(case)
    except GenerationError as exc:
        raise InputError(f"{case.name}: {exc}") from None
    if total > limit:
        raise InputError(f"{case.name}: inputs need {total} bytes ({elements} elements), over the budget of "
                         f"{limit} bytes; raise --msprobe-max-bytes if the machine has the memory")
    return limit


def _seed_for(seed: int, name: str, label: str) -> np.random.Generator:
    digest = hashlib.blake2b(f"{name}\x00{label}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return np.random.default_rng([int(seed) & 0xFFFFFFFFFFFFFFFF, int.from_bytes(digest, "little")])


def _hf32(tensor: Any) -> Any:
    """Round fp32 to HF32 on the raw bit pattern: u := ((u >> 11) + 1) >> 1, then u << 12."""
    import torch

    bits = tensor.contiguous().view(torch.int32)
    bits = ((bits >> 11) + 1) >> 1
    return (bits << 12).view(torch.float32)


def _postprocess(case: Any, item: dict, tensor: Any) -> Any:
    import torch

    target = _call_dtype(case, item)
    if str(tensor.dtype) != f"torch.{target}":
        tensor = tensor.to(getattr(torch, target))
    if _base(case.api) in HF32_APIS and tensor.dtype == torch.float32:
        tensor = _hf32(tensor)
    return tensor


def _random_tensor(case: Any, label: str, path: tuple, item: dict, seed: int, params: GenParams,
                   part: str) -> tuple:
    spec = TensorSpec.from_item(item)
    spec = dataclasses.replace(spec, dtype=_target_dtype(case, spec.dtype))
    bound = None
    if part in ("args", "kwargs") and case.forward:
        bound = index_bound(case.prefix, case.api, case.forward, path)
    array = generate(spec, _seed_for(seed, case.name, label), params, index=bound)
    return to_tensor(array, spec.dtype), describe(array, spec)


def _join(head: str, lines: list) -> str:
    shown = lines[:SUMMARY_TENSORS]
    more = f"; ... {len(lines) - len(shown)} more tensors" if len(lines) > len(shown) else ""
    return "; ".join([head, *shown]) + more


def _knobs(params: GenParams) -> str:
    """The generation knobs that differ from the defaults, as replay needs them (empty for plain runs)."""
    parts = []
    if params.magnitude < 1.0:
        parts.append(f"magnitude {params.magnitude:.6g}")
    if not params.match_stats:
        parts.append("uniform (statistics not matched)")
    if params.edge_values:
        parts.append("edge values")
    return "".join(f", {p}" for p in parts)


def build_inputs(case: Any, *, random: bool = False, seed: int = 0, max_bytes: int | None = None,
                 edge_values: bool = False, params: GenParams | None = None) -> Inputs:
    """The inputs of ``case``: real data when it has tensor files and ``random`` is false, else random data.

    Args:
        seed: random mode only; together with the case name it fixes every generated tensor.
        max_bytes: budget for all input tensors of the case (default: a quarter of available memory),
            checked from the dump's shapes before anything is read or generated.
        edge_values: add subnormals, signed zeros, values next to the extremes and exact ties.
        params: generation knobs (Hypothesis draws them; see :class:`GenParams`).

    Raises:
        InputError: the SKIP reason: the case's problem, a missing/refused/outside file, over budget, a dtype
            that cannot be generated.
    """
    if case.problem:
        raise InputError(case.problem)
    limit = check_budget(case, max_bytes)
    real = case.has_tensor_files and not random
    if real and case.tensor_dir is None:
        raise InputError(case.tensor_dir_problem or
                         f"{case.name}: the dump has no tensor directory ({case.dump_json}); copy "
                         "dump_tensor_data next to dump.json, or use random data (--msprobe-random)")
    if params is None:
        params = GenParams(edge_values=edge_values)
    elif edge_values and not params.edge_values:
        params = GenParams(params.magnitude, params.match_stats, True)
    lines: list = []
    remaining = [limit]          # real mode: the files' sizes are charged against the budget as they load

    def make(part: str):
        def _make(path: tuple, item: dict) -> Any:
            label = _label(part, path)
            try:
                if real:
                    tensor = load_tensor_file(case.tensor_dir, item, max_bytes=remaining[0], where=case.name)
                    remaining[0] -= tensor.element_size() * tensor.nelement()
                    # real data is described by where it came from; statistics of it cost time per call
                    text = f"{str(tensor.dtype).replace('torch.', '')}{list(tensor.shape)} from {item.get('data_name')}"
                else:
                    tensor, text = _random_tensor(case, label, path, item, seed, params, part)
            except (TensorFileError, GenerationError) as exc:
                raise InputError(str(exc)) from None
            lines.append(f"{label}: {text}")
            return _postprocess(case, item, tensor)
        return _make

    def decoded(raw: Any, part: str, path: tuple = ()) -> Any:
        made = make(part)
        tensors = {p: made(p, item) for p, item in dumpjson.iter_tensor_items(raw, path)}
        return dumpjson.decode_value(raw, tensors, path)

    forward = case.forward or {}
    try:
        args = decoded(forward.get(fmt.INPUT_ARGS) or [], "args")
        kwargs_raw = forward.get(fmt.INPUT_KWARGS) or {}
        kwargs = {k: decoded(v, "kwargs", (k,)) for k, v in kwargs_raw.items() if k not in DROPPED_KWARGS}
    except dumpjson.ValueDecodeError as exc:
        raise InputError(f"{case.name}: {exc}") from None
    grad_output = None
    grad = _grad_item(case)
    if grad is not None:
        grad_output = make("grad_output")((), grad)
    mode = "real" if real else "random"
    head = f"{mode} data" if real else f"random data, seed {seed}{_knobs(params)}"
    return Inputs(args=args, kwargs=kwargs, grad_output=grad_output, mode=mode,
                  seed=None if real else seed, summary=_join(head, lines),
                  params=None if real else params)


def inputs_strategy(case: Any, *, edge_values: bool = False, max_bytes: int | None = None) -> Any:
    """A Hypothesis strategy of random-mode :class:`Inputs` for ``case`` (for ``--msprobe-examples N``).

    Hypothesis draws a seed and the generation knobs; numpy fills the tensors. Shrinking moves toward seed 0,
    smaller magnitudes (interior values collapse toward 0 clamped into [Min, Max]) and plain uniform data;
    the recorded extremes stay in every example.

    Raises:
        InputError: at once, when the case cannot have inputs (its problem, over budget).
    """
    from hypothesis import strategies as st

    from generators.strategies import generation_params, seeds

    if case.problem:
        raise InputError(case.problem)
    limit = check_budget(case, max_bytes)
    return st.builds(lambda seed, params: build_inputs(case, random=True, seed=seed, max_bytes=limit,
                                                       params=params),
                     seeds(), generation_params(edge_values=edge_values))
