#!/usr/bin/env bash
# Install fleetd with its pinned test dependencies into a virtual environment and run the
# whole suite (ruff, mypy strict, pytest). The environment is $FLEETD_VENV (default .venv),
# created when missing; every tool version comes from constraints.txt. The install step is
# the only one that uses the package index: on Debian it also fills .wheelhouse/ with the
# wheels tests/deb builds the Debian package from, offline (scripts/wheelhouse.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${FLEETD_VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
export PATH="$(cd "$venv/bin" && pwd):$PATH"
export VIRTUAL_ENV="$(cd "$venv" && pwd)"
python -m pip install -q --disable-pip-version-check --no-warn-script-location \
  -c constraints.txt -e '.[test]' 'amdsmi==7.0.2'
if command -v dpkg-deb >/dev/null; then
  PYTHON=python ./scripts/wheelhouse.sh .wheelhouse
fi
python -m ruff check fleetd tests bench
python -m mypy
# Three worker processes, a test file each at a time (a file's fixtures, such as one end-to-end
# run shared by its assertions, are built once); `-n 0` runs in one process. Three on two
# cores because the end-to-end files mostly wait on real timers (a run with two workers kept
# the cores 57 % busy). Files with a slow test are handed out first (tests/conftest.py), not
# last as xdist's reordering by test count would, so the long runs overlap the short files.
python -m pytest -q -p no:cacheprovider -n 3 --dist loadfile --no-loadscope-reorder "$@"
