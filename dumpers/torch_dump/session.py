"""One dump run: per-step state, call recording, backward hooks, and the files on disk.

The capture mechanisms (function mode, module hooks, distributed wrappers) all end here:
:meth:`DumpSession.run_api` records one API call, :meth:`DumpSession.begin`/:meth:`DumpSession.finish`
record anything with inputs and outputs (modules). Every entry goes to the in-memory step state and,
at once, to the journal; ``stop()`` writes dump.json, stack.json and construct.json atomically.
"""
from __future__ import annotations

import functools
import logging
import os
import types
from typing import Any, Callable, Optional

import torch

from dumpers import atomic
from dumpers import format as fmt
from dumpers import json_render
from dumpers.config import DumpConfig
from dumpers.dumpoff import DumpOff
from dumpers.journal import JournalWriter
from dumpers.torch_dump import amp, callargs, risk
from dumpers.torch_dump import stack as stacklib
from dumpers.torch_dump.encode import Encoder, first_tensor
from dumpers.torch_dump.entry_text import (ENTRY_LEVEL, ITEM_LEVEL, backward_text, dict_text, dump_json_text,
                                        entry_text, forward_text, item_text, lines_text, list_text, plain_value,
                                        stack_json_text)
from dumpers.torch_dump import statcache
from dumpers.torch_dump.stats import StatBatch, StatCache
from dumpers.torch_dump.writer import TensorWriter, make_writer

log = logging.getLogger("pytest_msprobe.dump")

OPTIMIZER_NODE = "optimizer"


class DumpPathError(OSError):
    """dump_path cannot be created or written."""


def _parts(data_mode: list, direction: str) -> tuple:
    everything = "all" in data_mode or direction in data_mode
    return everything or "input" in data_mode, everything or "output" in data_mode


class Pending:
    """A call between its start and its end: inputs summarised, output not yet known."""

    __slots__ = ("key", "batch", "enc", "entry", "sid", "parent", "record", "want_out")

    def __init__(self, key, batch, enc, entry, sid, parent, record, want_out):
        self.key, self.batch, self.enc, self.entry = key, batch, enc, entry
        self.sid, self.parent, self.record, self.want_out = sid, parent, record, want_out


