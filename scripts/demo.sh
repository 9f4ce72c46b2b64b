#!/usr/bin/env bash
# The demo: dump a training step of the bundled example model, check every captured API call with a
# planted inaccurate kernel in the demo device backend, and write the CSVs and the HTML report.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup_env.sh
VENV=${MSPROBE_VENV:-.venv}
exec "$VENV"/bin/python demo/run_demo.py "$@"
