"""A background thread that runs file-writing jobs off the training thread, in submission order."""
from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
import weakref
from typing import Callable

log = logging.getLogger("pytest_msprobe.grad_probe")

_STOP = object()


class BackgroundWriter:
    """Runs submitted callables on one daemon thread, started at the first job.

    The queue is bounded (``max_pending`` steps): when the disk cannot keep up, training waits instead of
    memory growing. Pending jobs are flushed at interpreter exit. A failing job is logged and kept in
    ``errors``; it never stops training. After :meth:`close`, a new job starts a new thread.
    """

    def __init__(self, max_pending: int = 4) -> None:
        self._max_pending = max_pending
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.errors: list[BaseException] = []
        self.busy_seconds = 0.0              # CPU time the writer thread spent on jobs
        ref = weakref.ref(self)
        atexit.register(lambda: ref() is not None and ref().close())

    def _run(self, jobs: queue.Queue) -> None:
        while True:
            job = jobs.get()
            try:
                if job is _STOP:
                    return
                t0 = time.thread_time()
                job()
                self.busy_seconds += time.thread_time() - t0
            except Exception as exc:  # noqa: BLE001 - a write failure must not kill the writer
                self.errors.append(exc)
                log.error("grad_probe: writing gradient data failed: %s", exc)
            finally:
                jobs.task_done()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def submit(self, job: Callable[[], None]) -> None:
        """Queue ``job`` for the writer thread."""
        with self._lock:
            if self._thread is None:
                self._queue = queue.Queue(maxsize=self._max_pending)
                self._thread = threading.Thread(target=self._run, args=(self._queue,), name="grad-probe-writer",
                                                daemon=True)
                self._thread.start()
            jobs = self._queue
        jobs.put(job)

    def flush(self) -> None:
        """Block until every submitted job has run."""
        jobs = self._queue
        if jobs is not None:
            jobs.join()

    def close(self) -> None:
        """Flush and stop the thread (idempotent)."""
        with self._lock:
            thread, jobs = self._thread, self._queue
            self._thread = self._queue = None
        if thread is None:
            return
        jobs.put(_STOP)
        jobs.join()
        thread.join(timeout=60)
