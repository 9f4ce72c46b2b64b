"""risk_level: which APIs a PyTorch dump records, as msprobe 26.2 decides it (its own dumps of a TransformerEncoder
step at each level are compared in test_dumper_msprobe_names.py); the key's checking, for PyTorch and MindSpore."""
from __future__ import annotations

import json
import warnings

import pytest
import torch

from dumpers import config as shared
from dumpers.config import ConfigError, ConfigWarning
from dumpers.torch_dump import PrecisionDebugger, risk


@pytest.fixture(autouse=True)
def fresh_debugger():
    PrecisionDebugger.reset()
    yield
    PrecisionDebugger.reset()


def _dump(tmp_path, fn, level="L1", model=None, **extra):
    """Dump one window around ``fn()``: (dump.json's data, stack.json's keys, construct.json)."""
    cfg = {"task": "statistics", "dump_path": str(tmp_path / "dump"), "level": level, **extra}
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    dbg = PrecisionDebugger(config_path=str(path), model=model)
    dbg.start()
    fn()
    dbg.stop()
    dbg.step()
    PrecisionDebugger.reset()
    rank = tmp_path / "dump" / "step0" / "rank"
    stack = json.loads((rank / "stack.json").read_text())
    return (json.loads((rank / "dump.json").read_text())["data"], [k for g in stack.values() for k in g[0]],
            json.loads((rank / "construct.json").read_text()))


def _step():
    torch.manual_seed(0)
    w = torch.randn(6, 3, requires_grad=True)
    x = torch.randn(3, 4)
    index = torch.tensor([[0], [1], [2], [0]])
    return lambda: (torch.cat([x, x]).transpose(0, 1).reshape(4, 6).clamp(-1, 1) @ w + 1).gather(1, index) \
        .sum().backward()


@pytest.mark.parametrize("extra, kept", [
    ({}, ["Tensor.__matmul__.0", "Tensor.__add__.0", "Tensor.gather.0", "Tensor.sum.0"]),
    ({"risk_level": "FOCUS"}, ["Tensor.__matmul__.0", "Tensor.__add__.0", "Tensor.gather.0", "Tensor.sum.0"]),
    ({"risk_level": "CORE"}, ["Tensor.__matmul__.0", "Tensor.gather.0"]),
    ({"risk_level": "ALL"}, ["Torch.cat.0", "Tensor.transpose.0", "Tensor.reshape.0", "Tensor.clamp.0",
                             "Tensor.__matmul__.0", "Tensor.__add__.0", "Tensor.gather.0", "Tensor.sum.0"]),
    ({"risk_level": None}, ["Torch.cat.0", "Tensor.transpose.0", "Tensor.reshape.0", "Tensor.clamp.0",
                            "Tensor.__matmul__.0", "Tensor.__add__.0", "Tensor.gather.0", "Tensor.sum.0"]),
    ({"risk_level": "CORE", "statistics": {"list": ["transpose", "sum"]}}, ["Tensor.transpose.0", "Tensor.sum.0"]),
])
def test_each_level_records_msprobes_apis(tmp_path, extra, kept) -> None:
    """The default and "FOCUS" leave out cat, transpose, reshape and clamp; "CORE" keeps the matrix product and
    gather (a collective's name too, so core in msprobe 26.2); "ALL" and an empty value keep everything; a list
    replaces the rule (msprobe applies risk_level only without scope and list). The stack groups name exactly
    the recorded calls."""
    data, stacked, _ = _dump(tmp_path, _step(), **extra)
    assert [k for k in data if k.endswith(".forward")] == [f"{k}.forward" for k in kept]
    assert stacked == [f"{k}.forward" for k in kept]


