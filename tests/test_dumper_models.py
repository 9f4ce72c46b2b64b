"""The PyTorch dumper on real models: an MLP, a small transformer, a conv net; fp32, bf16, fp16."""
from __future__ import annotations

import json
import math

import pytest
import torch

from dumpers import format as fmt
from dumpers.torch_dump import PrecisionDebugger


@pytest.fixture(autouse=True)
def fresh_debugger():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)      # CPU fp16 convolution backward is not deterministic across threads
    PrecisionDebugger.reset()
    yield
    PrecisionDebugger.reset()
    torch.set_num_threads(threads)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.GELU(), torch.nn.Dropout(0.1),
                                       torch.nn.Linear(24, 3))

    def forward(self, x):
        return self.net(x)


class Transformer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(20, 16)
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, tokens):
        return self.head(self.layer(self.embed(tokens)).mean(dim=1))


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.pool = torch.nn.MaxPool2d(2)
        self.fc = torch.nn.Linear(4 * 3 * 3, 3)

    def forward(self, x):
        h = self.pool(torch.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(h, 1))


def make(kind: str, dtype: torch.dtype):
    torch.manual_seed(7)
    if kind == "mlp":
        model, x = MLP(), torch.randn(5, 12)
    elif kind == "transformer":
        model, x = Transformer(), torch.randint(0, 20, (2, 6))
    else:
        model, x = ConvNet(), torch.randn(2, 2, 6, 6)
    model = model.to(dtype)
    if x.is_floating_point():
        x = x.to(dtype)
    return model, x, torch.tensor([0, 2, 1, 1, 0][: x.shape[0]])


def train(kind, dtype, dump_path=None, task="tensor", level="L1", steps=2):
    model, x, y = make(kind, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-4)     # eps representable in fp16
    dbg = PrecisionDebugger(dump_path=dump_path, task=task, level=level, model=model) if dump_path else None
    losses = []
    for _ in range(steps):
        if dbg:
            dbg.start()
        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if dbg:
            dbg.stop()
            dbg.step()
        losses.append(loss.detach())
    if dbg:
        dbg.flush()     # stop() does not wait for the tensor files; the test reads them next
    return losses, [p.detach().clone() for p in model.parameters()]


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return a.dtype == b.dtype and torch.equal(a.view(ints), b.view(ints))


def tensor_items(value, out):
    if isinstance(value, dict):
        if value.get("type") == fmt.TORCH_TENSOR_TYPE:
            out.append(value)
        for v in value.values():
            tensor_items(v, out)
    elif isinstance(value, list):
        for v in value:
            tensor_items(v, out)
    return out


CASES = [("mlp", torch.float32), ("mlp", torch.bfloat16), ("transformer", torch.float32),
         ("transformer", torch.bfloat16), ("conv", torch.float32), ("conv", torch.float16)]


@pytest.mark.parametrize("kind, dtype", CASES, ids=[f"{k}-{str(d)[6:]}" for k, d in CASES])
def test_real_model_dump(tmp_path, kind, dtype):
    bare_losses, bare_params = train(kind, dtype)
    losses, params = train(kind, dtype, str(tmp_path))
    # training is untouched: bit-identical losses and parameters (dropout included)
    assert all(bitwise_equal(a, b) for a, b in zip(bare_losses, losses))
    assert all(bitwise_equal(a, b) for a, b in zip(bare_params, params))
    assert all(torch.isfinite(v).all() for v in losses)
    for step in (0, 1):
        rank_dir = tmp_path / f"step{step}" / "rank"
        dump = json.loads((rank_dir / "dump.json").read_text())
        assert dump["task"] == "tensor" and dump["level"] == "L1" and dump["framework"] == "pytorch"
        data = dump["data"]
        assert data
        names = {fmt.parse_entry_key(k).api_call: fmt.parse_entry_key(k) for k in data}
        assert names
        # every forward of the forward pass whose output takes part in autograd has its backward entry
        keys = list(data)
        first_backward = next(i for i, k in enumerate(keys) if k.endswith(".backward"))
        for key in keys[:first_backward]:
            entry, parsed = data[key], fmt.parse_entry_key(key)
            outs = tensor_items(entry.get("output", []), [])
            if outs and outs[0]["requires_grad"] and outs[0]["dtype"].startswith("torch.float"):
                assert f"{parsed.api_call}.backward" in data, key
        # statistics equal a direct computation on the saved tensor
        items = tensor_items(data, [])
        assert items
        for item in items:
            t = torch.load(rank_dir / "dump_tensor_data" / item["data_name"])
            assert str(t.dtype) == item["dtype"] and list(t.shape) == item["shape"]
            if t.is_floating_point() and t.numel():
                assert t.max().item() == item["Max"] and t.min().item() == item["Min"]
                assert math.isclose(t.mean().item(), item["Mean"], rel_tol=1e-2, abs_tol=1e-3)
                assert math.isclose(torch.linalg.vector_norm(t).item(), item["Norm"], rel_tol=1e-2)
    expected = {"mlp": "Functional.linear.0.forward", "conv": "Functional.conv2d.0.forward",
                "transformer": "Functional.multi_head_attention_forward.0.forward"}[kind]
    assert expected in json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]


def test_transformer_mix_level_records_modules_and_construct(tmp_path):
    train("transformer", torch.float32, str(tmp_path), task="statistics", level="mix", steps=1)
    rank_dir = tmp_path / "step0" / "rank"
    data = json.loads((rank_dir / "dump.json").read_text())["data"]
    construct = json.loads((rank_dir / "construct.json").read_text())
    assert "Module.layer.TransformerEncoderLayer.forward.0" in data
    assert "Module.layer.self_attn.MultiheadAttention.forward.0" in data
    assert construct["Module.layer.self_attn.MultiheadAttention.forward.0"] == \
        "Module.layer.TransformerEncoderLayer.forward.0"
    assert construct["Functional.multi_head_attention_forward.0.forward"] == \
        "Module.layer.self_attn.MultiheadAttention.forward.0"
    assert construct["Module.layer.TransformerEncoderLayer.forward.0"] is None
    assert "Module.head.Linear.parameters_grad.0" in data
    assert construct.get("optimizer", "absent") is None
    assert data["Module.head.Linear.forward.0"]["parameters"]["weight"]["shape"] == [3, 16]


def test_l0_level_records_only_modules(tmp_path):
    train("conv", torch.float32, str(tmp_path), task="statistics", level="L0", steps=1)
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    assert data and all(k.startswith("Module.") for k in data)
    assert "Module.conv.Conv2d.forward.0" in data and "Module.conv.Conv2d.backward.0" in data
    assert data["Module.bn.BatchNorm2d.backward.0"]["output"][0]["shape"] == [2, 4, 6, 6]
