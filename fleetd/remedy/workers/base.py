"""The adapter interface every way of running workers implements (systemd, commands).

Each method either succeeds or raises ``RemedyError`` with a message that goes into the run's
evidence as is; ``ready`` answers not-ready (with why) instead of raising, because a worker
that is still loading is not an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import requests

from fleetd.remedy.config import ReadmitConfig, WorkersConfig
from fleetd.vllm.client import Load, Readiness
from fleetd.vllm.config import VllmWorkerConfig


class WorkerAdapter(Protocol):
    """Take one worker out of service and bring it back."""

    def unroute(self, worker: VllmWorkerConfig) -> None:
        """Out of rotation (the load balancer or scheduler stops sending it work)."""
        ...

    def load(self, worker: VllmWorkerConfig) -> Load:
        """In-flight work now."""
        ...

    def stop(self, worker: VllmWorkerConfig) -> str | None:
        """Stop the worker's process so nothing holds its GPUs; a note for the journal when
        the stop was not fleetd's own (e.g. the drain already ended the process)."""
        ...

    def start(self, worker: VllmWorkerConfig) -> None: ...

    def ready(self, worker: VllmWorkerConfig) -> Readiness:
        """Serving again (health, model listed, optionally a 1-token completion)."""
        ...

    def reroute(self, worker: VllmWorkerConfig) -> None:
        """Back into rotation."""
        ...


class AdapterBase:
    """What every adapter is built from: the workers section, the readmit settings, the node
    and one HTTP session; ``_configure`` reads the adapter's own part (or rejects the config)."""

    def __init__(
        self,
        config: WorkersConfig,
        readmit: ReadmitConfig,
        *,
        node: str,
        session: requests.Session | None = None,
    ) -> None:
        self._cfg = config
        self._readmit = readmit
        self._node = node
        self._session = session or requests.Session()
        self._configure()

    def _configure(self) -> None:
        """The adapter's own settings, read once; ValueError if the config lacks them."""


def placeholders(worker: VllmWorkerConfig, node: str) -> Mapping[str, str]:
    """Values for ``{worker}``, ``{unit}``, … in commands, URLs and bodies."""
    return {
        "worker": worker.name,
        "unit": worker.unit or "",
        "url": worker.url,
        "gpus": ",".join(str(g) for g in worker.gpus),
        "node": node,
        "model": worker.model or "",
    }
