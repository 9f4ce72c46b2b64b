"""A demo "accelerator": the CPU, except that its GELU kernel is a poor approximation.

Loaded as a pytest plugin (``-p demo.planted_backend``); selected with ``--msprobe-device-type demo-npu``.
Its gelu evaluates the tanh approximation with a truncated series in the tensor's own low precision -
the kind of kernel defect the accuracy check exists to catch. Everything else is the plain CPU.
"""
from __future__ import annotations

from pytest_msprobe.devices import CpuBackend


def _sloppy_gelu(x, approximate="none"):
    import torch

    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with tanh(u) ~ u - u^3/3 clamped to [-1, 1]
    u = 0.7978845608 * (x + 0.044715 * x * x * x)
    t = torch.clamp(u - u * u * u / 3.0, -1.0, 1.0)
    return 0.5 * x * (1.0 + t)


class DemoNpuBackend(CpuBackend):
    name = "demo-npu"

    def call(self, func, args, kwargs):
        import torch

        if func is torch.nn.functional.gelu:
            return _sloppy_gelu(*args, **kwargs)
        return func(*args, **kwargs)


def pytest_msprobe_register_devices(registry):
    registry.register(DemoNpuBackend())
