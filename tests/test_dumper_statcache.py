"""Statistics reused for tensors seen again unchanged: the same dump bytes as without reuse, and every write
the cache must see (in-place calls, ``.data`` aliases, views, ``out=``, batch norm) ends the reuse."""
from __future__ import annotations

import json
import os
import re

import pytest
import torch

import zoo
from dumpers.torch_dump import PrecisionDebugger, stat_kernel
from dumpers.torch_dump import stats as stats_mod
from dumpers.torch_dump.statcache import StatCache

RANK = os.path.join("step0", "rank")


@pytest.fixture(autouse=True)
def fresh_debugger():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    PrecisionDebugger.reset()
    yield
    PrecisionDebugger.reset()
    torch.set_num_threads(threads)


class Counting:
    """Counts the elements the statistics kernels read (the one-pass kernel and the fallback path)."""

    def __init__(self, monkeypatch):
        self.elements = 0
        orig_fast, orig_cpu = stat_kernel.summarize_memory, stats_mod._cpu_numbers

        def fast(address, n, dtype):
            self.elements += n
            return orig_fast(address, n, dtype)

        def cpu(t, kind):
            if not (kind == "float" and t.dtype in stats_mod._ONE_PASS):
                self.elements += t.numel()
            return orig_cpu(t, kind)

        monkeypatch.setattr(stat_kernel, "summarize_memory", fast)
        monkeypatch.setattr(stats_mod, "_cpu_numbers", cpu)


def _files(root) -> dict:
    """Every file of a dump by relative path; a tensor file's storage key (a pointer value) masked."""
    out = {}
    for d, _, names in os.walk(root):
        for name in names:
            path = os.path.join(d, name)
            with open(path, "rb") as fh:
                raw = fh.read()
            if name.endswith(".pt"):
                raw = re.sub(rb"X[\x01-\x20]\x00\x00\x00\d{1,32}", b"<key>", raw)
            out[os.path.relpath(path, root)] = raw
    return out


def _dump(tmp_path, tag, monkeypatch, reuse, fn, task="statistics", summary="statistics", level="L1"):
    monkeypatch.setenv("MSPROBE_DUMP_STAT_CACHE", "1" if reuse else "0")
    PrecisionDebugger.reset()
    config = tmp_path / f"{tag}.json"
    out = tmp_path / tag
    config.write_text(json.dumps({"task": task, "level": level, "dump_path": str(out),
                                  task: {"summary_mode": summary}}))
    counter = Counting(monkeypatch)
    dbg = PrecisionDebugger(config_path=str(config))
    assert (dbg.session.cache is not None) == reuse
    fn(dbg)
    dbg.flush()
    PrecisionDebugger.reset()
    monkeypatch.undo()
    return out, counter.elements


@pytest.mark.parametrize("name,task,summary,level", [
    ("llama", "statistics", "statistics", "L1"), ("llama", "tensor", "statistics", "L1"),
    ("bert", "statistics", "md5", "mix"), ("resnet", "statistics", "statistics", "L1")])
def test_a_real_step_dumps_the_same_bytes_with_and_without_reuse(tmp_path, monkeypatch, name, task, summary, level):
    def step(dbg):
        zoo.train_step(name, dbg)

    (on, read_on), (off, read_off) = [_dump(tmp_path, tag, monkeypatch, tag == "on", step, task, summary, level)
                                      for tag in ("on", "off")]       # one call site: the same stacks
    files_on, files_off = _files(on), _files(off)
    assert sorted(files_on) == sorted(files_off)
    text_on = files_on[os.path.join(RANK, "dump.json")].replace(str(on).encode(), b"<dir>")
    text_off = files_off[os.path.join(RANK, "dump.json")].replace(str(off).encode(), b"<dir>")
    assert text_on == text_off
    for rel in files_on:
        if not rel.endswith("dump.json"):
            assert files_on[rel] == files_off[rel], rel
    assert read_on < read_off            # reuse did happen: fewer elements read


def _items(out, key):
    data = json.loads((out / RANK / "dump.json").read_text())["data"]
    return data[key]["input_args"]


def _both(tmp_path, monkeypatch, fn):
    """The scenario dumped with reuse and without: the dump.json texts must be equal; the data returned."""
    on, off = [_dump(tmp_path, tag, monkeypatch, tag == "on", fn)[0] for tag in ("on", "off")]
    text_on = (on / RANK / "dump.json").read_text()
    assert text_on == (off / RANK / "dump.json").read_text()
    return on


def _window(setup, body):
    """One dump window over ``body(*setup())``: every run starts from freshly made (seeded) tensors."""
    def fn(dbg):
        torch.manual_seed(5)
        state = setup()
        dbg.start()
        body(*state)
        dbg.stop()
        dbg.step()
    return fn


