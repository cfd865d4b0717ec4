"""Compile the generated source into ``<root>/<key>/lib/libamd_smi.so`` with the C compiler.

The key hashes the generated source and the compiler, so a cache directory can be shared by
several test sessions: an unchanged wrapper and generator reuse the library already built.
The layout ``<dir>/lib/libamd_smi.so`` is what amdsmi looks for under ``ROCM_PATH``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from fleetd.sim.libemu.generate import GenerationError, find_wrapper, read_wrapper, render_c

LIBRARY_NAME = "libamd_smi.so"
CFLAGS = ("-shared", "-fPIC", "-O1", "-std=c11", "-Wall", "-Wextra", "-Werror")
COMPILE_TIMEOUT_S = 120.0


class CompilerMissing(GenerationError):
    """No C compiler on this machine (the emulated library cannot be built)."""


def find_compiler() -> str:
    """The C compiler to use: ``$CC`` if set, else gcc; CompilerMissing when neither exists."""
    wanted = os.environ.get("CC") or "gcc"
    found = shutil.which(wanted)
    if found is None:
        raise CompilerMissing(
            f"no C compiler {wanted!r} on PATH: the emulated libamd_smi.so needs one "
            "(install gcc, or set CC)"
        )
    return found


def build_library(cache_root: Path, wrapper: Path | None = None) -> Path:
    """Build (or reuse) the emulated library for the installed amdsmi; returns the .so path.

    The ROCm-style directory to point ``ROCM_PATH`` at is ``path.parent.parent``.
    """
    compiler = find_compiler()
    source = render_c(read_wrapper(wrapper or find_wrapper()))
    key = hashlib.sha256(f"{compiler}\0{' '.join(CFLAGS)}\0{source}".encode()).hexdigest()[:16]
    target = cache_root / key / "lib" / LIBRARY_NAME
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    (target.parent / "amdsmi_emu.c").write_text(source, encoding="utf-8")
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        output = Path(scratch) / LIBRARY_NAME
        try:
            result = subprocess.run(
                [compiler, *CFLAGS, "-o", str(output), str(target.parent / "amdsmi_emu.c")],
                capture_output=True,
                text=True,
                timeout=COMPILE_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise GenerationError(f"{compiler} failed to run: {exc}") from None
        if result.returncode != 0:
            raise GenerationError(
                f"{compiler} rejected the generated source ({target.parent / 'amdsmi_emu.c'}):\n"
                + result.stderr.strip()
            )
        os.replace(output, target)  # atomic: a concurrent session sees all of it or nothing
    return target
