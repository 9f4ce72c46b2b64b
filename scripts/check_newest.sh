#!/usr/bin/env bash
# Run the tests that lean on pytest, pytest-xdist and execnet (the plugin, xdist scheduling, hosts, the public
# seams) against their newest releases, or (--oldest) against the lowest ones pyproject.toml allows.
#
#   scripts/check_newest.sh [--oldest] [BASE_VENV] [-- extra pytest arguments]
#
# A throw-away virtual environment is made on top of BASE_VENV (default: $MSPROBE_VENV, else .venv): it sees
# BASE_VENV's packages (torch, numpy, ...) but installs its own pytest, pytest-xdist, execnet, hypothesis and
# pluggy, so BASE_VENV itself is never changed. Newest means the newest release on the index, whatever the
# upper bounds in pyproject.toml say: a failure here is the warning that a bound must not be raised yet.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=newest
if [[ "${1:-}" == "--oldest" ]]; then mode=oldest; shift; fi
base="${1:-${MSPROBE_VENV:-.venv}}"
[[ $# -gt 0 ]] && shift
[[ "${1:-}" == "--" ]] && shift
python="$base/bin/python"
[[ -x "$python" ]] || { echo "no Python at $python: give the virtual environment to build on" >&2; exit 2; }
site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
tmp=$(mktemp -d "${TMPDIR:-/tmp}/msprobe-$mode.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$python" -m venv "$tmp/venv"
own_site=$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$site" > "$own_site/base_venv.pth"          # after the venv's own packages: its releases come first
if [[ $mode == newest ]]; then
  "$tmp/venv/bin/python" -m pip install -q --upgrade pytest pytest-xdist execnet hypothesis pluggy iniconfig packaging
else   # the lower bounds of pyproject.toml, and the pluggy and iniconfig of that pytest's time
  lows=$("$python" - <<'EOF'
import re, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
for dep in deps:
    m = re.fullmatch(r"(pytest|pytest-xdist|execnet|hypothesis)>=([0-9.]+).*", dep)
    if m:
        print(f"{m.group(1)}=={m.group(2)}")
EOF
)
  # shellcheck disable=SC2086
  "$tmp/venv/bin/python" -m pip install -q --no-deps $lows "pluggy==1.3.0" "iniconfig==2.0.0" attrs sortedcontainers
fi
"$tmp/venv/bin/python" -c 'import pytest, xdist, execnet, hypothesis, pluggy
print(f"pytest {pytest.__version__}, pytest-xdist {xdist.__version__}, execnet {execnet.__version__}, "
      f"hypothesis {hypothesis.__version__}, pluggy {pluggy.__version__}")'
PYTHONPATH="$PWD" MSPROBE_VENV="$base" "$tmp/venv/bin/python" -m pytest -p no:randomly -q \
  tests/test_plugin.py tests/test_xdist_schedule.py tests/test_hosts.py tests/test_public_seams.py "$@"
