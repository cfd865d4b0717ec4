"""The ``registry:`` section of fleetd.yaml: where this agent publishes its heartbeat.

With ``url`` set, the daemon's heartbeat job publishes this node's status row (health, GPU
counts, alert counts, remediation summary) to the shared PostgreSQL every
``heartbeat_interval``; ``fleetctl status --db URL`` then answers for the whole fleet from
one query, and shows a node whose last heartbeat is older than ``stale_after`` as stale.
``address`` is how fleetctl reaches this agent's API for the commands that need the agent
itself (explain, history, drain); by default ``http://<node name>:<http.port>``.
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from fleetd.configbase import Duration, Secret, StrictModel
from fleetd.store.db import check_url


class RegistryConfig(StrictModel):
    url: Secret | None = None  # a PostgreSQL URL may carry a password: never logged
    address: str | None = Field(default=None, pattern=r"^https?://[^\s/]+$")
    heartbeat_interval: Duration = 15.0
    stale_after: Duration = 60.0
    timeout: Duration = 5.0

    @field_validator("url")
    @classmethod
    def _usable_url(cls, value: Secret | None) -> Secret | None:
        if value is not None:
            check_url(value.reveal())
        return value

    @model_validator(mode="after")
    def _sane(self) -> RegistryConfig:
        if not 1.0 <= self.heartbeat_interval <= 3600.0:
            raise ValueError("heartbeat_interval must be between 1s and 1h")
        if self.stale_after < 2 * self.heartbeat_interval:
            raise ValueError("stale_after must be at least twice heartbeat_interval")
        if not 0 < self.timeout <= 60:
            raise ValueError("timeout must be between 0s and 1m")
        return self
