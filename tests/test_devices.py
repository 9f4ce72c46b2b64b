"""Device backends, the registry, worker -> device mapping and the per-device worker limit."""
from __future__ import annotations

import pytest
import torch

from pytest_msprobe import devices


def test_builtin_registry_and_default():
    reg = devices.builtin_registry()
    assert reg.names() == ["cpu", "cuda", "npu", "ms-cpu", "recorded"]
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert reg.default_name() == expected
    with pytest.raises(KeyError, match="unknown device type 'tpu'.*pytest_msprobe_register_devices"):
        reg.get("tpu")


def test_cpu_backend_keeps_dtype_and_calls():
    cpu = devices.CpuBackend()
    x = torch.ones(3, dtype=torch.float16)
    moved = cpu.to_device([x, {"k": x}], 0)
    assert moved[0] is x and moved[1]["k"].dtype == torch.float16
    out = cpu.call(torch.add, [x, x], {})
    assert out.dtype == torch.float16 and out.tolist() == [2.0, 2.0, 2.0]
    assert cpu.is_available() and cpu.device_count() == 1 and not cpu.accelerator


def test_register_rejects_incomplete_backend():
    reg = devices.DeviceRegistry()

    class Half:
        name = "half"

    with pytest.raises(TypeError, match="lacks is_available"):
        reg.register(Half())
    reg.register(devices.CpuBackend())
    assert "cpu" in reg


@pytest.mark.parametrize("worker, ids, expected", [
    (None, [0, 1], 0), ("gw0", [0, 1], 0), ("gw1", [0, 1], 1), ("gw2", [0, 1], 0), ("gw5", [3, 4, 7], 7),
    ("gw31", list(range(8)), 7),
])
def test_worker_k_uses_device_k_mod_len(worker, ids, expected):
    assert devices.device_for_worker(worker, ids) == expected


def test_parse_device_ids():
    assert devices.parse_device_ids("0, 1,3") == [0, 1, 3]
    with pytest.raises(ValueError, match="non-negative integers"):
        devices.parse_device_ids("0,-1")
    with pytest.raises(ValueError, match="listed twice"):
        devices.parse_device_ids("1,1")


def test_worker_limit_only_for_accelerators():
    cuda = devices.CudaBackend()
    devices.check_worker_limit(cuda, 16, [0, 1], 8)
    with pytest.raises(ValueError, match="more than 8 per device.*--msprobe-max-workers-per-device"):
        devices.check_worker_limit(cuda, 17, [0, 1], 8)
    devices.check_worker_limit(cuda, 17, [0, 1], 9)
    devices.check_worker_limit(devices.CpuBackend(), 500, [0], 8)
