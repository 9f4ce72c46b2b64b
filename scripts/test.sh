#!/usr/bin/env bash
# Run the whole test suite (installs what it needs first). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup_env.sh
VENV=${MSPROBE_VENV:-.venv}
exec "$VENV"/bin/python -m pytest -n 2 -q -p no:randomly "$@"
