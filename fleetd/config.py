"""fleetd.yaml: the typed configuration of the whole daemon, and the one loader for it.

The daemon, ``fleetd config check`` and SIGHUP reload all call ``load_config``; a bad file
raises ``ConfigError`` with every problem as ``file:line:col: key: message``.
Each subsystem owns its section model (``fleetd/<pkg>/config.py``); this module composes them.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from fleetd.alert.config import AlertingConfig
from fleetd.api.config import ApiConfig
from fleetd.configbase import Duration, StrictModel, load_file
from fleetd.registry.config import RegistryConfig
from fleetd.remedy.config import RemediationConfig
from fleetd.rules.config import RulesConfig
from fleetd.store.config import StoreConfig

DEFAULT_CONFIG_PATH = Path("/etc/fleetd/fleetd.yaml")
DEFAULT_STATE_DIR = Path("/var/lib/fleetd")
DEFAULT_HTTP_PORT = 9477


class NodeConfig(StrictModel):
    """How this node names itself in alerts, the API and the fleet registry."""

    name: str = Field(default_factory=socket.gethostname, min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)


class BackendConfig(StrictModel):
    """Where GPU telemetry comes from: the real amdsmi library or the simulator."""

    kind: Literal["amdsmi", "simulator"] = "amdsmi"
    scenario: str | None = None  # simulator only: a shipped scenario name or a YAML path
    simulated_model: Literal["MI300X", "MI355X"] = "MI355X"
    seed: int = 0


class PollConfig(StrictModel):
    """Polling cadence and the per-GPU timeout that keeps one hung GPU from stalling the rest."""

    interval: Duration = 5.0
    gpu_timeout: Duration = 2.0
    slow_interval: Duration = 30.0  # processes and other slow calls

    @field_validator("interval")
    @classmethod
    def _interval_range(cls, value: float) -> float:
        if not 1.0 <= value <= 3600.0:
            raise ValueError("poll interval must be between 1s and 1h")
        return value

    @field_validator("gpu_timeout", "slow_interval")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be greater than zero")
        return value


class HttpConfig(StrictModel):
    """The HTTP server for /metrics, /healthz and the API."""

    bind: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_HTTP_PORT, ge=0, le=65535)
    tls_cert: Path | None = None
    tls_key: Path | None = None

    @model_validator(mode="after")
    def _tls_pair(self) -> HttpConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("set both tls_cert and tls_key for HTTPS, or neither")
        return self


class LoggingConfig(StrictModel):
    format: Literal["json", "console"] = "json"
    level: Literal["debug", "info", "warning", "error"] = "info"


class VllmWorkerConfig(StrictModel):
    """One vLLM server process and the GPUs it serves."""

    name: str = Field(min_length=1)
    url: str = Field(pattern=r"^https?://")
    gpus: list[int] = Field(min_length=1)
    unit: str | None = None  # systemd unit, e.g. vllm@3.service (remediation)
    model: str | None = None  # served model name, checked in /v1/models on re-admission


class VllmConfig(StrictModel):
    workers: list[VllmWorkerConfig] = Field(default_factory=list)
    scrape_interval: Duration = 5.0
    timeout: Duration = 2.0


class FleetdConfig(StrictModel):
    """The whole of fleetd.yaml."""

    node: NodeConfig = Field(default_factory=NodeConfig)
    state_dir: Path = DEFAULT_STATE_DIR
    backend: BackendConfig = Field(default_factory=BackendConfig)
    poll: PollConfig = Field(default_factory=PollConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    vllm: VllmConfig = Field(default_factory=VllmConfig)
    rules: RulesConfig = Field(default_factory=RulesConfig)
    alerting: AlertingConfig = Field(default_factory=AlertingConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    api: ApiConfig = Field(default_factory=ApiConfig)
    remediation: RemediationConfig = Field(default_factory=RemediationConfig)
    registry: RegistryConfig = Field(default_factory=RegistryConfig)


def load_config(path: str | Path) -> FleetdConfig:
    """Load and validate fleetd.yaml; raises ConfigError listing every problem."""
    return load_file(FleetdConfig, path)
