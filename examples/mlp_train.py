"""A small MLP trained for a few steps on the CPU, dumped with PrecisionDebugger.

The model and loop are the ones msprobe's sample dumps were made with (Linear 16->32, ReLU,
LayerNorm, GELU, softmax, Linear 32->4, cross-entropy, SGD, seed 1234), so the dump can be compared
with tests/data/mlp_fp32_statistics_L1 key for key.

    python examples/mlp_train.py --dump-path ./dump --task statistics --level L1 --steps 2
"""
from __future__ import annotations

import argparse

import torch


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.ln = torch.nn.LayerNorm(32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = self.ln(h)
        h = torch.nn.functional.gelu(h) * 0.5 + h.softmax(-1)
        return self.fc2(h)


def train(dump_path=None, task="statistics", level="L1", steps=2, dtype=torch.float32, config_path=None):
    """Train ``steps`` steps; dump them when ``dump_path`` or ``config_path`` is given. Returns the losses."""
    torch.manual_seed(1234)
    model = MLP().to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    debugger = None
    if dump_path is not None or config_path is not None:
        from pytest_msprobe import PrecisionDebugger

        debugger = PrecisionDebugger(config_path=config_path, dump_path=dump_path, task=task, level=level,
                                     model=model if level in ("L0", "mix") else None)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 16, dtype=dtype)
        y = torch.randint(0, 4, (8,))
        if debugger is not None:
            debugger.start()
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step(); opt.zero_grad()  # noqa: E702
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(loss.item())
    if debugger is not None:
        debugger.flush()        # tensor files are written in the background: wait for them before reading
    return losses


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump-path", default="./dump_path")
    parser.add_argument("--config", default=None, help="a config.json (overrides the other options' defaults)")
    parser.add_argument("--task", default="statistics", choices=["statistics", "tensor"])
    parser.add_argument("--level", default="L1", choices=["L0", "L1", "mix"])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args(argv)
    losses = train(args.dump_path, args.task, args.level, args.steps, getattr(torch, args.dtype), args.config)
    print("losses:", " ".join(f"{v:.6f}" for v in losses))
    print(f"dump written under {args.dump_path}/step*/rank/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
