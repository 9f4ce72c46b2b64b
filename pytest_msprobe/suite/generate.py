"""Turn captured API calls into a committed regression suite: a pytest module plus a mini dump.

``generate(dump, out_dir, ...)`` selects calls of one dump.json (by API pattern and/or by the verdicts of a
checker result CSV) and writes::

    out_dir/test_<name>.py          one parametrized test over the selected calls (id = the call's dump name)
    out_dir/<name>_data/dump.json   only the selected entries, forward and backward, in dump order
    out_dir/<name>_data/dump_tensor_data/   only the tensor files those calls' inputs need (real data)
    out_dir/<name>_data/generated.json      what was generated: mode, seed, calls, file checksums
    out_dir/reproduce_<call>.py     with ``scripts``: a standalone reproduction of one call (no pytest)

Everything written is deterministic: the same inputs give byte-identical files (no timestamps, no absolute
paths, sorted where the dump gives no order). torch is never imported here.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from typing import Any

from dumpers import format as fmt

from . import code
from .plan import (
    DEFAULT_NAME,
    DEFAULT_SEED,
    DEFAULT_STANDARD,
    DEFAULT_STATUSES,
    GENERATOR,
    HEADER_MARK,
    IGNORED_ENTRIES,
    MANIFEST,
    GenerateError,
    Plan,
    Selected,
    make_plan,
    script_name,
)

def input_tensor_items(case: Any) -> list:
    """The tensor items whose files the call's inputs need: args, kwargs, the output gradient."""
    from generators import dumpjson
    fwd = case.forward or {}
    items = [item for part in (fmt.INPUT_ARGS, fmt.INPUT_KWARGS)
             for _, item in dumpjson.iter_tensor_items(fwd.get(part))]
    grads = (case.backward or {}).get(fmt.INPUT) or []
    if grads and dumpjson.is_tensor_item(grads[0]):
        items.append(grads[0])
    return items


def check_real_data(selected: Sequence[Selected], dump_json: str) -> list:
    """(source path, data_name) of every tensor file the selected calls need, sorted and unique.

    Raises:
        GenerateError: a call without tensor files (a statistics dump) or a missing file; suggests --random.
    """
    from generators.tensorfile import PathRefused, safe_join
    from generators.recorded import recorded_files
    needed: dict = {}
    for sel in selected:
        case = sel.case
        if case.problem:
            continue            # replays as SKIP with its reason; nothing to copy
        items = input_tensor_items(case)
        bare = [it for it in items if fmt.DATA_NAME not in it]
        if bare:
            raise GenerateError(f"{dump_json}: {case.call_name} has no tensor files (a statistics dump?), which "
                                "real-data generation needs; use --random to generate inputs from the "
                                "recorded statistics")
        if items and case.tensor_dir is None:
            raise GenerateError(f"{case.call_name}: {case.tensor_dir_problem or 'the tensor files are missing'}; "
                                "or use --random to generate inputs from the recorded statistics")
        for item in items:
            try:
                path = safe_join(case.tensor_dir, item[fmt.DATA_NAME])
            except PathRefused as exc:
                raise GenerateError(f"{case.call_name}: {exc}") from None
            if not os.path.isfile(path):
                raise GenerateError(f"{case.call_name}: tensor file {path} is missing; copy the dump's "
                                    f"{fmt.TENSOR_DIR} completely, or use --random")
            needed[item[fmt.DATA_NAME]] = path
        needed.update((name, path) for path, name in recorded_files(case))   # for recorded and fidelity
    return sorted((path, name) for name, path in needed.items())