def test_a_write_through_a_data_alias_by_a_captured_call_ends_reuse(tmp_path, monkeypatch):
    versions = []

    def body(p):
        torch.relu(p)
        before = p._version
        p.data.mul_(3)                   # p's own version counter does not move
        versions.append(p._version - before)
        torch.relu(p)

    out = _both(tmp_path, monkeypatch, _window(lambda: (torch.nn.Parameter(torch.randn(64, 8)),), body))
    assert versions == [0, 0]
    a, b = _items(out, "Torch.relu.0.forward")[0], _items(out, "Torch.relu.1.forward")[0]
    assert b["Max"] != a["Max"]


@pytest.mark.parametrize("write", ["copy_", "zero_", "setitem", "swap", "out"])
def test_writes_by_calls_that_are_not_recorded_and_swapped_data_end_reuse(tmp_path, monkeypatch, write):
    def body(x):
        torch.relu(x)
        alias = x.data
        if write == "copy_":
            alias.copy_(torch.full((64, 8), 5.0))
        elif write == "zero_":
            alias.zero_()
        elif write == "setitem":
            alias[0, 0] = 99.0
        elif write == "swap":
            x.data = torch.full((64, 8), 7.0)
        else:
            torch.add(torch.ones(64, 8), 10.0, out=alias)
        torch.relu(x)

    out = _both(tmp_path, monkeypatch, _window(lambda: (torch.randn(64, 8),), body))
    a, b = _items(out, "Torch.relu.0.forward")[0], _items(out, "Torch.relu.1.forward")[0]
    assert (a["Max"], a["Mean"]) != (b["Max"], b["Mean"])


def test_views_share_statistics_and_see_writes_through_each_other(tmp_path, monkeypatch):
    def body(x):
        y = torch.relu(x)
        torch.sigmoid(y.t())             # a transpose of a remembered tensor: its statistics
        torch.sigmoid(y.reshape(-1))     # a reshape: the same
        y.view(-1)[3] = 50.0             # a write through a view bumps the base's version
        torch.sigmoid(y.t())
        torch.sigmoid(y[:, :4])          # not one dense block: computed

    out = _both(tmp_path, monkeypatch, _window(lambda: (torch.randn(32, 16),), body))
    first, after = _items(out, "Torch.sigmoid.0.forward")[0], _items(out, "Torch.sigmoid.2.forward")[0]
    assert after["Max"] == 50.0 and first["Max"] != 50.0
    assert _items(out, "Torch.sigmoid.1.forward")[0]["Max"] == first["Max"]


def test_batch_norm_running_statistics_are_read_afresh(tmp_path, monkeypatch):
    def body(bn, x):
        torch.relu(bn.running_mean)      # no version bump when batch_norm updates it
        bn(x)
        torch.relu(bn.running_mean)

    out = _both(tmp_path, monkeypatch, _window(lambda: (torch.nn.BatchNorm1d(8).train(), torch.randn(16, 8) + 3),
                                               body))
    a, b = _items(out, "Torch.relu.0.forward")[0], _items(out, "Torch.relu.1.forward")[0]
    assert a["Max"] == 0.0 and b["Max"] > 0.0


def test_nothing_is_reused_across_a_stop(tmp_path, monkeypatch):
    def fn(dbg):
        torch.manual_seed(5)
        x = torch.randn(64, 8)
        dbg.start()
        torch.relu(x)
        dbg.stop()
        x.data.copy_(torch.full((64, 8), 2.0))   # while the dump is off: not watched
        dbg.start()
        torch.relu(x)
        dbg.stop()
        dbg.step()

    out = _both(tmp_path, monkeypatch, fn)
    assert _items(out, "Torch.relu.1.forward")[0]["Max"] == 2.0


def test_an_input_seen_again_is_read_once(monkeypatch):
    cache = StatCache()
    counter = Counting(monkeypatch)
    g = torch.randn(1000)
    first = stats_mod.StatBatch(cache=cache, keep_inputs=True).add(g)
    again = stats_mod.StatBatch(cache=cache, keep_inputs=True).add(g)
    assert counter.elements == 1000 and first == again
    not_kept = StatCache()
    stats_mod.StatBatch(cache=not_kept).add(g)       # a module's input: not remembered
    stats_mod.StatBatch(cache=not_kept).add(g)
    assert counter.elements == 3000


def test_statistics_read_before_a_write_are_not_remembered_after_it():
    """Accelerator statistics are read at the call and filled in after it: a write the call made in between
    (batch norm's running statistics) must win over the late remembering."""
    cache, t = StatCache(), torch.randn(100)
    stats = (1.0, 0.0, 0.5, 2.0, None)
    read_at = cache.generation
    cache.wrote([t.data])                 # the call wrote t's storage through another tensor object
    cache.put(t, t._version, stats, read_at)
    assert cache.get(t, t._version) is None
    cache.put(t, t._version, stats)       # read after the write: valid
    assert cache.get(t, t._version) == stats
    read_at = cache.generation
    cache.clear()
    cache.put(t, t._version, stats, read_at)
    assert cache.get(t, t._version) is None
