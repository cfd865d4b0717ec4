"""The fleet registry: agents publish their status row to a shared PostgreSQL, fleetctl reads
the whole fleet from it in one query."""

from fleetd.registry.store import (
    FleetLimits,
    RegistryError,
    RegistryNode,
    RegistryPublisher,
    RegistryReader,
)
from fleetd.registry.summary import NodeSummary, summarize

__all__ = [
    "FleetLimits",
    "NodeSummary",
    "RegistryError",
    "RegistryNode",
    "RegistryPublisher",
    "RegistryReader",
    "summarize",
]
