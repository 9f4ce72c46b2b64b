"""Attribution of a step's drift to its API calls, on real Hugging Face models with planted kernel faults.

A fault is planted by overriding one aten op's CPU kernel through ``torch.library`` for bfloat16 only (the
bench runs in float32, so it stays correct), and restored when the library object is released.
"""
from __future__ import annotations

import json
import math
import random
import sys

import numpy as np
import pytest
import torch

import zoo
from dumpers.torch_dump import PrecisionDebugger
from pytest_msprobe.attribution import StepError, attribute
from pytest_msprobe.attribution.errors import is_beyond
from pytest_msprobe.attribution.mode import REASON_INPLACE_VIEW, REASON_NO_FLOAT, REASON_RANDOM, CorrectionMode
from pytest_msprobe.attribution.report import HEADER, NOT_CORRECTED

pytestmark = pytest.mark.filterwarnings("ignore:.*Overriding a previously registered kernel.*:UserWarning",
                                        "ignore::UserWarning")

FAULT = 1.05           # the planted kernels' outputs are 5% too large


def _bf16_only(correct):
    def kernel(x, *rest, **kw):
        y = correct(x.float(), *rest, **kw)
        return (y * FAULT if x.dtype == torch.bfloat16 else y).to(x.dtype)
    return kernel


@pytest.fixture
def plant():
    """``plant(op, correct)``: aten ``op``'s CPU kernel made 5% too large in bfloat16 for the test's duration."""
    libs = []

    def _plant(op: str, correct) -> None:
        lib = torch.library.Library("aten", "IMPL")
        lib.impl(op, _bf16_only(correct), "CPU")
        libs.append(lib)

    yield _plant
    libs.clear()               # the library objects die here: the original kernels are back


def _step(model, batch, loss_fn):
    def step():
        loss = loss_fn(model, batch)
        loss.backward()
        return loss
    return step


def _model(build, **config):
    torch.manual_seed(0)
    model, batch, loss_fn = build(initializer_range=0.2, **config)
    model = model.to(torch.bfloat16)
    return model, _step(model, batch, loss_fn)


def _bound(n: int, k: int) -> float:
    """The search's cost: 3 runs to start (two plain, the ideal), 2 k log2 n, then k confirmations and one
    run of the culprits together."""
    return 3 + 2 * k * math.ceil(math.log2(n)) + k + 1


def _check_planted(result, api: str) -> None:
    planted = [r for r in result.rows if r.name.startswith(api)]
    assert planted, [r.name for r in result.rows]
    top = result.rows[:len(planted)]
    assert all(r.name.startswith(api) for r in top), [(r.name, r.share) for r in result.rows]
    assert result.together_loss_share is not None and result.together_loss_share >= 0.7
    assert all(r.dominant for r in planted)
    assert all(r.multiple is not None and r.multiple > 1 for r in planted)
    assert result.runs <= _bound(result.n_candidates, len(result.culprits))


def test_llama_planted_silu_is_found(plant, tmp_path):
    model, step = _model(zoo.llama)
    plant("silu", lambda x: x * torch.sigmoid(x))
    result = attribute(step, model=model, out_dir=str(tmp_path), progress=False)
    _check_planted(result, "Functional.silu.")
    csv_file = next(tmp_path.glob("attribution_result_*.csv"))
    lines = csv_file.read_text().splitlines()
    assert lines[0].split(",") == list(HEADER)
    assert lines[1].startswith("Functional.silu.")
    html = next(tmp_path.glob("attribution_report_*.html")).read_text()
    assert "Functional.silu." in html and 'class="bar dom"' in html


def _gelu(x, approximate="none"):
    """GELU written out (the planted kernel cannot call aten::gelu: that is itself)."""
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def test_gpt2_planted_gelu_is_found(plant, tmp_path):
    model, step = _model(zoo.gpt2, activation_function="gelu", n_layer=1)
    plant("gelu", _gelu)
    result = attribute(step, model=model, out_dir=str(tmp_path), progress=False)
    _check_planted(result, "Functional.gelu.")


