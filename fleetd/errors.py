"""fleetd's exception tree.

FleetdError
├── ConfigError        a config or rules file is wrong (carries every problem at once)
├── BackendError       the GPU library cannot be loaded or initialised
├── StoreError         the local database failed
├── NotifyError        a notifier could not deliver (says whether a retry may help)
├── RemedyError        a remediation step could not be carried out
└── StateDirInUse      another live fleetd holds the state directory (fleetd.statelock)
"""

from __future__ import annotations

from dataclasses import dataclass


class FleetdError(Exception):
    """Base of every error fleetd raises on purpose."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem in a file: where it is and what is wrong."""

    file: str
    line: int | None
    col: int | None
    key: str
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.col is not None:
                where += f":{self.col}"
        key = f" {self.key}:" if self.key else ""
        return f"{where}:{key} {self.message}"


class ConfigError(FleetdError):
    """A configuration or rules file failed to load; holds every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class BackendError(FleetdError):
    """The GPU backend cannot run (library missing, init failed)."""


class StoreError(FleetdError):
    """The local time-series or state database failed."""


class NotifyError(FleetdError):
    """A notification was not delivered.

    ``retryable`` tells the dispatcher whether trying again can help (5xx, 429, network);
    ``retry_after`` carries a server's Retry-After in seconds when it sent one.
    """

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


class RemedyError(FleetdError):
    """A remediation step failed in a way the executor must report."""


class StateDirInUse(FleetdError):
    """Another live process holds the state directory's lock (``fleetd.statelock``)."""
