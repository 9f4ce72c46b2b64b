"""``python -m pytest_msprobe.cli``: the ``pytest-msprobe`` command."""
from __future__ import annotations

import sys

from . import main

sys.exit(main())
