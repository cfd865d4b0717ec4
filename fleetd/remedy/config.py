"""The ``remediation:`` section of fleetd.yaml.

Dry-run is the default: a new install plans and logs every step and acts on nothing until an
operator sets ``mode: on``. Every wait is a duration here so tests and the benchmark can set
them to zero; the machine never sleeps, it is ticked.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from fleetd.configbase import Duration, Secret, StrictModel
from fleetd.remedy.commands import check_template


def _yaml_bool_mode(value: object) -> object:
    """YAML 1.1 reads a bare ``on``/``off`` as a boolean; accept what the operator meant."""
    if value is True:
        return "on"
    if value is False:
        return "off"
    return value


Mode = Annotated[Literal["off", "dry-run", "on"], BeforeValidator(_yaml_bool_mode)]
Action = Literal["reset", "quarantine", "reboot", "none"]

DEFAULT_PLANS: dict[str, Action] = {
    "reset": "reset",
    "quarantine": "quarantine",
    "reboot": "reboot",
}

Argv = list[str]
"""A command as an argument vector (no shell). ``{worker}``, ``{unit}``, ``{url}``, ``{gpus}``,
``{node}`` and ``{model}`` in any argument are replaced before it runs."""


def _argv(value: Argv | None, name: str) -> None:
    if value is None:
        return
    if not value or not value[0]:
        raise ValueError(f"{name} must be a non-empty list: [program, arg, ...]")
    check_template(value)


class BudgetConfig(StrictModel):
    """Resets allowed per GPU within a sliding window before the ladder escalates."""

    max_resets: int = Field(default=3, ge=1)
    window: Duration = 86400.0


class DrainConfig(StrictModel):
    """How a worker is taken out of service (integrations.md 1.6, steps 2–5)."""

    balancer_delay: Duration = 15.0
    poll_interval: Duration = 1.0
    idle_reads: int = Field(default=2, ge=1)
    timeout: Duration = 300.0
    on_timeout: Literal["proceed", "abort"] = "proceed"
    release_timeout: Duration = 60.0
    release_poll_interval: Duration = 2.0
    refuse_if_kfd_processes: bool = True


class BurnInConfig(StrictModel):
    command: Argv
    timeout: Duration = 600.0

    @model_validator(mode="after")
    def _check(self) -> BurnInConfig:
        _argv(self.command, "command")
        return self


class VerifyConfig(StrictModel):
    """What a reset unit must show before its workers come back."""

    healthy_polls: int = Field(default=3, ge=1)
    poll_interval: Duration = 5.0
    timeout: Duration = 300.0
    burn_in: BurnInConfig | None = None


class ReadmitConfig(StrictModel):
    """How long a restarted worker has to answer /health and list its model."""

    timeout: Duration = 900.0
    poll_interval: Duration = 5.0
    completion_check: bool = False


class HttpHookConfig(StrictModel):
    """An HTTP call to the load balancer; ``{worker}`` etc. are replaced in url and bodies."""

    out_url: str = Field(pattern=r"^https?://")
    in_url: str = Field(pattern=r"^https?://")
    method: Literal["POST", "PUT", "PATCH", "DELETE", "GET"] = "POST"
    out_body: str | None = None
    in_body: str | None = None
    token: Secret | None = None
    timeout: Duration = 10.0

    @model_validator(mode="after")
    def _templates(self) -> HttpHookConfig:
        check_template([t for t in (self.out_url, self.in_url, self.out_body, self.in_body) if t])
        return self


class RotationConfig(StrictModel):
    """How a systemd worker goes out of and back into rotation: commands or an HTTP call."""

    out_command: Argv | None = None
    in_command: Argv | None = None
    http: HttpHookConfig | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> RotationConfig:
        _argv(self.out_command, "out_command")
        _argv(self.in_command, "in_command")
        has_cmd = self.out_command is not None or self.in_command is not None
        if has_cmd and self.http is not None:
            raise ValueError("give either out_command/in_command or http, not both")
        if has_cmd and (self.out_command is None or self.in_command is None):
            raise ValueError("out_command and in_command go together")
        return self


class WorkerCommandsConfig(StrictModel):
    """User commands for routers and schedulers (Slurm, Kubernetes) — the ``command`` adapter.

    ``status`` prints the number of requests or jobs still in flight (0 means idle).
    ``ready`` exits 0 once the worker serves again. ``stop``/``start`` are optional.
    """

    drain: Argv
    undrain: Argv
    status: Argv
    ready: Argv | None = None
    stop: Argv | None = None
    start: Argv | None = None

    @model_validator(mode="after")
    def _check(self) -> WorkerCommandsConfig:
        for name in ("drain", "undrain", "status", "ready", "stop", "start"):
            _argv(getattr(self, name), name)
        return self


class WorkersConfig(StrictModel):
    adapter: Literal["systemd", "command"] = "systemd"
    systemctl: str = "systemctl"
    command_timeout: Duration = 30.0
    stop_timeout: Duration = 150.0
    http_timeout: Duration = 5.0
    rotation: RotationConfig | None = None
    commands: WorkerCommandsConfig | None = None

    @model_validator(mode="after")
    def _adapter_settings(self) -> WorkersConfig:
        if self.adapter == "command" and self.commands is None:
            raise ValueError("adapter 'command' needs a commands: section (drain, undrain, status)")
        return self


class RebootConfig(StrictModel):
    """The optional last rung before quarantine: ask something outside fleetd to reboot."""

    command: Argv
    timeout: Duration = 1800.0
    max_per_window: int = Field(default=1, ge=1)
    window: Duration = 86400.0

    @model_validator(mode="after")
    def _check(self) -> RebootConfig:
        _argv(self.command, "command")
        return self


class BreakerConfig(StrictModel):
    """Pause all automatic remediation when too many GPUs fail within a short window."""

    max_failures: int = Field(default=8, ge=1)
    window: Duration = 600.0


class FleetConfig(StrictModel):
    """Fleet-wide limits: shared by every node through the fleet registry's PostgreSQL when
    ``registry.url`` is set (one database for heartbeats, the cap and the breaker), per node
    otherwise."""

    max_gpus_out: int = Field(default=8, ge=1)
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    lease_timeout: Duration = 1800.0
    lease_retry_interval: Duration = 10.0


class RemediationConfig(StrictModel):
    """The whole ``remediation:`` section."""

    mode: Mode = "dry-run"
    reset_unit: Literal["hive", "gpu"] = "hive"
    plans: dict[str, Action] = Field(default_factory=lambda: dict(DEFAULT_PLANS))
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    probation: Duration = 7200.0
    drain: DrainConfig = Field(default_factory=DrainConfig)
    verify: VerifyConfig = Field(default_factory=VerifyConfig)
    readmit: ReadmitConfig = Field(default_factory=ReadmitConfig)
    workers: WorkersConfig = Field(default_factory=WorkersConfig)
    reboot: RebootConfig | None = None
    fleet: FleetConfig = Field(default_factory=FleetConfig)
