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
from typing import TYPE_CHECKING, Protocol

from fleetd import __version__
from fleetd.api.services import ApiServices
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.config import FleetdConfig
from fleetd.doctor import partition_modes
from fleetd.remedy.service import Remediation

if TYPE_CHECKING:  # the registry's modules load only when registry.url is set (footprint)
    from fleetd.registry.drift import NodeVersions
    from fleetd.registry.heartbeat import RegistryHeartbeat
    from fleetd.vllm.peers import PeerComparison

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
        from fleetd.registry.drift import firmware_text, node_versions, partition_layout

        abi = self._backend.abi
        amdsmi = "/".join(v for v in (abi.package, abi.library) if v) or None
        gpus = self._backend.gpus()
        key = tuple(g.uuid for g in gpus)
        if self._partition is None or self._partition[0] != key:
            with self._poller.lock:
                modes = partition_modes(self._backend)
            self._partition = (key, partition_layout(modes))
        firmware = firmware_text(self._backend.firmware().values())  # read at discovery
        return node_versions(
            gpus,
            amdsmi=amdsmi,
            fleetd=__version__,
            firmware=firmware,
            partition=self._partition[1],
        )


def start_heartbeat(
    config: FleetdConfig,
    services: ApiServices,
    *,
    backend: AmdSmiBackend,
    poller: _Poller,
    remediation: Remediation | None,
    serving: PeerComparison | None = None,
) -> RegistryHeartbeat | None:
    """The fleet heartbeat ``registry:`` asks for, or None when no registry is configured.

    ``serving``: the gray-failure comparison, which then also compares this node's hives with
    the fleet's (figures published and read with each beat)."""
    registry = config.registry
    if registry.url is None:
        return None
    from fleetd.registry.heartbeat import RegistryHeartbeat, default_address

    tls = config.http.tls_cert is not None
    versions = NodeVersionReader(backend, poller)
    if serving is not None:
        sku = versions().sku
        hives = {g.index: g.hive_id for g in backend.gpus() if g.hive_id}
        if sku is not None:
            serving.enable_fleet(config.node.name, sku, hives, registry.stale_after)
    return RegistryHeartbeat(
        registry,
        services,
        address=default_address(config.node.name, config.http.port, tls=tls),
        versions=versions,
        cache_path=config.state_dir / FLEET_SILENCE_CACHE,
        remediation_mode=remediation.set_fleet_mode if remediation is not None else None,
        serving=serving,
        caps=[c.to_json() for c in config.remediation.fleet.all_caps()],
    )
