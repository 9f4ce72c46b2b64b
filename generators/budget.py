"""How much memory one case's inputs may take, checked before anything is allocated."""
from __future__ import annotations

import os

FALLBACK_BYTES = 4 * 1024 ** 3     # when the available memory cannot be read
SHARE_OF_AVAILABLE = 4             # default budget: a quarter of the available memory


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else free physical pages, else None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def default_max_bytes() -> int:
    """The default budget for one case's inputs: a quarter of the memory available now.

    Generation and the checker's bench/device copies need a few times the inputs' own size, hence the share.
    """
    avail = available_memory()
    return max(avail // SHARE_OF_AVAILABLE, 1) if avail else FALLBACK_BYTES
