"""fleetd.yaml: the typed configuration of the whole daemon, and the one loader for it.

The daemon, ``fleetd config check`` and SIGHUP reload all call ``load_config``; a bad file
raises ``ConfigError`` with every problem as ``file:line:col: key: message``.
Each subsystem owns its section model (``fleetd/<pkg>/config.py``); this module composes them.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fleetd.alert.config import AlertingConfig
from fleetd.api.config import ApiConfig
from fleetd.collect.config import CollectConfig
from fleetd.configbase import (
    Duration,
    Host,
    Path_,
    Span,
    StrictModel,
    documents,
    load_file,
)
from fleetd.events.config import EventsConfig
from fleetd.registry.config import RegistryConfig
from fleetd.remedy.config import RemediationConfig
from fleetd.rules.config import RulesConfig
from fleetd.store.config import StoreConfig
from fleetd.vllm.config import VllmConfig

DEFAULT_CONFIG_PATH = Path("/etc/fleetd/fleetd.yaml")
DEFAULT_STATE_DIR = Path("/var/lib/fleetd")
DEFAULT_HTTP_PORT = 9477
MAX_NODE_NAME = 128
"""Longest node name: it heads PagerDuty dedup keys (255 characters with the GPU, the rule
and the fingerprint after it) and is a Prometheus label value."""

REQUIRED_IN_FILE: tuple[Path_, ...] = (("alerting",), ("alerting", "receivers"))
"""What every fleetd.yaml must say, though the built-in config (``fleetd demo``, ``--simulate``
without a file) has defaults: where alerts go. A file without it (empty, cut short before
it, or an edit that lost it) would send every alert to the console only."""


class NodeConfig(StrictModel):
    """How this node names itself in alerts, the API and the fleet registry."""

    name: str = Field(
        default_factory=socket.gethostname,
        min_length=1,
        max_length=MAX_NODE_NAME,
        pattern=r"^[A-Za-z0-9]$|^[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]$",
    )
    """The node's name in alerts, the API, the event log and the fleet registry. fleetctl also uses
    it as the host name of the agent unless `registry.address` is set.
    """
    labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    """Extra labels for this node (e.g. `rack: r12`, `cluster: inference-eu`)."""


class BackendConfig(StrictModel):
    """Where GPU telemetry comes from: the real amdsmi library or the simulator."""

    kind: Literal["amdsmi", "simulator"] = "amdsmi"
    """`amdsmi`: the real library (needs ROCm's libamd_smi.so and `pip install fleetd[amd]`).
    `simulator`: the built-in simulated node, for demos and tests. `fleetd run --simulate
    SCENARIO` switches to the simulator whatever this says.
    """
    scenario: str | None = Field(default=None, min_length=1, max_length=4096)
    """Simulator only: a shipped scenario name (fleetd/sim/scenarios/, e.g. `demo`,
    `thermal_runaway`) or a scenario YAML file; unset: a node without faults.
    """
    simulated_model: Literal["MI300X", "MI355X"] = "MI355X"
    """Simulator only: the node it models when no scenario names one."""
    seed: StrictInt = Field(default=0, ge=0, le=2**32 - 1)
    """Simulator only: random seed (0 means the scenario's own seed)."""
    allow_unsafe_library: StrictBool = False
    """Start even when the amdsmi Python package and the node's libamd_smi.so are a pair known to
    misread or corrupt memory (e.g. the PyPI wheel 7.0.2 over ROCm 7.13). Leave false: install
    the Python package of the node's ROCm instead.
    """

    @field_validator("scenario")
    @classmethod
    @documents("scenario needs kind: simulator (or fleetd run --simulate)")
    def _simulator_only(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("kind", "amdsmi") != "simulator":
            raise ValueError("scenario needs kind: simulator (or fleetd run --simulate)")
        return value


class PollConfig(StrictModel):
    """Polling cadence and the per-GPU timeout that keeps one hung GPU from stalling the rest."""

    interval: Duration = 5.0
    """How often every GPU is read and the rules are evaluated. A poll that is still running when
    the next is due is not stacked: the next one is skipped and counted in
    `fleetd_polls_missed_total`.
    """
    gpu_timeout: Annotated[Duration, Span(0, "5m", above=True)] = 2.0
    """How long one GPU's reads may take in one poll. A GPU that overruns has its readings marked
    missing for that poll (never zero); the other GPUs are not delayed.
    """
    slow_interval: Annotated[Duration, Span(0, "1d", above=True)] = 30.0  # processes, slow calls
    """How often the slow reads (the processes on each GPU) are made; they stay out of every other
    poll.
    """

    @field_validator("interval")
    @classmethod
    @documents("poll interval must be between 1s and 1h")
    def _interval_range(cls, value: float) -> float:
        if not 1.0 <= value <= 3600.0:
            raise ValueError("poll interval must be between 1s and 1h")
        return value


class HttpConfig(StrictModel):
    """The HTTP server for /metrics, /healthz and the API."""

    bind: Host = "127.0.0.1"
    """Address to listen on. The default, 127.0.0.1, keeps the API and /metrics on this host; set
    the node's address (or 0.0.0.0) for Prometheus and fleetctl to reach it.
    """
    port: StrictInt = Field(default=DEFAULT_HTTP_PORT, ge=0, le=65535)  # 0: any free port
    """TCP port of /metrics, /healthz and /api/v1."""
    tls_cert: Path | None = None
    """PEM certificate (chain); with `tls_key`, the server speaks HTTPS."""
    tls_key: Path | None = None
    """PEM private key of `tls_cert`."""

    @model_validator(mode="after")
    @documents("set both tls_cert and tls_key for HTTPS, or neither")
    def _tls_pair(self) -> HttpConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("set both tls_cert and tls_key for HTTPS, or neither")
        return self


class LoggingConfig(StrictModel):
    """Logging: structured lines on standard error (journald under systemd)."""

    format: Literal["json", "console"] = "json"
    """`json`: one JSON object per line (for journald and log shippers). `console`: readable lines
    for people. `fleetd run --log-format` overrides it.
    """
    level: Literal["debug", "info", "warning", "error"] = "info"
    """Lowest level written."""


class FleetdConfig(StrictModel):
    """The whole of fleetd.yaml."""

    node: NodeConfig = Field(default_factory=NodeConfig)
    """How this node names itself."""
    state_dir: Path = DEFAULT_STATE_DIR
    """Directory for fleetd's own data: the SQLite database `fleetd.db` (unless `store.path` or
    `store.url` says otherwise). The systemd unit's `StateDirectory=fleetd` creates it.
    """
    backend: BackendConfig = Field(default_factory=BackendConfig)
    """Where GPU telemetry comes from."""
    poll: PollConfig = Field(default_factory=PollConfig)
    """Polling cadence and per-GPU timeout."""
    collect: CollectConfig = Field(default_factory=CollectConfig)
    """How fresh each tier of GPU readings must be (fast, slow, static)."""
    http: HttpConfig = Field(default_factory=HttpConfig)
    """The HTTP server (/metrics, /healthz, /api/v1)."""
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    """Log format and level."""
    vllm: VllmConfig = Field(default_factory=VllmConfig)
    """The vLLM workers on this node."""
    rules: RulesConfig = Field(default_factory=RulesConfig)
    """Which health rules run."""
    alerting: AlertingConfig = Field(default_factory=AlertingConfig)
    """Receivers, routing, inhibition and delivery of alerts. Required in a file."""
    store: StoreConfig = Field(default_factory=StoreConfig)
    """The local database and its retention."""
    api: ApiConfig = Field(default_factory=ApiConfig)
    """Who may change things through the API."""
    remediation: RemediationConfig = Field(default_factory=RemediationConfig)
    """Automatic remediation (dry-run by default)."""
    registry: RegistryConfig = Field(default_factory=RegistryConfig)
    """The fleet registry this node publishes its heartbeat to."""
    events: EventsConfig = Field(default_factory=EventsConfig)
    """Fault sources beyond polling: the kernel log and CPER records."""

    @field_validator("state_dir")
    @classmethod
    @documents("state_dir must be an absolute path (a daemon's directory is /)")
    def _absolute(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise ValueError("state_dir must be an absolute path (a daemon's directory is /)")
        return value


WORD_FIELDS = frozenset({("remediation", "mode")})
"""Fields whose values are words YAML 1.1 would read as booleans: ``mode: on`` means on, and
``mode: yes`` or ``true`` is refused rather than taken as on (it turns on real resets)."""


def load_config(path: str | Path) -> FleetdConfig:
    """Load and validate fleetd.yaml; raises ConfigError listing every problem.

    Stricter than the model: an empty file, a file cut short and a file without
    ``REQUIRED_IN_FILE`` are errors.
    """
    return load_file(
        FleetdConfig,
        path,
        required=REQUIRED_IN_FILE,
        top="a mapping of sections",
        words=WORD_FIELDS,
    )


def absent_gpus(config: FleetdConfig, present: set[int]) -> list[str]:
    """Warnings for vLLM workers that name GPU indexes this node does not have.

    Not an error: a GPU that fell off the bus is what fleetd must report, so the daemon
    still starts; the worker's telemetry and remediation see only its present GPUs.
    """
    out = []
    for worker in config.vllm.workers:
        missing = sorted(set(worker.gpus) - present)
        if missing:
            out.append(f"vllm worker {worker.name!r}: no GPU {missing} on this node")
    return out