def test_llama_planted_matmul_is_found(plant, tmp_path):
    """The eager attention's products go through aten::bmm; a fault there is a fault in ``Torch.matmul``."""
    model, step = _model(zoo.llama, attn_implementation="eager")
    plant("bmm", lambda a, b: (a.unsqueeze(-1) * b.float().unsqueeze(-3)).sum(-2))
    result = attribute(step, model=model, candidates=["Torch.matmul.*", "Functional.*"], out_dir=str(tmp_path),
                       progress=False)
    _check_planted(result, "Torch.matmul.")


def _state(model, optimizer):
    params = [p.detach().clone() for p in model.parameters()]
    grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    opt = {k: {n: v.clone() if isinstance(v, torch.Tensor) else v for n, v in s.items()}
           for k, s in optimizer.state.items()}
    return params, grads, opt, torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()


def test_clean_step_has_no_dominant_call_and_leaves_everything_as_it_was(tmp_path):
    """GPT-2 as configured by default: its NewGELU is written with Python scalars (reflected operators)."""
    model, step = _model(zoo.gpt2, n_layer=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step()
    optimizer.step()                   # the optimizer has state, the parameters have gradients
    before = _state(model, optimizer)
    first = attribute(step, model=model, out_dir=str(tmp_path / "a"), progress=False)
    after = _state(model, optimizer)
    assert not first.dominant, [(r.name, r.share, r.multiple) for r in first.rows]
    kept = [g for g in before[1] if g is not None], [g for g in after[1] if g is not None]
    for x, y in zip(before[0] + kept[0], after[0] + kept[1]):
        assert torch.equal(x, y)
    assert [g is None for g in before[1]] == [g is None for g in after[1]]
    assert before[2].keys() == after[2].keys()
    for k in before[2]:
        for n, v in before[2][k].items():
            assert torch.equal(v, after[2][k][n]) if isinstance(v, torch.Tensor) else v == after[2][k][n]
    assert torch.equal(before[3], after[3]) and before[4] == after[4] and np.array_equal(before[5], after[5])
    second = attribute(step, model=model, out_dir=str(tmp_path / "b"), progress=False)
    rows = [next((tmp_path / d).glob("attribution_result_*.csv")).read_text() for d in ("a", "b")]
    assert rows[0] == rows[1]
    assert first.runs == second.runs


def test_names_are_the_dumpers(tmp_path):
    """Every call is named as in dump.json, reflected operators (GPT-2's ``0.5 * x``) included (a dump at
    risk_level "ALL", which records every call; the default leaves some out, the others keep their names)."""
    for build in (zoo.llama, zoo.gpt2):
        torch.manual_seed(0)
        model, batch, loss_fn = build()
        step = _step(model, batch, loss_fn)
        PrecisionDebugger.reset()
        config = tmp_path / f"{build.__name__}.json"
        config.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / build.__name__),
                                      "level": "L1", "risk_level": "ALL"}))
        dbg = PrecisionDebugger(config_path=str(config))
        dbg.start()
        step()
        dbg.stop()
        PrecisionDebugger.reset()
        data = json.loads((tmp_path / build.__name__ / "step0" / "rank" / "dump.json").read_text())["data"]
        dumped = [k[:-len(".forward")] for k in data if k.endswith(".forward")]
        mode = CorrectionMode(frozenset())
        with mode:
            step()
        assert [c.name for c in mode.log.calls] == dumped
        assert any(".__rmul__." in n for n in dumped) or build is zoo.llama