class DumpSession:
    """State of a dump across steps; created by the debugger, used by every capture mechanism."""

    def __init__(self, config: DumpConfig) -> None:
        self.config = config
        self.task = config.task
        self.level = config.level
        self.tensor_task = config.task == "tensor"
        self.md5 = config.summary_mode == "md5"
        self.api_list = list(config.api_list)
        self.scope = list(config.scope)
        self.fwd_in, self.fwd_out = _parts(config.data_mode, fmt.FORWARD)
        self.bwd_in, self.bwd_out = _parts(config.data_mode, fmt.BACKWARD)
        self.with_construct = config.level in ("L0", "mix")
        # calls whose arguments are all plain (CPU tensors, scalars, None) are rendered as they are encoded
        # (_plain_begin) when nothing filters or trims the entry
        self.plain = self.fwd_in and self.fwd_out and not self.api_list and not self.scope
        self.plain_backward = self.bwd_in and self.bwd_out and not self.api_list and not self.scope
        # msprobe applies risk_level only where no scope or list is given; decided once per API name
        self.risk_level = risk.ALL if config.api_list or config.scope else config.risk_level
        self.risk_keeps: dict = {}
        self.pid = os.getpid()
        self.step = 0
        self.rank: Optional[int] = None
        self.on = False
        self.busy = False
        self.generation = 0
        self.dump_off = DumpOff(log, config.dump_path)
        self.counters: dict = {}
        self.parents: list = []           # module (and optimizer) calls in progress, innermost last
        self.forward_parent: dict = {}    # module forward name -> its parent (for backward names)
        self.cache: Optional[StatCache] = StatCache(self.md5) if statcache.enabled() else None
        self.writer: Optional[TensorWriter] = None
        self.journal: Optional[JournalWriter] = None
        self._stack_lines: dict = {}      # frames -> formatted lines (kept across steps)
        self._lines_texts: dict = {}      # id(lines) -> (lines, their stack.json text), kept likewise
        self._scope_on = False
        self.compiled = False             # a compiled region was traced or ran while the dump was on (this step)
        self.saw_compiled = False         # compiled code ran before, or is started: its kernels write unseen
        self._reset_step_state()

    # --- step state ------------------------------------------------------------------------------
    def _reset_step_state(self) -> None:
        self.texts: dict = {}             # entry key -> its finished dump.json text (see entry_text)
        self.construct: dict = {}
        self.stack_groups: dict = {}      # frames -> [id, keys, lines]
        self._groups_by_id: dict = {}
        self._sid_by_id: dict = {}        # id(frames) -> (frames, stack id), see stack_id
        self.dir: Optional[str] = None
        self.tensor_dir: Optional[str] = None
        self.dump_data_dir: Optional[str] = None
        self._saved: dict = {}            # id(tensor) -> (StatCache.mark, file) of this window's tensor files
        self._removal_queued = False      # the writer is to remove this step's journal (see write_files)
        self._scope_on = False

    def next_step(self) -> None:
        """step(): counters and step state reset; hooks of the old step stop recording."""
        self.step += 1
        self.saw_compiled = self.saw_compiled or self.compiled
        self.compiled = False
        self.generation += 1
        self.counters.clear()
        self.parents.clear()
        self.forward_parent.clear()
        self.forget_reuse()
        self._reset_step_state()

    def forget_reuse(self) -> None:
        """Statistics and tensor files are reused within one dump window only (stop() and step() end it)."""
        if self.cache is not None:
            self.cache.clear()
        self._saved.clear()

    # --- files -----------------------------------------------------------------------------------
    def open_step(self) -> None:
        """Create ``step{N}/rank{R}/`` and the initial files on the first start() of a step."""
        if self.dir is not None:
            if self.journal is None:
                if self._removal_queued and self.writer is not None:
                    self.writer.flush()         # the step's journal, removed by the writer, before it is new again
                self._removal_queued = False
                self.journal = JournalWriter(os.path.join(self.dir, fmt.JOURNAL))
            return
        path = fmt.step_rank_dir(self.config.dump_path, self.step, self.rank)
        failing = path
        try:
            os.makedirs(path, mode=fmt.DIR_MODE, exist_ok=True)
            if self.tensor_task:
                tdir = os.path.join(path, fmt.TENSOR_DIR)
                os.makedirs(tdir, mode=fmt.DIR_MODE, exist_ok=True)
                self.tensor_dir = tdir
                self.dump_data_dir = tdir
            self.dir = path
            for name, doc in ((fmt.DUMP_JSON, self._dump_json()), (fmt.STACK_JSON, {}), (fmt.CONSTRUCT_JSON, {})):
                failing = os.path.join(path, name)
                fmt.write_json_atomic(failing, doc, fsync=False)
            failing = os.path.join(path, fmt.JOURNAL)
            self.journal = JournalWriter(failing)
            self.journal.header(self.task, self.level, "pytorch", self.dump_data_dir)
        except OSError as exc:
            self._fail(exc, failing)
            return
        if self.tensor_task and self.writer is None:
            self.writer = make_writer(report=False)      # its first error is reported by check_writer

    def _header(self) -> dict:
        header = {"task": self.task, "level": self.level, "framework": "pytorch", "dump_data_dir": self.dump_data_dir}
        if self.compiled:
            header[fmt.UNCAPTURED] = fmt.UNCAPTURED_COMPILED
        return header

    def _dump_json(self) -> dict:
        """The dump.json written when a step opens: the header, no entries yet (the journal holds them)."""
        return {**self._header(), "data": {}}

    def write_files(self) -> None:
        """stop(): dump.json, stack.json, construct.json in full (atomic), then the journal removed.

        With a tensor writer the three files (and the journal's removal) are queued behind the step's
        tensor files, so the writer runs on behind training and still a dump.json on disk never names a
        file that is not there yet: a full disk or a kill leaves every step whose dump.json was written
        whole, the step cut short with its journal for ``repair-dump``.
        """
        if self.dir is None:
            return
        if self.check_writer():
            return
        groups, known = [], self._lines_texts
        for sid, keys, lines in self.stack_groups.values():
            if keys:
                hit = known.get(id(lines))
                if hit is None or hit[0] is not lines:
                    hit = known[id(lines)] = (lines, lines_text(lines))
                groups.append((sid, keys, hit[1]))
        files = ((fmt.DUMP_JSON, dump_json_text(self._header(), self.texts)),
                 (fmt.STACK_JSON, stack_json_text(groups)),
                 (fmt.CONSTRUCT_JSON, json_render.dumps_json_fast(self.construct)))
        writer = self.writer
        path = self.dir
        try:
            for name, text in files:
                path = os.path.join(self.dir, name)
                if writer is not None:
                    if writer.submit_file(path, text.encode("utf-8")):
                        continue
                    if self.check_writer():     # it failed since: the step's files are not all there
                        return
                    writer = None
                atomic.write_text(path, text, mode=fmt.FILE_MODE)
        except OSError as exc:
            self._fail(exc, path)
            return
        if self.journal is not None:
            journal, self.journal = self.journal, None
            queued = writer is not None and writer.submit_remove(journal.path)
            journal.close(remove=not queued)
        self._removal_queued = writer is not None

    def close(self) -> None:
        """Wait for the tensor writer (its first error is reported), close the journal."""
        if self.writer is not None:
            self.writer.close()
            self.check_writer()
            self.writer = None
        if self.journal is not None:
            self.journal.close()
            self.journal = None

    @property
    def failed(self) -> Optional[BaseException]:
        """The I/O error that switched the dump off for the rest of the run, if any."""
        return self.dump_off.error

    def check_writer(self) -> bool:
        """Take over the tensor writer's first error (reported once, dump off); True when the dump is off."""
        if self.writer is not None and not self.dump_off.off:
            error = self.writer.failure()
            if error is not None:           # the file's path names its step (the writer runs behind training)
                step = self._step_of(getattr(error, "filename", None))
                step_dir = self.dir if step == self.step else fmt.step_rank_dir(self.config.dump_path, step, self.rank)
                self.dump_off.trip(error, None, step, step_dir)
                self._switch_off()
        return self.dump_off.off

    def _step_of(self, path: Optional[str]) -> int:
        """The step a file of this dump belongs to (``step{N}/`` under dump_path); the current one if unknown."""
        if path:
            first = os.path.relpath(path, self.config.dump_path).split(os.sep, 1)[0]
            if first.startswith("step") and first[4:].isdigit():
                return int(first[4:])
        return self.step

    def _fail(self, exc: BaseException, path: Optional[str] = None) -> None:
        """An I/O error of the dump: reported once (path, errno, what was kept), the dump off for good."""
        if not self.dump_off.off:
            self.dump_off.trip(exc, path or getattr(exc, "filename", None), self.step, self.dir)
        self._switch_off()

    def _switch_off(self) -> None:
        self.on = False
        if self.journal is not None:          # what it holds stays for repair-dump
            try:
                self.journal.close()
            except OSError:
                pass
            self.journal = None

    # --- filters and structure -------------------------------------------------------------------
    def wanted(self, key: str, closes: bool = True) -> bool:
        """list (substring) and scope (range) filters for one entry key.

        ``closes=False`` for a module's start: a module range ends at the module's end
        (:meth:`scope_ends`), after its inner calls.
        """
        if self.api_list and not any(s in key for s in self.api_list):
            return False
        if self.scope:
            if key == self.scope[0]:
                self._scope_on = True
            on = self._scope_on
            if closes:
                self.scope_ends(key)
            return on
        return True

    def scope_ends(self, key: str) -> None:
        if self.scope and key == self.scope[-1]:
            self._scope_on = False

    def scope_starts(self, key: str) -> None:
        """A module range starts at the module's own start (before its inner calls)."""
        if self.scope and key == self.scope[0]:
            self._scope_on = True

    def parent(self) -> Optional[str]:
        return self.parents[-1] if self.parents else None

    def add_construct(self, key: str, parent: Optional[str]) -> None:
        if not self.with_construct:
            return
        self.construct[key] = parent
        if self.journal is not None:
            try:
                self.journal.construct(key, parent)
            except OSError as exc:
                self._fail(exc, self.journal.path)

    def next_index(self, name: str) -> int:
        idx = self.counters.get(name, 0)
        self.counters[name] = idx + 1
        return idx

    # --- recording -------------------------------------------------------------------------------
    def _tensor_hook(self, key: str, dedupe: bool = True, keep_inputs: bool = False) -> Optional[Callable]:
        """The tensor task's saver for one call: a tensor seen unchanged before shares that file's bytes.

        Remembered as :class:`StatBatch` remembers statistics: outputs, tensors that require grad, and
        with ``keep_inputs`` every input; ``dedupe=False`` (collectives) neither uses nor remembers any.
        """
        if not self.tensor_task:
            return None
        tdir, writer, cache = self.tensor_dir, self.writer, self.cache
        saved = self._saved if dedupe and cache is not None else None
        twins: dict = {}

        def save(t: torch.Tensor, item: dict, path: tuple) -> None:
            name = fmt.data_name(key, path[0], path[1:], ".pt")
            item[fmt.DATA_NAME] = name
            full = os.path.join(tdir, name)
            if len(full) > 4096 or len(name) > 255:
                log.warning("msprobe dump: path too long, tensor file skipped: %s", name)
                return
            if cache is None:
                writer.submit_copy(full, t)
                return
            seen = saved.get(id(t)) if saved is not None else None
            if seen is not None and cache.unchanged_since(t, seen[0]):
                writer.submit(full, None, link_to=seen[1])
                return
            phase = path[0] == "output"
            twin = twins.get(id(t))     # the same tensor, unchanged, twice in this call (x * x)
            if twin is not None and twin[1] == phase and cache.unchanged_since(t, twin[0]):
                writer.submit(full, None, link_to=twin[2])
                return
            writer.submit_copy(full, t)
            mark = cache.mark(t)
            if mark is None:
                return
            twins[id(t)] = (mark, phase, full)
            if saved is not None and (phase or keep_inputs or t.requires_grad):
                if len(saved) > 65536:
                    saved.clear()
                saved[id(t)] = (mark, full)
        return save

    def begin(self, key: str, args: tuple, kwargs: dict, skip_code: Any = None, module: bool = False,
              use_cache: bool = True) -> Pending:
        """Start recording a forward call: filters, construct node, input summaries, stack.

        ``use_cache=False`` for collectives: they write into their arguments through c10d, which need
        not bump the version counter, so no statistics of theirs are reused or remembered. The inputs
        of an API call are remembered (its writes are seen, see :meth:`run_api`); a module's are not.
        """
        parent = self.parent()
        record = self.wanted(key, closes=not module) and (self.fwd_in or self.fwd_out)
        batch = enc = sid = None
        entry: dict = {}
        if record:
            keep = use_cache and not module
            batch = StatBatch(self.md5, self.cache if use_cache else None, keep)
            enc = Encoder(batch, self._tensor_hook(key, dedupe=use_cache, keep_inputs=keep))
            if self.fwd_in:
                entry[fmt.INPUT_ARGS] = enc.args(args)
                entry[fmt.INPUT_KWARGS] = enc.kwargs(kwargs)
            sid = self.stack_id(stacklib.capture(skip_code))
        return Pending(key, batch, enc, entry, sid, parent, record, self.fwd_out)

    def finish(self, p: Pending, result: Any, as_list: Optional[list] = None, extra: Optional[dict] = None) -> None:
        """End a forward call: output summaries, one host transfer, record."""
        self.add_construct(p.key, p.parent)
        if not p.record:
            return
        if p.want_out:
            p.entry[fmt.OUTPUT] = p.enc.outputs(as_list if as_list is not None else result)
        if extra:
            for name, value in extra.items():
                p.entry[name] = value(p.enc) if callable(value) else value
        p.batch.resolve()
        self.record(p.key, p.entry, p.sid)

    def stack_id(self, frames: tuple) -> int:
        """The stack.json group of a call stack (new groups are journalled at once).

        ``stack.capture`` hands out one tuple object per call site, so a group is found by that
        object's identity first (the map keeps the tuple alive, so its id cannot be reused) and by
        value (hashing every frame) only the first time in a step.
        """
        hit = self._sid_by_id.get(id(frames))
        if hit is not None and hit[0] is frames:
            return hit[1]
        group = self.stack_groups.get(frames)
        if group is None:
            lines = self._stack_lines.get(frames)
            if lines is None:
                lines = self._stack_lines[frames] = stacklib.format_frames(frames)
            group = self.stack_groups[frames] = [len(self.stack_groups), [], lines]
            self._groups_by_id[group[0]] = group
            if self.journal is not None:
                try:
                    self.journal.stack(group[0], lines)
                except OSError as exc:
                    self._fail(exc, self.journal.path)
        self._sid_by_id[id(frames)] = (frames, group[0])
        return group[0]

    def record(self, key: str, entry: dict, sid: Optional[int] = None) -> None:
        if not entry:
            return
        self.record_text(key, entry_text(entry), sid)

    def record_text(self, key: str, text: str, sid: Optional[int] = None) -> None:
        """Record an entry by its finished dump.json text: stack group, step state, journal."""
        if sid is not None:
            self._groups_by_id[sid][1].append(key)
        self.texts[key] = text
        if self.journal is not None:
            try:
                self.journal.entry_text(key, text, sid)
            except OSError as exc:
                self._fail(exc, self.journal.path)

    def record_backward(self, key: str, grad_outputs: Any, grad_inputs: Any, drop_all_none: bool = False,
                        parent: Any = "") -> None:
        """A backward entry: ``input`` = grads of the forward outputs, ``output`` = grads of its inputs."""
        self.add_construct(key, self.parent() if parent == "" else parent)
        if not self.wanted(key) or not (self.bwd_in or self.bwd_out):
            return
        if self.plain_backward:
            gin, gout = tuple(grad_outputs), tuple(grad_inputs)
            if drop_all_none and all(g is None for g in gout):
                gout = ()
            if all(map(plain_value, gin)) and all(map(plain_value, gout)):
                batch = StatBatch(self.md5, self.cache)
                hook = self._tensor_hook(key)
                inputs = list_text([item_text(v, batch, False, hook, ("input", i)) for i, v in enumerate(gin)])
                outputs = list_text([item_text(v, batch, True, hook, ("output", i)) for i, v in enumerate(gout)])
                self.record_text(key, backward_text(inputs, outputs))
                return
        batch = StatBatch(self.md5, self.cache)
        enc = Encoder(batch, self._tensor_hook(key))
        entry: dict = {}
        if self.bwd_in:
            entry[fmt.INPUT] = enc.outputs(tuple(grad_outputs), "input")
        if self.bwd_out:
            grads = tuple(grad_inputs)
            if drop_all_none and all(g is None for g in grads):
                grads = ()
            entry[fmt.OUTPUT] = enc.outputs(grads, "output")
        batch.resolve()
        self.record(key, entry)

    # --- API calls -------------------------------------------------------------------------------
    def run_api(self, prefix: str, api: str, func: Callable, args: tuple, kwargs: dict,
                collective: bool = False) -> Any:
        """Run one captured API call and record it (forward now, backward through an autograd hook)."""
        base = f"{prefix}.{api}"
        counters = self.counters          # next_index(), inlined: this runs for every call
        idx = counters.get(base, 0)
        counters[base] = idx + 1
        if not self.on or os.getpid() != self.pid:
            return func(*args, **kwargs)
        keep = self.risk_keeps.get(base)
        if keep is None:
            keep = self.risk_keeps[base] = risk.keeps(self.risk_level, api)
        if not keep:
            return risk.run_skipped(self, base, idx, api, func, args, kwargs)
        pending = plain = autocast = None
        try:
            autocast = amp.state(args, kwargs)
            rec_args, rec_kwargs = args, kwargs
            if isinstance(func, types.FunctionType):
                rec_args, rec_kwargs = callargs.as_written(func, args, kwargs, prefix == "Tensor")
            if self.plain and not collective and all(map(plain_value, rec_args)) \
                    and all(map(plain_value, rec_kwargs.values())):
                plain = self._plain_begin(base, idx, func, rec_args, rec_kwargs)
            else:
                pending = self.begin(f"{base}.{idx}.{fmt.FORWARD}", rec_args, rec_kwargs,
                                     getattr(func, "__code__", None), use_cache=not collective)
        except Exception as exc:  # noqa: BLE001 - the dumper must never break training
            self._internal_error(exc)
        # a dropout's tensor arguments with their autograd nodes before the call: an output that is an argument
        # with the same node (p=0 returns its input) got no node from this call, so it has no backward entry
        before = [(a, a.grad_fn) for a in args if type(a) is torch.Tensor] \
            if "dropout" in base and (plain is not None or pending is not None) and not collective else ()
        if collective:
            self.busy = True
            try:
                result = func(*args, **kwargs)
                if kwargs.get("async_op") and hasattr(result, "wait"):
                    result.wait()
            finally:
                self.busy = False
        else:
            result = func(*args, **kwargs)
        cache = self.cache
        if cache is not None and (collective or statcache.writes_of(api) or "out" in kwargs or "inplace" in kwargs):
            try:
                cache.wrote(statcache.written_tensors(api, args, kwargs, collective))
            except Exception:  # noqa: BLE001 - forget everything rather than risk a stale entry
                self.forget_reuse()
        if plain is not None:
            self._plain_finish(plain, result, base, idx, autocast, before)
            return result
        if pending is None:
            return result
        try:
            after = [*args, *kwargs.values()] if collective else None
            self.finish(pending, result, as_list=after, extra={fmt.AUTOCAST: autocast} if autocast else None)
            if not collective:
                self._hook_backward(result, base, idx, before)
        except Exception as exc:  # noqa: BLE001
            self._internal_error(exc)
        return result

    def _plain_begin(self, base: str, idx: int, func: Callable, rec_args: tuple, rec_kwargs: dict) -> tuple:
        """:meth:`begin` for a call whose arguments are all plain, rendered as they are encoded.

        The same statistics (one :class:`StatBatch`, so the cache and the same-tensor-twice rule hold)
        and byte-for-byte the same entry text as the general path, without building the entry's dicts
        and walking them again.
        """
        key = f"{base}.{idx}.{fmt.FORWARD}"
        parent = self.parents[-1] if self.parents else None
        batch = StatBatch(self.md5, self.cache, True)
        hook = self._tensor_hook(key, keep_inputs=True)
        if hook is None:
            text = batch.text             # tensors straight to StatBatch.text: the common case, per call
            in_args = list_text([text(v, v.requires_grad, ITEM_LEVEL) if type(v) is torch.Tensor
                                 else item_text(v, batch, False) for v in rec_args])
            in_kwargs = dict_text({str(k): item_text(v, batch, False) for k, v in rec_kwargs.items()})
        else:
            in_args = list_text([item_text(v, batch, False, hook, ("input", i)) for i, v in enumerate(rec_args)])
            in_kwargs = dict_text({str(k): item_text(v, batch, False, hook, ("kwargs", k))
                                   for k, v in rec_kwargs.items()})
        sid = self.stack_id(stacklib.capture(getattr(func, "__code__", None)))
        return key, parent, batch, hook, in_args, in_kwargs, sid

    def _plain_finish(self, plain: tuple, result: Any, base: str, idx: int, autocast: Optional[dict] = None,
                      before: Any = ()) -> None:
        """:meth:`finish` for :meth:`_plain_begin`; a result that is not plain goes through the Encoder."""
        key, parent, batch, hook, in_args, in_kwargs, sid = plain
        try:
            if self.with_construct:
                self.add_construct(key, parent)
            if isinstance(result, (tuple, list)) and not isinstance(result, torch.Size):
                values = result
            else:
                values = (result,)
            if not all(map(plain_value, values)):
                output = json_render.dumps_json_fast(Encoder(batch, hook).outputs(result), ENTRY_LEVEL + 1)
            elif hook is None:
                text = batch.text
                output = list_text([text(v, True, ITEM_LEVEL) if type(v) is torch.Tensor
                                    else item_text(v, batch, True) for v in values])
            else:
                output = list_text([item_text(v, batch, True, hook, ("output", i)) for i, v in enumerate(values)])
            if batch.pending:
                batch.resolve()
            text = forward_text(in_args, in_kwargs, output)
            self.record_text(key, amp.with_state(text, autocast) if autocast else text, sid)
            self._hook_backward(result, base, idx, before)
        except Exception as exc:  # noqa: BLE001 - the dumper must never break training
            self._internal_error(exc)

    def _hook_backward(self, result: Any, base: str, idx: int, before: Any = (), on_backward: Any = None) -> None:
        if not (self.bwd_in or self.bwd_out or self.with_construct):
            return
        t = first_tensor(result)
        if t is None or t.grad_fn is None:
            return
        if any(t is a and t.grad_fn is node for a, node in before):
            return          # a dropout that returned its argument as it was: no backward entry, as in msprobe
        t.grad_fn.register_hook(functools.partial(on_backward or self._on_api_backward,
                                                  f"{base}.{idx}.{fmt.BACKWARD}", self.generation))

    def _on_api_backward(self, key: str, generation: int, grad_inputs: tuple, grad_outputs: tuple) -> None:
        if not self.on or generation != self.generation or os.getpid() != self.pid:
            return
        prev, self.busy = self.busy, True
        try:
            self.record_backward(key, grad_outputs, grad_inputs)
        except Exception as exc:  # noqa: BLE001
            self._internal_error(exc)
        finally:
            self.busy = prev

    def _internal_error(self, exc: BaseException) -> None:
        if isinstance(exc, OSError):          # a write of the dump failed (a tensor file written from here)
            self._fail(exc)
            return
        log.warning("msprobe dump: an entry could not be recorded (%s: %s); training is not affected.",
                    type(exc).__name__, exc)