def test_a_skipped_call_keeps_its_construct_nodes_at_mix(tmp_path) -> None:
    """At mix, construct.json is the same at every level (as msprobe 26.2 writes it: checked by running it on a
    TransformerEncoder step at the default and at "ALL"); dump.json at the default is "ALL"'s without the
    low-risk entries, in the same order, with the same statistics."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
    x = torch.randn(2, 3, 8)

    def step():
        model(x).pow(2).mean().backward()

    focus = _dump(tmp_path / "focus", step, level="mix", model=model)
    model.zero_grad()
    full = _dump(tmp_path / "all", step, level="mix", model=model, risk_level="ALL")
    assert focus[2] == full[2] and list(focus[2]) == list(full[2])
    low = [k for k in full[0] if k.startswith("Tensor.transpose.")]
    assert low and any(k.endswith(".backward") for k in low) and all(k in focus[2] for k in low)
    assert focus[0] == {k: v for k, v in full[0].items() if k not in low}
    assert list(focus[0]) == [k for k in full[0] if k not in low]
    assert focus[1] == [k for k in full[1] if k not in low]


def test_a_skipped_write_ends_the_reuse_of_statistics(tmp_path) -> None:
    """A low-risk call that writes a tensor (``torch.cat(..., out=t)``) is not recorded, and the next recorded
    call that reads ``t`` summarises its new values."""
    a = torch.ones(2)
    t = torch.zeros(4)

    def run():
        t.sum()
        torch.cat([a, a + 1], out=t)
        t.sum()

    data, _, _ = _dump(tmp_path, run)
    assert not [k for k in data if k.startswith("Torch.cat.")]
    assert data["Tensor.sum.0.forward"]["input_args"][0]["Max"] == 0.0
    assert data["Tensor.sum.1.forward"]["input_args"][0]["Max"] == 2.0


def test_the_level_is_decided_once_per_api_name(tmp_path, monkeypatch) -> None:
    """Each API name is sorted once per dump, however often it is called: a skipped call costs a dict lookup."""
    seen = []
    original = risk.keeps
    monkeypatch.setattr(risk, "keeps", lambda level, api: seen.append(api) or original(level, api))
    x = torch.randn(3, 3)

    def run():
        for _ in range(50):
            x.transpose(0, 1).sum()

    data, _, _ = _dump(tmp_path, run)
    assert sorted(seen) == ["sum", "transpose"]
    assert len(data) == 50 and all(k.startswith("Tensor.sum.") for k in data)


def test_msprobe_26_2s_sorting_of_names() -> None:
    """Facts of msprobe 26.2's table, by API name whatever the prefix."""
    assert risk.level_of("transpose") == risk.level_of("to") == risk.level_of("cat") == "LOW"
    assert risk.level_of("matmul") == risk.level_of("linalg.matmul") == risk.level_of("layer_norm") == "CORE"
    assert risk.level_of("all_reduce") == risk.level_of("npu_fusion_attention") == risk.level_of("scatter") == "CORE"
    assert risk.level_of("linear") == risk.level_of("relu") == risk.level_of("add.Tensor") == "FOCUS"
    assert not risk.keeps("CORE", "linear") and risk.keeps("FOCUS", "linear") and not risk.keeps("FOCUS", "view")


@pytest.mark.parametrize("framework", ["pytorch", "mindspore"])
def test_the_key_is_checked_and_its_default_is_msprobes(framework) -> None:
    """Absent: "FOCUS" (msprobe 26.2's default); null and "": "ALL" (as msprobe takes them); the three levels as
    written, without a warning (MindSpore too: msprobe's MindSpore dumper checks the value and dumps every API)."""
    base = {"task": "statistics", "dump_path": "./d", "level": "L1"}
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        assert shared.parse_config(base, framework=framework).risk_level == "FOCUS"
        for value, level in ((None, "ALL"), ("", "ALL"), ("ALL", "ALL"), ("CORE", "CORE"), ("FOCUS", "FOCUS")):
            assert shared.parse_config({**base, "risk_level": value}, framework=framework).risk_level == level


@pytest.mark.parametrize("value, hint", [("LOW", None), ("focus", "did you mean 'FOCUS'?"), (3, None),
                                         (False, None), (["ALL"], None)])
def test_a_bad_value_is_one_clear_error(tmp_path, value, hint) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path), "risk_level": value}))
    with pytest.raises(ConfigError) as info:
        PrecisionDebugger(config_path=str(path))
    message = str(info.value)
    assert str(path) in message and "'risk_level'" in message and repr(value) in message
    assert "['CORE', 'FOCUS', 'ALL']" in message and "\n" not in message
    assert hint is None or hint in message