def test_calls_that_cannot_be_corrected_are_listed_with_the_reason(tmp_path):
    torch.manual_seed(0)
    w = torch.randn(8, 8, dtype=torch.bfloat16, requires_grad=True)
    x = torch.randn(4, 8, dtype=torch.bfloat16)

    def step():
        h = torch.nn.functional.dropout(x @ w, p=0.0, training=True)
        buf = torch.zeros(4, 16, dtype=torch.bfloat16)
        buf[:, :8].add_(1.0)                             # in place, on a view
        idx = torch.argmax(h, dim=1)                     # no floating-point output
        acc = torch.zeros(4, 8, dtype=torch.bfloat16)
        acc.add_(h.detach(), alpha=1 / 3)                # in place on a whole tensor: corrected
        r = torch.nn.functional.relu(h * 3, inplace=True)    # in place on a corrected output autograd tracks
        loss = (h.float().sum() + buf.float().sum() + idx.sum() + acc.float().sum() + r.float().sum()) / 10
        loss.backward()
        return loss

    result = attribute(step, parameters=[("w", w)], out_dir=str(tmp_path), progress=False)
    reasons = dict(result.uncorrectable)
    assert reasons["Functional.dropout.0"] == REASON_RANDOM
    assert reasons["Tensor.add_.0"] == REASON_INPLACE_VIEW
    assert reasons["Torch.argmax.0"] == REASON_NO_FLOAT
    assert reasons["Functional.relu.0"] == REASON_INPLACE_VIEW
    assert "Tensor.__mul__.0" not in reasons
    assert "Tensor.add_.1" not in reasons
    assert w.grad is None                                # the user's gradient (none) is given back
    mode = CorrectionMode(frozenset(["Tensor.add_.1"]))
    with mode:
        step()
    assert {c.name: c.reason for c in mode.log.calls}["Tensor.add_.1"] == ""
    text = next(tmp_path.glob("attribution_result_*.csv")).read_text()
    assert f"{NOT_CORRECTED}: {REASON_RANDOM}" in text


def test_non_deterministic_step_is_refused_with_the_figures(tmp_path):
    w = torch.ones(3, requires_grad=True)
    calls = []

    def step():
        calls.append(1)
        loss = (w * len(calls)).sum()
        loss.backward()
        return loss

    with pytest.raises(StepError, match=r"not deterministic: two plain runs gave the losses 3.0 and 6.0"):
        attribute(step, parameters=[("w", w)], out_dir=str(tmp_path), progress=False)


def test_step_that_changes_parameters_is_refused(tmp_path):
    w = torch.ones(3, requires_grad=True)

    def step():
        loss = (w * 2).sum()
        loss.backward()
        with torch.no_grad():
            w.sub_(0.1)
        return loss

    with pytest.raises(StepError, match="changed the parameters"):
        attribute(step, parameters=[("w", w)], out_dir=str(tmp_path), progress=False)


