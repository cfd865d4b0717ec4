"""Running operator commands (rotation hooks, systemctl, drain/undrain, burn-in, reboot).

Argument vectors, never a shell: a placeholder like ``{worker}`` is replaced inside each
argument, so a value cannot split into extra arguments. Every command has a timeout; on
expiry its whole process group is killed and the step fails with a clear error.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleetd.errors import RemedyError

PLACEHOLDERS = frozenset({"worker", "unit", "url", "gpus", "node", "model"})
_TAIL = 400


@dataclass(frozen=True, slots=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def render(argv: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """Replace ``{name}`` placeholders in each argument. Other braces (JSON bodies) stay."""
    return [_render_one(arg, values) for arg in argv]


def unit_command(argv: Sequence[str], *, node: str, gpus: Sequence[int]) -> list[str]:
    """A command run on a run's unit (validator, burn-in, reboot) with ``{node}`` and
    ``{gpus}`` (the indices, comma-separated) replaced."""
    return render(argv, {"node": node, "gpus": ",".join(str(g) for g in gpus)})


def _render_one(arg: str, values: Mapping[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise RemedyError(f"unknown placeholder {{{name}}} in {arg!r}")
        return values[name]

    return _PLACEHOLDER.sub(value, arg)


def check_template(argv: Sequence[str]) -> None:
    """Raise ValueError when ``argv`` uses a placeholder fleetd does not provide."""
    for arg in argv:
        for name in _PLACEHOLDER.findall(arg):
            if name not in PLACEHOLDERS:
                known = ", ".join(sorted(PLACEHOLDERS))
                raise ValueError(f"unknown placeholder {{{name}}} in {arg!r} (known: {known})")


def run_command(
    argv: Sequence[str],
    *,
    timeout: float,
    check: bool = True,
    env: Mapping[str, str] | None = None,
) -> CommandResult:
    """Run ``argv``; raise RemedyError when it cannot start, times out, or (``check``) fails."""
    args = tuple(argv)
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
    except OSError as exc:
        raise RemedyError(f"cannot run {args[0]}: {exc.strerror or exc}") from None
    try:
        out, err = proc.communicate(timeout=timeout if timeout > 0 else None)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise RemedyError(f"{_show(args)} timed out after {timeout:g}s") from None
    result = CommandResult(args, proc.returncode, out, err)
    if check and proc.returncode != 0:
        detail = (err.strip() or out.strip())[-_TAIL:]
        raise RemedyError(
            f"{_show(args)} exited {proc.returncode}" + (f": {detail}" if detail else "")
        )
    return result


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def _show(args: tuple[str, ...]) -> str:
    text = " ".join(args)
    return text if len(text) <= 120 else text[:117] + "..."