# --- the output directory -------------------------------------------------------------------------------
def _is_generated_file(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.readline().rstrip("\n") == HEADER_MARK
    except (OSError, UnicodeDecodeError):
        return False


def check_out_dir(out_dir: str, name: str, force: bool) -> None:
    """Refuse a directory holding files this generator did not write (unless ``force``).

    Raises:
        GenerateError: naming a few of the other files and the --force option.
    """
    if not os.path.exists(out_dir):
        return
    if not os.path.isdir(out_dir):
        raise GenerateError(f"-o {out_dir} is a file; name a directory for the generated suite")
    if force:
        return
    others = []
    for entry in sorted(os.listdir(out_dir)):
        path = os.path.join(out_dir, entry)
        if entry in IGNORED_ENTRIES or entry == f".{name}_data.partial":   # left by an interrupted run
            continue
        if entry.endswith(".py") and _is_generated_file(path):
            continue
        if entry == f"{name}_data" and os.path.isfile(os.path.join(path, MANIFEST)):
            continue
        others.append(entry)
    if others:
        shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
        raise GenerateError(f"-o {out_dir} holds other files ({shown}); generate into an empty or new directory, "
                            "or pass --force to write there anyway (only the generated files are replaced)")


# --- writing ----------------------------------------------------------------------------------------------
def _strip_data_names(obj: Any) -> Any:
    if isinstance(obj, list):
        return [_strip_data_names(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _strip_data_names(v) for k, v in obj.items() if k != fmt.DATA_NAME}
    return obj


def mini_dump(plan: Plan, with_files: bool = True) -> dict:
    """The dump.json of the suite: the selected entries only, in the source dump's order."""
    from generators import dumpjson
    doc = dumpjson.load_file(plan.dump_json)
    wanted = {s.case.call_name for s in plan.selected}
    data = doc.get("data") or {}
    pairs = data.pairs if isinstance(data, dumpjson.DuplicateKeyDict) else list(data.items())
    kept: dict = {}
    for key, entry in pairs:
        try:
            parsed = fmt.parse_entry_key(key)
        except ValueError:
            call = key
        else:
            call = parsed.api_call if parsed.kind not in fmt.MODULE_KINDS else None
        if call in wanted and key not in kept:
            kept[key] = _strip_data_names(entry) if plan.random else entry
    return {
        "task": "statistics" if plan.random else "tensor",
        "level": doc.get("level", "L1"),
        "framework": doc.get("framework", plan.selected[0].case.framework if plan.selected else "pytorch"),
        "dump_data_dir": fmt.TENSOR_DIR if with_files and not plan.random else None,
        "data": kept,
    }


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)


def generate(dump: str, out_dir: str, *, apis: Sequence[str] = (), from_result: str | None = None,
             statuses: Sequence[str] = DEFAULT_STATUSES, random: bool = False, name: str = DEFAULT_NAME,
             force: bool = False, scripts: Sequence[str] = (), seed: int = DEFAULT_SEED,
             standard: str = DEFAULT_STANDARD) -> list:
    """Write the regression suite of the selected calls of ``dump`` into ``out_dir``.

    Args:
        dump: a dump.json, or a directory holding exactly one.
        apis: patterns (dump names, API names, wildcards); none selects every call.
        from_result: a checker result CSV; only its APIs with one of ``statuses`` are selected.
        random: random-data mode: the suite keeps the statistics and the seed, no tensor files.
        name: the suite's name: ``test_<name>.py`` and ``<name>_data/``.
        force: write into a directory that holds other files.
        scripts: dump names of calls that also get a standalone ``reproduce_<call>.py``.

    Returns:
        The written paths, relative to ``out_dir``, sorted.

    Raises:
        GenerateError: bad name, dump, pattern, CSV, missing tensor files or a directory with other files.
    """
    plan = make_plan(dump, out_dir, apis=apis, from_result=from_result, statuses=statuses, random=random,
                     name=name, scripts=scripts, seed=seed, standard=standard)
    files = [] if random else check_real_data(plan.selected, plan.dump_json)
    check_out_dir(out_dir, name, force)
    return write(plan, files)


def write(plan: Plan, files: Sequence[tuple]) -> list:
    """Write the data directory, the test module and the scripts of ``plan``; returns relative paths.

    All text is made before anything is written, and the data directory is built beside its final place and
    then swapped in, so a failure leaves the previous suite as it was.
    """
    module = f"test_{plan.name}.py"
    sources = {module: code.test_module(plan)}
    sources.update((script_name(call), code.script(plan, call)) for call in plan.scripts)
    dump_text = fmt.dumps_json(mini_dump(plan, bool(files))) + "\n"

    os.makedirs(plan.out_dir, exist_ok=True)
    data_dir = os.path.join(plan.out_dir, f"{plan.name}_data")
    staging = os.path.join(plan.out_dir, f".{plan.name}_data.partial")
    if os.path.isdir(staging):
        shutil.rmtree(staging)
    os.makedirs(staging)
    written = [f"{plan.name}_data/{fmt.DUMP_JSON}", f"{plan.name}_data/{MANIFEST}"]
    _write_text(os.path.join(staging, fmt.DUMP_JSON), dump_text)
    checksums = {}
    if files:
        os.makedirs(os.path.join(staging, fmt.TENSOR_DIR))
        for src, data_name in files:
            dst = os.path.join(staging, fmt.TENSOR_DIR, data_name)
            shutil.copyfile(src, dst)
            checksums[data_name] = _sha256(dst)
            written.append(f"{plan.name}_data/{fmt.TENSOR_DIR}/{data_name}")
    manifest = {"generator": GENERATOR, "format": 1, "mode": "random" if plan.random else "real",
                "seed": plan.seed, "standard": plan.standard, "source": plan.label,
                "calls": [s.case.call_name for s in plan.selected], "tensor_files": checksums}
    _write_text(os.path.join(staging, MANIFEST), fmt.dumps_json(manifest) + "\n")
    if os.path.isdir(data_dir):
        shutil.rmtree(data_dir)
    os.replace(staging, data_dir)
    for name, text in sources.items():
        _write_text(os.path.join(plan.out_dir, name), text)
        written.append(name)
    return sorted(written)
