"""PyTorch gradient monitor: a global optimizer step pre-hook exports each step's gradient statistics.

The step index counts optimizer invocations (first is 0); a step that a ``GradScaler`` skips never calls
``optimizer.step`` and is not counted. Statistics are computed on the gradients' device, packed into one byte
buffer and moved to the host in ONE transfer per step; CSV rows and direction files are written by a
background thread.
"""
from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from .config import GradProbeConfig
from .summary import StepRecord, clear_rank_dir, md5_float32, rank_dir, write_step
from .writer import BackgroundWriter

log = logging.getLogger("pytest_msprobe.grad_probe")


def current_rank() -> int:
    """The torch.distributed rank, or 0 when not distributed."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return 0


def read_grad(param: torch.Tensor) -> torch.Tensor | None:
    """``param.main_grad`` when the attribute exists (Megatron-style), else ``param.grad``; a sparse gradient
    is densified and a DTensor (FSDP2, tensor parallel) gives its local shard."""
    g = param.main_grad if hasattr(param, "main_grad") else param.grad
    if g is None:
        return None
    if hasattr(g, "to_local"):
        g = g.to_local()
    if g.is_sparse:
        g = g.to_dense()
    return g


def intervals_from_le(le: np.ndarray, numels: list[int]) -> np.ndarray:
    """Per-interval counts from ``le[i, j] = count(grad_i <= bound_j)``: (-inf, b0], (b0, b1], ..., (bk, inf)."""
    le = np.asarray(le, dtype=np.int64).reshape(len(numels), -1)
    total = np.asarray(numels, dtype=np.int64).reshape(-1, 1)
    return np.diff(np.concatenate([np.zeros_like(total), le, total], axis=1), axis=1)


class _Packer:
    """One uint8 buffer on the device that every per-step result is written into, so the host gets it all in
    ONE copy. Parts are laid out largest alignment first (int64, float32, bool)."""

    def __init__(self, parts: list[tuple[str, torch.dtype, tuple[int, ...]]], device: torch.device) -> None:
        self.layout: list[tuple[str, torch.dtype, tuple[int, ...], int, int]] = []
        offset = 0
        for key, dtype, shape in parts:
            nbytes = int(np.prod(shape, dtype=np.int64)) * torch.empty(0, dtype=dtype).element_size()
            self.layout.append((key, dtype, shape, offset, nbytes))
            offset += nbytes
        self.buffer = torch.empty(offset, dtype=torch.uint8, device=device)

    def view(self, key: str) -> torch.Tensor:
        for k, dtype, shape, off, nbytes in self.layout:
            if k == key:
                return self.buffer[off:off + nbytes].view(dtype).view(shape)
        raise KeyError(key)

    def to_host(self) -> tuple[torch.Tensor, Any | None]:
        """The one device-to-host copy; returns the host buffer and a CUDA event to wait on (or None)."""
        buf = self.buffer
        if buf.device.type == "cpu":
            return buf, None
        if buf.device.type == "cuda":
            host = torch.empty(buf.numel(), dtype=torch.uint8, pin_memory=True)
            host.copy_(buf, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            return host, event
        return buf.cpu(), None

    def unpack(self, host: torch.Tensor) -> dict[str, np.ndarray]:
        data = host.numpy()
        out = {}
        for key, dtype, shape, off, nbytes in self.layout:
            np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
            out[key] = data[off:off + nbytes].view(np_dtype).reshape(shape)
        return out


class TorchGradMonitor:
    """Exports grad_summary CSVs (and direction files) for a ``torch.nn.Module`` at every optimizer step."""

    def __init__(self, config: GradProbeConfig) -> None:
        self.config = config
        self.step = -1                       # optimizer steps seen; the first step is 0
        self.writer = BackgroundWriter()
        self._params: list[tuple[str, torch.nn.Parameter]] = []
        self._handle = None
        self._cleared = False
        self.hook_seconds = 0.0              # wall time spent on the training thread in exported steps
        self.hook_cpu_seconds = 0.0          # CPU time of the training thread in exported steps
        self.exported_steps = 0

    # -- set-up -------------------------------------------------------------------------------------
    def monitor(self, model: torch.nn.Module) -> None:
        """Watch ``model``'s parameters (filtered by ``param_list``) at every optimizer step of the process."""
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"grad_probe monitor() needs the model (a torch.nn.Module), got {type(model).__name__}; "
                            "call debugger.monitor(model) after building the model")
        wanted = self.config.param_list
        named = list(model.named_parameters())
        if wanted:
            keep = set(wanted)
            named = [(n, p) for n, p in named if n in keep]
            missing = sorted(keep - {n for n, _ in named})
            if missing:
                log.warning("grad_probe: param_list names not found in the model: %s (names are those of "
                            "model.named_parameters())", missing)
        self._params = named
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized() and not self.config.wants_rank(dist.get_rank()):
            log.info("grad_probe: rank %d is not in 'rank' %s; nothing is exported from it",
                     dist.get_rank(), list(self.config.ranks))
            return
        if self._handle is None:             # a second monitor() replaces the parameter set, no second hook
            self._handle = register_optimizer_step_pre_hook(self._on_step)

    def remove(self) -> None:
        """Uninstall the optimizer hook, write out everything pending and stop the writer thread."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self.writer.close()

    def flush(self) -> None:
        """Block until every exported step is on disk."""
        self.writer.flush()

    # -- per step -----------------------------------------------------------------------------------
    def _on_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.step += 1
        rank = current_rank()
        if not self.config.wants_rank(rank) or not self.config.wants_step(self.step):
            return
        t0, c0 = time.perf_counter(), time.thread_time()
        self.export(self.step, rank)
        self.hook_seconds += time.perf_counter() - t0
        self.hook_cpu_seconds += time.thread_time() - c0
        self.exported_steps += 1

    def export(self, step: int, rank: int) -> None:
        """Compute this step's statistics on the device and queue the files for writing."""
        out_dir = rank_dir(self.config.dump_path, rank)
        if not self._cleared:
            self._cleared = True
            self.writer.submit(lambda: clear_rank_dir(out_dir))
        names: list[str] = []
        grads: list[torch.Tensor] = []
        for name, param in self._params:
            g = read_grad(param)
            if g is None:
                log.debug("grad_probe: grad is None: %s", name)
                continue
            names.append(name)
            grads.append(g.detach())
        level, bounds = self.config.grad_level, self.config.bounds
        shapes = [tuple(g.shape) for g in grads]
        if not grads:
            record = StepRecord(step, [], [], *(np.zeros(0, np.float32),) * 3, md5s=[],
                                intervals=np.zeros((0, len(bounds) + 1), np.int64), zeros=np.zeros(0, np.int64))
            self.writer.submit(lambda: write_step(out_dir, record, level, bounds))
            return
        device = grads[0].device
        grads = [g if g.device == device else g.to(device) for g in grads]
        packer = self._compute(grads, level)
        host, event = packer.to_host()

        def job() -> None:
            if event is not None:
                event.synchronize()
            parts = packer.unpack(host)
            stats = parts["stats"].reshape(-1, 3)
            record = StepRecord(step=step, names=names, shapes=shapes, maxes=stats[:, 0], mins=stats[:, 1],
                                norms=stats[:, 2], zeros=parts.get("zeros"), direction=parts.get("direction"))
            if level == "L2":
                record.intervals = intervals_from_le(parts["le"], record.numels)
            if level == "L0":
                flat = parts["flat"]
                offsets = np.concatenate([[0], np.cumsum(record.numels, dtype=np.int64)])
                record.md5s = [md5_float32(flat[offsets[i]:offsets[i + 1]]) for i in range(len(names))]
            write_step(out_dir, record, level, bounds)

        self.writer.submit(job)

    def _compute(self, grads: list[torch.Tensor], level: str) -> _Packer:
        """Max/min/norm per gradient, L2 counts, and directions (L1/L2) or float32 values (L0), all written
        into one device buffer."""
        device = grads[0].device
        p = len(grads)
        n = sum(g.numel() for g in grads)
        k = len(self.config.bounds)
        parts: list = []
        if level == "L2":
            parts += [("le", torch.int64, (p, k)), ("zeros", torch.int64, (p,))]
        parts.append(("stats", torch.float32, (p, 3)))
        parts.append(("flat", torch.float32, (n,)) if level == "L0" else ("direction", torch.bool, (n,)))
        packer = _Packer(parts, device)
        nan = None
        vals: list[torch.Tensor] = []
        with torch.no_grad():
            norms = torch._foreach_norm(grads) if hasattr(torch, "_foreach_norm") else [g.norm() for g in grads]
            for g, nrm in zip(grads, norms):
                if g.numel():
                    mx_mn = torch.aminmax(g)
                    vals.extend((mx_mn.max, mx_mn.min, nrm))
                else:
                    if nan is None:
                        nan = torch.tensor(float("nan"), device=device)
                    vals.extend((nan, nan, nrm))
            packer.view("stats").copy_(torch.stack([v.float() for v in vals]).view(p, 3))
            if level == "L2":
                # count(v <= b) per bound: interval counts are their differences (bucketize, right=False,
                # float32 values and bounds), taken on the host; NaN is <= nothing, so it lands in (bk, inf)
                edges = [float(np.float32(b)) for b in self.config.bounds]
                le, zeros = [], []
                for g in grads:
                    g32 = g if g.dtype == torch.float32 else g.float()
                    le.extend(torch.count_nonzero(g32 <= b) for b in edges)
                    zeros.append(torch.count_nonzero(g32 == 0))
                if le:
                    packer.view("le").copy_(torch.stack(le).view(p, k))
                packer.view("zeros").copy_(torch.stack(zeros))
            out = packer.view("flat" if level == "L0" else "direction")
            offset = 0
            for g in grads:
                part = out[offset:offset + g.numel()].view(g.shape)
                offset += g.numel()
                if level == "L0":
                    part.copy_(g)
                else:
                    torch.gt(g, 0, out=part)
        return packer
