#!/usr/bin/env bash
# Create .venv (if missing) and install pytest-msprobe with everything its demo and tests need.
# Idempotent: a second run only checks that the packages are there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import torch, pytest_msprobe, xdist, hypothesis, mindspore" >/dev/null 2>&1; then
  .venv/bin/pip install -q --upgrade pip
  # the CPU build of torch first: a plain 'torch' requirement may pull a multi-GB CUDA build
  .venv/bin/pip install -q "torch==2.13.0"
  .venv/bin/pip install -q -e ".[mindspore,test]"
fi
