#!/usr/bin/env bash
# Install fleetd with its test dependencies and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e '.[test]' 'amdsmi==7.0.2' --no-warn-script-location
python3 -m ruff check fleetd tests bench
python3 -m mypy
python3 -m pytest -q -p no:cacheprovider "$@"
