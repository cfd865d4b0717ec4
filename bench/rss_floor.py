"""What a node's daemon's RSS is made of before it does any work: the interpreter, the
libraries fleetd loads at start, and fleetd's own modules.

Issue 18 asks for a steady RSS of at most 64 MB. This benchmark measures the part of the RSS that
no change inside fleetd's own code can remove. Each figure is the resident set size
(``/proc/self/statm``, after ``gc.collect()``) of a fresh interpreter, measured after one step:

* ``interpreter``: nothing imported beyond what ``python -c`` loads;
* ``libraries``: every module that isn't fleetd's own, imported in the same order as importing
  a node's entry points loads them. These are the third-party packages (SQLAlchemy, pydantic,
  requests, prometheus_client, structlog, ...) and the standard library modules they and fleetd
  use;
* ``fleetd``: the entry points themselves (``fleetd.daemon``, ``fleetd.cli.run_cmd``,
  ``fleetd.cli.fleetd_main``), on top of the libraries;
* ``by_package``: each third-party top-level package alone, over the bare interpreter. The
  packages share the standard library, so these do not add up to ``libraries``.

The daemon's RSS once it runs (``bench/daemon.py``) is ``fleetd`` plus what it builds and holds:
the config, the SQLite connections, the memory window, threads, and the malloc arenas. Each
interpreter compiles from source unless byte-code caches exist. Run it twice to read the figures
with caches, which is how the Debian package runs, since its postinst compiles them.

Prints one JSON line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ENTRY_POINTS = ("fleetd.daemon", "fleetd.cli.run_cmd", "fleetd.cli.fleetd_main")
TARGET_MB = 64.0

_RSS = """
import gc
gc.collect()
with open("/proc/self/statm", "rb") as statm:
    pages = int(statm.read().split()[1])
import os
print(round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 2))
"""


def run(code: str) -> str:
    """``code`` in a fresh interpreter run from this checkout; its last line of output."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def rss_after(imports: list[str]) -> float:
    """RSS, MB, of a fresh interpreter after importing ``imports`` in order (a module that
    cannot be imported on its own, such as a private alias, is passed over)."""
    code = (
        "import importlib\n"
        f"for name in {imports!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception:\n"
        "        pass\n" + _RSS
    )
    return float(run(code))


def modules_loaded() -> list[str]:
    """Every module importing the entry points loads, in load order."""
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        f"for name in {list(ENTRY_POINTS)!r}:\n"
        "    __import__(name)\n"
        "import json\n"
        "print(json.dumps([m for m in sys.modules if m not in before]))\n"
    )
    loaded: list[str] = json.loads(run(code))
    return loaded


def main() -> None:
    loaded = modules_loaded()
    libraries = [m for m in loaded if m != "fleetd" and not m.startswith("fleetd.")]
    top = sorted(
        {
            m.split(".")[0]
            for m in libraries
            if m.split(".")[0] not in sys.stdlib_module_names and not m.startswith("_")
        }
    )
    interpreter = rss_after([])
    with_libraries = rss_after(libraries)
    with_fleetd = rss_after([*libraries, *ENTRY_POINTS])
    by_package = {name: round(rss_after([name]) - interpreter, 1) for name in top}
    figures: dict[str, Any] = {
        "bench": "rss_floor",
        "rss_mb": {
            "interpreter": interpreter,
            "libraries": with_libraries,
            "fleetd": with_fleetd,
        },
        "modules": {
            "libraries": len(libraries),
            "fleetd": len(loaded) - len(libraries),
        },
        "libraries_mb_over_interpreter": round(with_libraries - interpreter, 1),
        "fleetd_modules_mb": round(with_fleetd - with_libraries, 1),
        "by_package_mb_over_interpreter": by_package,
        "target_mb": TARGET_MB,
        "left_for_fleetd_code_and_data_mb": round(TARGET_MB - with_libraries, 1),
        "note": "fresh interpreters; RSS from /proc/self/statm after gc.collect(); "
        "libraries = every non-fleetd module the node's entry points load, in load order",
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
