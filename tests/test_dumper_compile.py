"""The dumper beside ``torch.compile``: training never stops, the loss is bit-identical, the dump says what it missed.

Most tests compile with the ``aot_eager`` backend (dynamo's tracing and AOT autograd, no code generation), so they
run without a C compiler and compile in about a second; one test uses inductor, whose generated code needs the
system C compiler at run time (skipped where none is installed: that is the training script's choice, not ours).
"""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from dumpers import format as fmt
from dumpers.torch_dump.debugger import PrecisionDebugger
from tests import zoo


@pytest.fixture(autouse=True)
def fresh():
    PrecisionDebugger.reset()
    torch.compiler.reset()
    yield
    PrecisionDebugger.reset()
    torch.compiler.reset()


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 4))


def train_mlp(backend: str, dump_path=None, task="statistics", level="L1", steps=3, dumped=(0, 2)) -> list:
    """Three SGD steps of a compiled MLP; the dumper (when given a path) on in steps ``dumped`` only."""
    model = mlp()
    compiled = torch.compile(model, backend=backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    debugger = None
    if dump_path is not None:
        debugger = PrecisionDebugger(task=task, level=level, dump_path=str(dump_path), step=list(dumped))
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(4, 8, generator=gen)
        if debugger is not None:
            debugger.start(compiled)
        loss = compiled(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(loss.detach().clone())
    if debugger is not None:
        debugger.close()
    return losses


def dump(path, step: int) -> dict:
    return json.loads((path / f"step{step}" / "rank" / fmt.DUMP_JSON).read_text())


def same_bits(a: list, b: list) -> bool:
    return len(a) == len(b) and all(torch.equal(x.view(torch.int32), y.view(torch.int32)) for x, y in zip(a, b))


@pytest.mark.parametrize("task,level", [("statistics", "L1"), ("tensor", "mix"), ("statistics", "L0")])
def test_compiled_training_goes_on_bit_identical(tmp_path, task, level):
    bare = train_mlp("aot_eager")
    torch.compiler.reset()
    with_dump = train_mlp("aot_eager", tmp_path / "dump", task=task, level=level)
    assert same_bits(bare, with_dump), (bare, with_dump)
    for step in (0, 2):           # step 2 reuses the graph compiled with the dump on in step 0
        doc = dump(tmp_path / "dump", step)
        assert doc[fmt.UNCAPTURED] == fmt.UNCAPTURED_COMPILED
        keys = list(doc["data"])
        assert not any(k.startswith(("Functional.linear", "Module.")) for k in keys), keys
        if level != "L0":         # the eager code around the compiled region: the loss and SGD's updates
            assert "Tensor.square.0.forward" in keys and "Tensor.mean.0.backward" in keys
            assert sum(k.startswith("Tensor.add_.") for k in keys) == 6
    assert not (tmp_path / "dump" / "step1").exists()


def test_force_eager_dumps_the_same_step_in_full(tmp_path):
    """torch.compiler.set_stance('force_eager') runs the compiled model eagerly: every call recorded, no note."""
    with torch.compiler.set_stance("force_eager"):
        forced = train_mlp("aot_eager", tmp_path / "dump", steps=1, dumped=(0,))
    doc = dump(tmp_path / "dump", 0)
    assert fmt.UNCAPTURED not in doc
    keys = list(doc["data"])
    assert sorted(k for k in keys if k.startswith("Functional.linear")) == [
        f"Functional.linear.{i}.{d}" for i in range(3) for d in ("backward", "forward")]
    assert "Functional.relu.1.forward" in keys
    model = mlp()          # and the step is the eager step, bit for bit
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    assert torch.equal(model(x).square().mean(), forced[0])


@pytest.mark.parametrize("task,level,amp", [("statistics", "mix", False), ("tensor", "L1", True)])
def test_compiled_hugging_face_model(tmp_path, task, level, amp):
    """GPT-2 (tests/zoo.py), compiled, one AdamW step with the dump on (and under bf16 autocast): the same loss and
    parameters as without the dump."""
    def step(debugger=None):
        torch.compiler.reset()
        model, batch, loss_fn = zoo.build("gpt2")
        compiled = torch.compile(model, backend="aot_eager")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        if debugger is not None:
            debugger.start(compiled)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(compiled, batch)
        loss.backward()
        opt.step()
        if debugger is not None:
            debugger.stop()
            debugger.step()
            debugger.close()
        return loss.detach(), [p.detach().clone() for p in model.parameters()]

    bare_loss, bare_params = step()
    loss, params = step(PrecisionDebugger(task=task, level=level, dump_path=str(tmp_path / "d")))
    assert torch.equal(bare_loss, loss)
    assert all(torch.equal(a, b) for a, b in zip(bare_params, params))
    doc = dump(tmp_path / "d", 0)
    assert doc[fmt.UNCAPTURED] == fmt.UNCAPTURED_COMPILED
    assert not any(k.startswith(("Module.", "Functional.linear", "Torch.addmm")) for k in doc["data"])
    if level != "L0":             # the optimizer's calls, eager, outside autocast
        assert any(k.startswith("Tensor.addcdiv_") for k in doc["data"])


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="inductor's generated CPU code needs a C compiler at run time")
def test_inductor(tmp_path):
    bare = train_mlp("inductor", steps=2, dumped=(0,))
    torch.compiler.reset()
    with_dump = train_mlp("inductor", tmp_path / "dump", task="tensor", level="mix", steps=2, dumped=(0,))
    assert same_bits(bare, with_dump), (bare, with_dump)
    doc = dump(tmp_path / "dump", 0)
    assert doc[fmt.UNCAPTURED] == fmt.UNCAPTURED_COMPILED
    assert "Tensor.square.0.forward" in doc["data"]
    # inductor's extern GEMMs, where this CPU's inductor calls them: the second one's input is the first one's output
    # after the ReLU inductor ran in place in its own kernel (no version bump): recorded as it was, never reused
    gemms = [k for k in doc["data"] if k.startswith("Torch.addmm.") and k.endswith(".forward")]
    for key in gemms[1:]:
        assert doc["data"][key][fmt.INPUT_ARGS][1]["Min"] >= 0, key


def test_a_compiled_wrapper_is_recognised_by_its_class_name_first():
    """The dumper asks a module's class name before it learns torch.compile's wrapper class (which costs a
    lazy import); the name it asks for is the wrapper's in the torch installed, and plain modules never match."""
    import torch._dynamo  # noqa: F401 - what transformers and any compiled training have loaded

    from dumpers.torch_dump import module_hooks

    wrapped = torch.compile(torch.nn.Linear(2, 2), backend="eager")
    assert type(wrapped).__name__ == module_hooks._WRAPPER_NAME
    assert module_hooks.is_compiled_module(wrapped)
    assert not module_hooks.is_compiled_module(torch.nn.Linear(2, 2))
