"""Parse Python source files with ``ast`` in a child interpreter.

CPython 3.11 keeps the AST constructor's recursion depth in the ``_ast`` module's global
state, shared by every thread (python/cpython#106905). Any other thread that parses at the
same moment — ``traceback`` does, to draw its ``^^^^`` markers, whenever a server thread
prints an exception — corrupts the count and ``ast.parse`` raises ``SystemError: AST
constructor recursion depth mismatch``. The simulator's source readers (the libamd_smi.so
generator, the conformance test, the layering test) run inside busy test processes, so they
parse in a fresh interpreter of their own and receive the trees pickled.
"""

from __future__ import annotations

import ast
import pickle
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

_CHILD = """
import ast, pickle, sys
paths = sys.stdin.read().splitlines()
out = []
for path in paths:
    try:
        with open(path, encoding="utf-8") as handle:
            out.append(ast.parse(handle.read(), filename=path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
        out.append(exc)
sys.stdout.buffer.write(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
"""


class PySourceError(Exception):
    """A file that could not be read or parsed; carries the original error."""

    def __init__(self, path: Path, error: BaseException) -> None:
        super().__init__(f"{path}: {error}")
        self.path = path
        self.error = error


def parse_files(paths: Sequence[Path], *, timeout: float = 60.0) -> list[ast.Module]:
    """The ASTs of ``paths`` in order; raises ``PySourceError`` for the first that fails."""
    if not paths:
        return []
    done = subprocess.run(
        [sys.executable, "-I", "-c", _CHILD],
        input="\n".join(str(p) for p in paths).encode(),
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        raise RuntimeError(f"parsing child failed: {detail[-1] if detail else done.returncode}")
    results = pickle.loads(done.stdout)
    trees: list[ast.Module] = []
    for path, result in zip(paths, results, strict=True):
        if isinstance(result, BaseException):
            raise PySourceError(path, result)
        trees.append(result)
    return trees


def parse_file(path: Path, *, timeout: float = 60.0) -> ast.Module:
    """The AST of one file (see ``parse_files``)."""
    return parse_files([path], timeout=timeout)[0]
