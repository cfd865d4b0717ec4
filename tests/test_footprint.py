"""What a node's daemon loads: nothing it may never use (docs/performance.md, footprint)."""

from __future__ import annotations

import subprocess
import sys


def test_the_daemon_does_not_load_the_postgresql_dialect_until_it_uses_postgresql() -> None:
    code = (
        "import sys, fleetd.daemon, fleetd.cli.run_cmd; "
        "print(sorted(m for m in sys.modules if 'dialects.postgresql' in m or 'psycopg' in m))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
