"""The daemon's heartbeat job: publish this node's status row to the fleet registry.

Built once by the daemon when ``registry.url`` is set, and called every
``registry.heartbeat_interval`` by the scheduler with the current time. A registry that is
down costs a log line and a counter, never an exception into the scheduler: the next beat
tries again.
"""

from __future__ import annotations

from fleetd.api.services import ApiServices
from fleetd.api.status import node_status
from fleetd.logs import get_logger
from fleetd.registry.config import RegistryConfig
from fleetd.registry.reader import RegistryError, describe_error
from fleetd.registry.store import RegistryPublisher

log = get_logger("registry")


def default_address(node: str, port: int, *, tls: bool) -> str:
    """How fleetctl reaches an agent that did not say: ``http(s)://<node name>:<port>``."""
    return f"{'https' if tls else 'http'}://{node}:{port}"


class RegistryHeartbeat:
    """Publishes ``services``' status to the registry in ``config``."""

    def __init__(self, config: RegistryConfig, services: ApiServices, *, address: str) -> None:
        if config.url is None:
            raise ValueError("the registry heartbeat needs registry.url")
        self._services = services
        self._publisher = RegistryPublisher(
            config.url.reveal(), address=config.address or address, timeout=config.timeout
        )
        self.published_total = 0
        self.failures_total = 0
        self.last_error: str | None = None

    def beat(self, now: float) -> bool:
        """Publish once; True when the registry took it."""
        try:
            status = node_status(self._services, now)
            self._publisher.publish(status, now)
        except Exception as exc:  # e.g. the fleet lease, in the same database, unreadable
            error = str(exc) if isinstance(exc, RegistryError) else describe_error(exc)
            self.failures_total += 1
            if self.last_error != error:
                log.warning("registry_publish_failed", error=error)
            self.last_error = error
            return False
        if self.last_error is not None:
            log.info("registry_publish_recovered")
        self.last_error = None
        self.published_total += 1
        return True

    def close(self) -> None:
        self._publisher.close()
