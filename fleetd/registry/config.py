"""The ``registry:`` section of fleetd.yaml: where this agent publishes its heartbeat.

With ``url`` set, the daemon's heartbeat job publishes this node's status row (health, GPU
counts, alert counts, remediation summary) to the shared PostgreSQL every
``heartbeat_interval``; ``fleetctl status --db URL`` then answers for the whole fleet from
one query, and shows a node whose last heartbeat is older than ``stale_after`` as stale.
``address`` is how fleetctl reaches this agent's API for the commands that need the agent
itself (explain, history, drain); by default ``http://<node name>:<http.port>``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator

from fleetd.configbase import Duration, HttpUrlText, Span, StrictModel, documents
from fleetd.store.config import DatabaseUrl


class RegistryConfig(StrictModel):
    """The fleet registry (PostgreSQL) this node publishes its heartbeat to."""

    url: DatabaseUrl = None  # a PostgreSQL URL may carry a password: never logged
    """PostgreSQL URL of the fleet registry, `postgresql://USER:PASSWORD@HOST/DB` (the installed
    driver is used, psycopg2 by default). Set: this node publishes its heartbeat there, and
    remediation's cap and breaker become fleet-wide.
    """
    address: HttpUrlText | None = Field(default=None, pattern=r"^https?://[^\s/]+$")
    """How fleetctl reaches this agent's API (`http(s)://host:port`); default
    `http(s)://<node.name>:<http.port>`.
    """
    heartbeat_interval: Annotated[Duration, Span(1, "1h")] = 15.0
    """How often this node's status row is published."""
    stale_after: Annotated[Duration, Span(0, "1d")] = Field(default=60.0, validate_default=True)
    """The age at which this node's heartbeat counts as stale. The agent does not act on it: readers
    judge staleness (`--stale-after` of every fleetctl command, default 60 s), so keep the two
    equal.
    """
    timeout: Annotated[Duration, Span(0, "1m", above=True)] = 5.0
    """Connect timeout of the registry database."""
    drift_tolerance: float = Field(default=0.0, ge=0.0, le=0.5)
    """Version drift: the share of its SKU group (0 to 0.5) a version other than the majority's
    may hold before it stops counting as drift — a canary cohort or a rollout under way. 0: every
    node not on its group's majority version raises `FleetdVersionDrift` (info).
    """
    drift_check_interval: Annotated[Duration, Span(0, "1d")] = 300.0
    """How often the heartbeat reads its SKU group's versions back (one grouped query over the
    group's rows: every beat of 10,000 nodes would be hundreds a second); at most once a beat.
    """
    drift_min_nodes: int = Field(default=3, ge=2)
    """Version drift is judged only in SKU groups with at least this many fresh nodes that
    report the component (two nodes have no majority worth the name).
    """

    @field_validator("stale_after")
    @classmethod
    @documents("stale_after must be at least twice heartbeat_interval")
    def _after_beats(cls, value: float, info: ValidationInfo) -> float:
        beat = info.data.get("heartbeat_interval")  # absent when it is wrong itself
        if beat is not None and value < 2 * beat:
            raise ValueError("stale_after must be at least twice heartbeat_interval")
        return value
