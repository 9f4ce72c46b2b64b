"""Worker processes for ``process_num > 0`` (spec section 10).

The training thread copies inputs and the device result to the CPU and submits a :class:`~.job.Job`;
a worker runs the bench (for ops it can resolve by name), judges, and dumps. Results come back through
the pool's own result queue and are written in ``api_index`` order, so the CSV is the same as with
``process_num=0``. Workers are started with ``spawn``: forking a process whose OpenMP thread pool is in
use can hang the child. Each worker uses the training process's intra-op thread count, so its CPU
kernels reduce in the same order and the bench results are bit-identical.
"""
from __future__ import annotations

import atexit
import logging
import multiprocessing
from typing import Any, ClassVar

import torch

from . import ops, tensors
from .job import Job, OpResult, error_result, evaluate

LOG = logging.getLogger("pytest_msprobe.online_dispatch")


def _init_worker(num_threads: int) -> None:
    torch.set_num_threads(num_threads)


def _work(job: Job) -> OpResult:
    job.args, job.kwargs = tensors.unpack((job.args, job.kwargs))
    job.device_out = tensors.unpack(job.device_out)
    job.bench_out = tensors.unpack(job.bench_out)
    job.rng_state = tensors.unpack(job.rng_state)
    try:
        fn = ops.resolve(job.qualname) if job.run_bench else None
        return evaluate(job, fn)
    except Exception as exc:  # noqa: BLE001 - the row says what failed, training goes on
        LOG.error("multiprocess %s", exc)
        return error_result(job, exc)


class WorkerPool:
    """A ``spawn`` pool judging jobs asynchronously, with a bound on the jobs in flight.

    Starting a worker imports torch (seconds), so pools are shared: every PtdbgDispatch block with the same
    ``process_num`` and thread count reuses the same warm workers. :func:`shutdown_workers` (also run at
    interpreter exit) stops them.
    """

    _shared: ClassVar[dict] = {}

    def __init__(self, process_num: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.key = (process_num, torch.get_num_threads())
        self._pool = ctx.Pool(process_num, initializer=_init_worker, initargs=(self.key[1],))
        self.max_in_flight = 8 * process_num

    @classmethod
    def shared(cls, process_num: int) -> WorkerPool:
        """The pool for ``process_num`` workers at the current thread count, started on first use."""
        key = (process_num, torch.get_num_threads())
        pool = cls._shared.get(key)
        if pool is None:
            if not cls._shared:
                atexit.register(shutdown_workers)
            pool = cls._shared[key] = cls(process_num)
        return pool

    def submit(self, job: Job) -> Any:
        job.args, job.kwargs = tensors.pack((job.args, job.kwargs))
        job.device_out = tensors.pack(job.device_out)
        job.bench_out = tensors.pack(job.bench_out)
        job.rng_state = tensors.pack(job.rng_state)
        return self._pool.apply_async(_work, (job,))

    def close(self) -> None:
        WorkerPool._shared.pop(self.key, None)
        self._pool.close()
        self._pool.join()

    def terminate(self) -> None:
        """Stop at once (an interrupted block); the next block starts a fresh pool."""
        WorkerPool._shared.pop(self.key, None)
        self._pool.terminate()
        self._pool.join()


def shutdown_workers() -> None:
    """Stop every shared worker pool (waits for the jobs already submitted)."""
    for pool in list(WorkerPool._shared.values()):
        pool.close()
