#!/usr/bin/env bash
# Create the virtual environment (if missing) and install pytest-msprobe with everything its demo and tests
# need. Idempotent: a second run only checks that the packages import. MSPROBE_VENV names another environment.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${MSPROBE_VENV:-.venv}
if [ ! -x "$VENV"/bin/python ]; then
  "$PY" -m venv "$VENV"
fi
if ! "$VENV"/bin/python -c "import torch, pytest_msprobe, xdist, hypothesis, jinja2, matplotlib, mindspore, numba, transformers" >/dev/null 2>&1; then
  "$VENV"/bin/pip install -q --upgrade pip
  # the CPU build of torch first: a plain 'torch' requirement may pull a multi-GB CUDA build
  "$VENV"/bin/pip install -q "torch==2.13.0"
  "$VENV"/bin/pip install -q -e ".[mindspore,test]"
fi
# the HTML report's browser test needs Chromium (the Debian package); best effort, as in CI
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" = "0" ] || SUDO="sudo"
  ($SUDO apt-get install -y -q chromium >/dev/null 2>&1 \
    || ($SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q chromium >/dev/null 2>&1)) \
    || echo "warning: could not install chromium; the HTML-report browser test will skip" >&2
fi