def test_cli_attributes_a_script_and_fails_ci_on_a_dominant_call(tmp_path, capsys, plant):
    from pytest_msprobe.cli import main

    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "torch.manual_seed(0)\n"
        "model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.SiLU(), torch.nn.Linear(32, 4))"
        ".to(torch.bfloat16)\n"
        "x = torch.randn(8, 16, dtype=torch.bfloat16)\n"
        "def step():\n"
        "    loss = model(x).float().square().mean()\n"
        "    loss.backward()\n"
        "    return loss\n")
    code = main(["attribute", f"{script}:step", "-o", str(tmp_path / "out"), "-q", "--device", "cpu",
                 "--fail-share", "0.5"])
    out = capsys.readouterr().out
    assert code == 0
    assert "runs of the step" in out and "dominant" in out
    assert list((tmp_path / "out").glob("attribution_result_*.csv"))
    assert main(["attribute", f"{script}:nothing", "-o", str(tmp_path / "out")]) == 2
    assert "defines no function 'nothing'" in capsys.readouterr().err
    checked = tmp_path / "accuracy_checking_result_20260101000000.csv"
    checked.write_text("API name,Forward Test Success,Backward Test Success,Message\r\n"
                       "Functional.silu.0,error,pass\r\nFunctional.linear.1,warning,pass\r\n", encoding="utf-8")
    plant("silu", lambda x: x * torch.sigmoid(x))
    code = main(["attribute", f"{script}:step", "-o", str(tmp_path / "faulty"), "-q", "--fail-share", "0.5",
                 "--check-result", str(checked)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "dominant (explains the drift and its error is beyond the rounding of a correct kernel): " \
           "Functional.silu.0" in out
    html = next((tmp_path / "faulty").glob("attribution_report_*.html")).read_text()
    flagged = html.split("Flagged APIs and their share")[1]
    assert "Functional.silu.0</td><td>forward error, backward pass" in flagged
    assert "Functional.linear.1</td><td>forward warning, backward pass" in flagged


if __name__ == "__main__":       # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def test_cli_device_backends_registered_by_a_plugin(tmp_path, capsys):
    from pytest_msprobe.cli import main

    script = tmp_path / "train.py"
    script.write_text("import torch\nw = torch.ones(4, dtype=torch.bfloat16, requires_grad=True)\n"
                      "def step():\n    loss = torch.nn.functional.silu(w * 1.5).float().sum()\n"
                      "    loss.backward()\n    return loss\n")
    plugin = tmp_path / "conftest.py"
    synced = tmp_path / "synced.txt"
    plugin.write_text("from pytest_msprobe.devices import CpuBackend\n"
                      "class Synced(CpuBackend):\n    name = 'synced-cpu'\n"
                      f"    def synchronize(self, index):\n        open({str(synced)!r}, 'a').write('.')\n"
                      "def pytest_msprobe_register_devices(registry):\n    registry.register(Synced())\n")
    out = str(tmp_path / "out")
    assert main(["attribute", f"{script}:step", "-o", out, "-q", "--device", "synced-cpu",
                 "--device-plugin", str(plugin)]) == 0
    runs = int(capsys.readouterr().out.split(" runs of the step")[0].rsplit("\n", 1)[-1])
    assert synced.read_text() == "." * runs                   # the backend synchronised after every run
    assert main(["attribute", f"{script}:step", "-o", out, "-q", "--device", "ms-cpu"]) == 2
    assert "runs MindSpore calls" in capsys.readouterr().err
    assert main(["attribute", f"{script}:step", "-o", out, "-q", "--device", "tpu"]) == 2
    assert "unknown device type 'tpu'" in capsys.readouterr().err


def _operators(x, s):
    b = x > 0
    return [0.5 * x, x * 0.5, s * x, x * s, math.sqrt(2.0) * x, x * math.sqrt(2.0), 1.0 + x, x + 1.0,
            s * (x + 1), (x + 1) * s, True | b, b ^ False, x * x, 2 + x * 3]


def test_reflected_operators_are_named_as_the_dumper_names_them(tmp_path):
    x = torch.randn(4)
    PrecisionDebugger.reset()
    dbg = PrecisionDebugger(dump_path=str(tmp_path), task="statistics", level="L1")
    dbg.start()
    _operators(x, 0.25)
    dbg.stop()
    PrecisionDebugger.reset()
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    dumped = [k[:-len(".forward")] for k in data if k.endswith(".forward")]
    mode = CorrectionMode(frozenset())
    with mode:
        _operators(x, 0.25)
    assert [c.name for c in mode.log.calls] == dumped
    assert sum(".__r" in n for n in dumped) >= 6


def test_llama_planted_silu_backward_is_found_and_forward_only_misses_it(plant, tmp_path):
    """A fault in the backward kernel alone: the bench's backward of a corrected call finds it."""
    model, step = _model(zoo.llama)

    def silu_backward(grad, x):
        s = torch.sigmoid(x)
        return grad.float() * s * (1 + x * (1 - s))

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("silu_backward", lambda g, x: (lambda y: (y * FAULT if x.dtype == torch.bfloat16 else y).to(x.dtype))(
        silu_backward(g, x.float())), "CPU")
    try:
        result = attribute(step, model=model, out_dir=str(tmp_path), progress=False, write=False)
        silu = [r for r in result.rows if r.name.startswith("Functional.silu.")]
        assert len(silu) == 2 and result.rows[:2] == silu, [(r.name, r.share) for r in result.rows]
        assert all(r.loss_share == 0.0 and not is_beyond(r.multiple) and is_beyond(r.backward_multiple) for r in silu)
        assert all(r.message.startswith("backward: gradient of input 0") for r in silu)
        assert result.together_share is not None and result.together_share >= 0.7     # of the gradient drift
        blind = attribute(step, model=model, out_dir=str(tmp_path), progress=False, write=False, backward=False)
        assert not any(r.name.startswith("Functional.silu.") for r in blind.rows if (r.share or 0) > 0.1)
    finally:
        del lib
