"""``--msprobe-timeout``: one case under a time limit (a call that runs longer is an error ``timeout``)."""
from __future__ import annotations

import threading
from typing import Any, Callable

from .result import CaseResult, error_result


def _warm_up() -> None:
    """Import what every case needs, so the first timed call is not charged for it."""
    import torch  # noqa: F401

    import generators.apis  # noqa: F401
    import generators.inputs  # noqa: F401

    from ..precision import compare  # noqa: F401


def run_with_timeout(name: str, run: Callable[[], CaseResult], timeout: float | None) -> CaseResult:
    """``run()``, or an error result when it has not finished within ``timeout`` seconds (None: no limit).

    The call is left running in a daemon thread: Python cannot stop it."""
    if not timeout:
        return run()
    _warm_up()
    box: list = []

    def target() -> None:
        try:
            box.append(run())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            box.append(exc)

    thread = threading.Thread(target=target, name=f"msprobe-{name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive() or not box:
        return error_result(name, f"timeout: the call did not finish within {timeout:g} s "
                                  "(--msprobe-timeout); it was left running in the background")
    if isinstance(box[0], BaseException):
        raise box[0]
    result: Any = box[0]
    return result
