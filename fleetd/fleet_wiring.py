"""How the daemon joins the fleet: the registry heartbeat and what this node runs, for drift
(kept out of fleetd/daemon.py; a top-level module like remedy_wiring, as it composes the
registry with the backend, the poller and remediation).

``start_heartbeat`` returns None without ``registry.url``; otherwise the heartbeat that the
daemon's ``heartbeat`` job beats. ``NodeVersionReader`` reads the partition modes again only
when the GPUs were enumerated anew (a re-partition reloads the driver), under the poll's lock
(amdsmi calls outside a poll take it).
"""

from __future__ import annotations

import threading
from typing import Protocol

from fleetd import __version__
from fleetd.api.services import ApiServices
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.config import FleetdConfig
from fleetd.doctor import partition_modes
from fleetd.registry.drift import NodeVersions, node_versions, partition_layout
from fleetd.registry.heartbeat import RegistryHeartbeat, default_address
from fleetd.remedy.service import Remediation

FLEET_SILENCE_CACHE = "fleet-silences.json"  # the fleet silences last read, across restarts


class _Poller(Protocol):
    @property
    def lock(self) -> threading.Lock: ...


class NodeVersionReader:
    """What this node runs (amdsmi, fleetd, the GPUs and their partition layout)."""

    def __init__(self, backend: AmdSmiBackend, poller: _Poller) -> None:
        self._backend = backend
        self._poller = poller
        self._partition: tuple[tuple[str, ...], str | None] | None = None  # GPUs → layout

    def __call__(self) -> NodeVersions:
        abi = self._backend.abi
        amdsmi = "/".join(v for v in (abi.package, abi.library) if v) or None
        gpus = self._backend.gpus()
        key = tuple(g.uuid for g in gpus)
        if self._partition is None or self._partition[0] != key:
            with self._poller.lock:
                modes = partition_modes(self._backend)
            self._partition = (key, partition_layout(modes))
        return node_versions(gpus, amdsmi=amdsmi, fleetd=__version__, partition=self._partition[1])


def start_heartbeat(
    config: FleetdConfig,
    services: ApiServices,
    *,
    backend: AmdSmiBackend,
    poller: _Poller,
    remediation: Remediation | None,
) -> RegistryHeartbeat | None:
    """The fleet heartbeat ``registry:`` asks for, or None when no registry is configured."""
    registry = config.registry
    if registry.url is None:
        return None
    tls = config.http.tls_cert is not None
    return RegistryHeartbeat(
        registry,
        services,
        address=default_address(config.node.name, config.http.port, tls=tls),
        versions=NodeVersionReader(backend, poller),
        cache_path=config.state_dir / FLEET_SILENCE_CACHE,
        remediation_mode=remediation.set_fleet_mode if remediation is not None else None,
    )
