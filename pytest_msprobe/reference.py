"""``--msprobe-reference NAME``: a second opinion in the same run, instead of a second machine.

Every call also runs on the reference backend (``cpu``, or one registered through
``pytest_msprobe_register_devices``), in the dumped dtype, against the same bench and the same inputs; its
details rows are the "GPU" side of msprobe's NPU-vs-GPU compare (api_precision_compare) for that API, so each
API passes when the device is as accurate as the reference kernel and fails when it is worse. The reference
rows also travel to the controller, which writes them as an ordinary details CSV pair under
``{--msprobe-out}/reference-{NAME}/`` and, at the end, runs the whole compare against it exactly as
``--msprobe-gpu-csv`` would with that file.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any


def judge(sess: Any, case: Any, dump_path: str, name: str, payload: Any) -> Any:
    """Run ``case`` on the reference backend and return the compare's verdict of ``name`` (an ApiVerdict),
    or None when the reference produced no comparable rows; the reference rows go into ``payload.reference``
    (an :class:`~.api_items.ItemPayload`)."""
    from .gpu_reference import judge_tables
    from .replay import run_case
    from .report.columns import DETAILS_HEADER
    from .report.details_table import table_from_rows
    s = sess.settings
    backend = sess.registry().usable(s.reference)
    options = dataclasses.replace(sess.run_options(dump_path), device_type=s.reference, error_data_dir=None,
                                  examples=1, timeout=None)     # --msprobe-timeout limits the item's own run
    result = run_case(case, backend, 0, options)
    built = type(payload).of(result, fail_on=s.fail_on, precision=s.precision)    # the item's payload class
    payload.reference = built.wire()
    rows = [dict(zip(DETAILS_HEADER, cells[:len(DETAILS_HEADER)])) for cells in built.cells]
    if not rows:
        return None
    return judge_tables(name, payload.cells, table_from_rows(f"<reference {s.reference}>", "GPU", rows),
                        s.standard)


def paths(details_csv: str, out_dir: str, name: str) -> tuple:
    """(result CSV, details CSV) of the reference rows of a run whose details CSV is ``details_csv``."""
    from .report.acc_csv import details_path_for
    folder = os.path.join(out_dir, f"reference-{name}")
    result = os.path.join(folder, os.path.basename(details_csv).replace("_details_", "_result_"))
    return result, details_path_for(result)
