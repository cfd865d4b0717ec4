"""The ``remediation:`` section of fleetd.yaml.

Dry-run is the default: a new install plans and logs every step and acts on nothing until an
operator sets ``mode: on``. Every wait is a duration here so tests and the benchmark can set
them to zero; the machine never sleeps, it is ticked.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, StrictBool, StrictInt, model_validator

from fleetd.configbase import Duration, Secret, Span, StrictModel, documents
from fleetd.remedy.caps import Cap, check_group_by
from fleetd.remedy.commands import check_template
from fleetd.remedy.holders import DEFAULT_MONITORING_AGENTS
from fleetd.remedy.proactive_config import ProactiveConfig
from fleetd.remedy.validation_config import ValidationConfig


def _yaml_bool_mode(value: object) -> object:
    """YAML 1.1 reads a bare ``on``/``off`` as a boolean. The config loader keeps the word
    written here (``config.WORD_FIELDS``): ``On``/``OFF`` are the mode meant, while ``yes`` or
    ``true`` are refused, not taken as ``on`` (the mode that resets GPUs). A bool (from code)
    is on or off."""
    if value is True:
        return "on"
    if value is False:
        return "off"
    if isinstance(value, str) and value.lower() in ("on", "off"):
        return value.lower()
    if isinstance(value, str) and value.lower() in ("yes", "no", "true", "false", "y", "n"):
        raise ValueError(f"{value!r} is not a mode: write off, dry-run or on")
    return value


Mode = Annotated[Literal["off", "dry-run", "on"], BeforeValidator(_yaml_bool_mode)]
Action = Literal["reset", "quarantine", "reboot", "afid", "none"]

DEFAULT_PLANS: dict[str, Action] = {
    "reset": "reset",
    "quarantine": "quarantine",
    "reboot": "reboot",
    "afid": "afid",
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

    max_resets: StrictInt = Field(default=3, ge=1, le=100)
    """Resets allowed per GPU within `window`."""
    window: Annotated[Duration, Span(0, "30d")] = 86400.0
    """The sliding window of the reset budget."""


class DrainConfig(StrictModel):
    """How a worker is taken out of service (integrations.md 1.6, steps 2–5)."""

    balancer_delay: Annotated[Duration, Span(0, "1h")] = 15.0
    """Wait after the out-of-rotation hook, for the load balancer to stop sending requests."""
    poll_interval: Annotated[Duration, Span(0, "5m")] = 1.0
    """How often a draining worker's in-flight requests are read."""
    idle_reads: StrictInt = Field(default=2, ge=1, le=100)
    """Consecutive reads with `vllm:num_requests_running` + `vllm:num_requests_waiting` = 0 that
    count as drained.
    """
    timeout: Annotated[Duration, Span(0, "1d")] = 300.0
    """Longest wait for the workers to drain."""
    on_timeout: Literal["proceed", "abort"] = "proceed"
    """`proceed`: stop the workers anyway (vLLM's `--shutdown-timeout` still finishes what it can).
    `abort`: put the workers back into rotation and page instead of resetting.
    """
    release_timeout: Annotated[Duration, Span(0, "1h")] = 60.0
    """Longest wait, after the stop, for every process to let go of the unit's GPUs; then the reset
    is refused and the unit quarantined.
    """
    release_poll_interval: Annotated[Duration, Span(0, "5m")] = 2.0
    """How often the GPUs' process lists are read meanwhile."""
    refuse_if_kfd_processes: StrictBool = True
    """Refuse a reset while any KFD (compute) process with VRAM or queues runs on the node: a hive
    reset kills every one of them, not only those on the drained GPUs. fleetd itself and the
    `monitoring_agents` never count.
    """
    monitoring_agents: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=lambda: list(DEFAULT_MONITORING_AGENTS), max_length=64
    )
    """Processes that hold /dev/kfd or a GPU to watch it, not to compute (gpuagent, rdcd,
    amd-smi, …), by process name, executable or systemd unit: they never hold a reset back.
    """


class BurnInConfig(StrictModel):
    """A command run after a reset's verification, before workers come back."""

    command: Argv
    """Command (argument vector, no shell) that exercises the GPUs after a reset; exit 0 passes.
    `{gpus}` and `{node}` are replaced.
    """
    timeout: Annotated[Duration, Span(0, "1d")] = 600.0
    """How long the burn-in may run; on expiry it is killed and fails."""

    @model_validator(mode="after")
    @documents()
    def _check(self) -> BurnInConfig:
        _argv(self.command, "command")
        return self


class VerifyConfig(StrictModel):
    """What a reset unit must show before its workers come back.

    Verification does not wait out GpuEccUncorrectableError's 10-minute window (a driver that
    keeps its RAS counts across a reset holds that rule's condition until the window has moved
    past the fault): it judges the uncorrectable counts itself, against the pre-reset baseline
    (docs/remediation.md).
    """

    healthy_polls: StrictInt = Field(default=3, ge=1, le=100)
    """Consecutive healthy polls every GPU of the unit needs after the reset: up, PCIe at its
    maximum width and speed, every XGMI link up, no new uncorrectable errors.
    """
    poll_interval: Annotated[Duration, Span(0, "5m")] = 5.0
    """Time between verification polls."""
    timeout: Annotated[Duration, Span(0, "1d")] = 900.0
    """Longest verification; a unit not healthy by then is quarantined."""
    burn_in: BurnInConfig | None = None
    """Optional burn-in command run after verification passes."""
    reapply_partitions: StrictBool = True
    """After a reset, put a GPU whose compute/memory partition mode changed (a reset or driver
    reload can return it to SPX/NPS1) back in the mode it had before, through amdsmi's
    partition-setting calls. A mode that differs and will not re-apply (or differs with this
    off) holds verification until it times out: the unit is quarantined and a person paged.
    """


class ReadmitConfig(StrictModel):
    """How long a restarted worker has to answer /health and list its model."""

    timeout: Annotated[Duration, Span(0, "1d")] = 900.0
    """How long a restarted worker has to answer /health and list its model (loading a large model
    takes minutes).
    """
    poll_interval: Annotated[Duration, Span(0, "5m")] = 5.0
    """How often a restarted worker is checked."""
    completion_check: StrictBool = True
    """Also require a 1-token completion to succeed before the worker goes back into rotation
    (after `/health` and `/v1/models`, which both still answer 200 when the engine hangs, so
    only a generated token shows it serves; vllm-project/vllm#39863).
    """


class HttpHookConfig(StrictModel):
    """An HTTP call to the load balancer; ``{worker}`` etc. are replaced in url and bodies."""

    out_url: str = Field(pattern=r"^https?://")
    """URL called to take a worker out of rotation."""
    in_url: str = Field(pattern=r"^https?://")
    """URL called to put it back."""
    method: Literal["POST", "PUT", "PATCH", "DELETE", "GET"] = "POST"
    """HTTP method of both calls."""
    out_body: str | None = None
    """Request body of the out call (JSON; placeholders replaced)."""
    in_body: str | None = None
    """Request body of the in call."""
    token: Secret | None = None
    """Bearer token sent to the load balancer's API."""
    timeout: Annotated[Duration, Span(0, "5m")] = 10.0
    """How long one call may take."""

    @model_validator(mode="after")
    @documents()
    def _templates(self) -> HttpHookConfig:
        check_template([t for t in (self.out_url, self.in_url, self.out_body, self.in_body) if t])
        return self


class RotationConfig(StrictModel):
    """How a systemd worker goes out of and back into rotation: commands or an HTTP call."""

    out_command: Argv | None = None
    """Command that takes `{worker}` out of the load balancer's rotation (e.g. a HAProxy
    runtime-socket call).
    """
    in_command: Argv | None = None
    """Command that puts it back."""
    http: HttpHookConfig | None = None
    """An HTTP call to the load balancer's API instead of commands."""

    @model_validator(mode="after")
    @documents(
        "give either out_command/in_command or http, not both",
        "out_command and in_command go together",
    )
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
    ``ready`` exits 0 once the worker serves again; it runs before ``undrain``, so it must
    answer while the worker is drained. A reset needs the GPUs free, so either ``stop`` ends
    the worker's process (and ``start`` brings it back), or ``drain_stops_worker: true``
    says the ``drain`` command itself ends it (``undrain`` then brings it back).
    ``probe`` says when fleetd's own HTTP readiness probe (the 1-token completion of
    ``readmit.completion_check``) runs: ``after_undrain`` (the default) works whether the
    drain is a router's or the worker's own (a worker that enforces its drain rejects a
    probe sent before ``undrain``; one that fails the probe is drained again and held);
    ``before_undrain`` keeps a worker that fails it from ever taking traffic, for drains
    that happen in a router in front of the worker.
    """

    drain: Argv
    """Stop sending work to `{worker}`."""
    undrain: Argv
    """Send work to `{worker}` again."""
    status: Argv
    """Print the number of requests or jobs in flight (0 = idle)."""
    ready: Argv | None = None
    """Exit 0 once the worker serves again; runs before `undrain`, so it must answer while drained.
    Unset: the vLLM HTTP checks and the `probe` are used.
    """
    stop: Argv | None = None
    """Stop the worker's processes, freeing its GPUs (see `drain_stops_worker`)."""
    start: Argv | None = None
    """Start them again (required with `stop`)."""
    drain_stops_worker: StrictBool = False
    """The `drain` command itself ends the worker's process, so no `stop` is needed (`undrain`
    brings it back). Without it, `stop` and `start` are required: a worker left running keeps its
    GPUs and every reset would be refused.
    """
    probe: Literal["after_undrain", "before_undrain"] = "after_undrain"
    """When fleetd's 1-token completion probe runs: `after_undrain` works whether the drain is a
    router's or the worker's own (one that fails is drained again); `before_undrain` keeps a
    failing worker from any traffic, for router drains only.
    """

    @model_validator(mode="after")
    @documents(
        "no stop command: the workers would keep their GPUs and every reset would be refused; "
        "give stop (and start), or set drain_stops_worker: true if the drain command itself "
        "ends the worker's process",
        "a stop command needs a start command to bring the worker back",
        "give a stop command or drain_stops_worker: true, not both",
    )
    def _check(self) -> WorkerCommandsConfig:
        for name in ("drain", "undrain", "status", "ready", "stop", "start"):
            _argv(getattr(self, name), name)
        if self.stop is None and not self.drain_stops_worker:
            raise ValueError(
                "no stop command: the workers would keep their GPUs and every reset would be "
                "refused; give stop (and start), or set drain_stops_worker: true if the drain "
                "command itself ends the worker's process"
            )
        if self.stop is not None and self.start is None:
            raise ValueError("a stop command needs a start command to bring the worker back")
        if self.stop is not None and self.drain_stops_worker:
            raise ValueError("give a stop command or drain_stops_worker: true, not both")
        return self


class WorkersConfig(StrictModel):
    """How remediation takes workers out of service and back."""

    adapter: Literal["systemd", "command"] = "systemd"
    """`systemd`: workers are systemd units (`vllm.workers[].unit`) behind an optional rotation
    hook. `command`: your own commands (Slurm, Kubernetes, a router).
    """
    systemctl: str = "systemctl"
    """The systemctl program (found on PATH)."""
    command_timeout: Annotated[Duration, Span(0, "1h")] = 30.0
    """Timeout of rotation hooks, `systemctl start`/`is-active` and adapter commands."""
    stop_timeout: Annotated[Duration, Span(0, "1h")] = 150.0
    """Timeout of `systemctl stop`; keep it above the unit's `TimeoutStopSec` (90 s in
    systemd/vllm@.service).
    """
    http_timeout: Annotated[Duration, Span(0, "5m")] = 5.0
    """Timeout of the HTTP reads of a worker (/metrics, /health)."""
    rotation: RotationConfig | None = None
    """The systemd adapter's load-balancer hook; unset: no rotation step."""
    commands: WorkerCommandsConfig | None = None
    """The `command` adapter's commands."""

    @model_validator(mode="after")
    @documents("adapter 'command' needs a commands: section (drain, undrain, status)")
    def _adapter_settings(self) -> WorkersConfig:
        if self.adapter == "command" and self.commands is None:
            raise ValueError("adapter 'command' needs a commands: section (drain, undrain, status)")
        return self


class RebootConfig(StrictModel):
    """The optional last rung before quarantine: ask something outside fleetd to reboot."""

    command: Argv
    """Command that reboots the node, or asks your scheduler to (`{node}`, `{gpus}` replaced). After
    the reboot the new daemon verifies the GPUs.
    """
    timeout: Annotated[Duration, Span(0, "1d")] = 1800.0
    """How long the node has to go down after the request; a node still up then is quarantined."""
    max_per_window: StrictInt = Field(default=1, ge=1, le=100)
    """Reboots allowed per `window`; beyond: quarantine."""
    window: Annotated[Duration, Span(0, "30d")] = 86400.0
    """The sliding window of the reboot budget."""

    @model_validator(mode="after")
    @documents()
    def _check(self) -> RebootConfig:
        _argv(self.command, "command")
        return self


class CapConfig(StrictModel):
    """A cap on the physical GPUs out of service in each group of nodes sharing some labels."""

    group_by: list[str] = Field(default_factory=list, max_length=8)
    """Node labels that form the groups (`node.labels`, and `node` for the node's name): one
    group per distinct value, e.g. `[cluster]` or `[cluster, rack]`; `[]`: the whole fleet. A
    node without a label is in the group whose value is empty.
    """
    max: StrictInt | str
    """Physical GPUs each group may have out at once (a partitioned node's 64 devices are its 8
    GPUs): a count (`16`), or a percentage of the group's GPUs (`10%`, rounded down; the group's
    size is the GPUs of its nodes with a fresh heartbeat in the registry).
    """

    @model_validator(mode="after")
    @documents(
        "max is a whole count of GPUs or a percentage above 0% and at most 100%",
        "group_by holds label names, each once",
    )
    def _check(self) -> CapConfig:
        Cap.of(self.group_by, self.max)  # raises ValueError with the reason
        return self

    def cap(self) -> Cap:
        return Cap.of(self.group_by, self.max)


class GroupBreakerConfig(StrictModel):
    """A circuit breaker per group of nodes sharing some labels (one rack, one cluster)."""

    group_by: list[str] = Field(min_length=1, max_length=8)
    """Node labels that form the groups, e.g. `[rack]`."""
    max_failures: StrictInt = Field(ge=1, le=100_000)
    """Distinct GPUs of one group failing within the breaker's `window` that open that group's
    breaker (automatic runs of the group's nodes stop; the rest of the fleet goes on).
    """

    @model_validator(mode="after")
    @documents("group_by holds label names, each once")
    def _check(self) -> GroupBreakerConfig:
        check_group_by(self.group_by)
        return self


class BreakerConfig(StrictModel):
    """Pause all automatic remediation when too many GPUs fail within a short window."""

    max_failures: StrictInt = Field(default=8, ge=1, le=100_000)
    """Distinct GPUs whose faults asked for automatic remediation within `window` that open the
    breaker (counted fleet-wide with a registry). It stays open until a person resets it.
    """
    window: Annotated[Duration, Span(0, "30d")] = 600.0
    """The breaker's window."""
    groups: list[GroupBreakerConfig] = Field(default_factory=list, max_length=16)
    """Breakers per label group besides the fleet-wide one (with a registry): e.g. `[{group_by:
    [rack], max_failures: 3}]` stops one rack's automatic runs when 3 of its GPUs fail together.
    """


class FleetConfig(StrictModel):
    """Fleet-wide limits: shared by every node through the fleet registry's PostgreSQL when
    ``registry.url`` is set (one database for heartbeats, the cap and the breaker), per node
    otherwise."""

    max_gpus_out: StrictInt = Field(default=8, ge=1, le=1_000_000)
    """Most GPUs out of service at once (fleet-wide with a registry, else on this node): GPUs in a
    run or held after one. An automatic run that would exceed it waits; a person's drain is
    counted but never refused.
    """
    caps: list[CapConfig] = Field(default_factory=list, max_length=16)
    """Caps per label group besides `max_gpus_out` (with a registry; without one only
    `max_gpus_out` applies), e.g. `[{group_by: [cluster], max: 10%}, {group_by: [rack], max:
    8}]`. An automatic run waits until every cap holds; caps set with `fleetctl remediation cap
    add` apply as well. A remediation wave that would newly enable more GPUs in a group than its
    cap is refused (docs/operations.md).
    """
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    """Stops automatic remediation when too many GPUs fail together."""
    lease_timeout: Annotated[Duration, Span(0, "1d")] = 1800.0
    """How long a planned run may wait for the cap (and for the run ahead of it on this node) before
    it gives up.
    """
    lease_retry_interval: Annotated[Duration, Span(0, "1h")] = 10.0
    """How often a waiting run asks again."""

    def all_caps(self) -> list[Cap]:
        """Every cap this file sets: `max_gpus_out` over the whole fleet, then `caps`."""
        return [Cap((), count=self.max_gpus_out), *(c.cap() for c in self.caps)]


class EvidenceConfig(StrictModel):
    """The evidence bundle: what a reset destroys, kept for the engineer who decides on an RMA
    (docs/remediation.md, "Evidence bundle")."""

    enabled: StrictBool = True
    """Capture a bundle before every reset and again when a run quarantines."""
    timeout: Annotated[Duration, Span(0, "1m")] = 5.0
    """The longest a capture may hold up the reset; past it the capture is abandoned, the
    failure journaled and the reset goes ahead."""
    max_bundle_bytes: StrictInt = Field(default=16 * 1024 * 1024, ge=4096, le=1 << 34)
    """Size cap of one compressed bundle: the bulkiest sections (events, then the raw GPU
    reads) are cut, and the cut named in the bundle, until it fits."""
    max_total_bytes: StrictInt = Field(default=512 * 1024 * 1024, ge=4096, le=1 << 40)
    """Every bundle together under `<state_dir>/evidence/`; the oldest go first."""
    keep: StrictInt = Field(default=200, ge=1, le=100_000)
    """At most this many bundles are kept; the oldest go first."""
    events_lookback: Annotated[Duration, Span(0, "7d")] = 3600.0
    """CPER records and kernel events since the last bundle, but no further back than this."""


class RemediationConfig(StrictModel):
    """The whole ``remediation:`` section."""

    mode: Mode = "dry-run"
    """`off`: no automatic runs. `dry-run`: runs are planned, journaled and announced, nothing is
    touched. `on`: fleetd acts. A person's drain/undrain/cancel always acts.
    """
    reset_unit: Literal["hive", "gpu"] = "hive"
    """The GPUs one reset reaches: `hive` (every GPU of the XGMI hive, right for MI300/MI350-class
    nodes) or `gpu` (only for GPUs that are not in a hive).
    """
    plans: dict[str, Action] = Field(default_factory=lambda: dict(DEFAULT_PLANS))
    """What a rule's `remediation: {plan: NAME}` does: `reset`, `quarantine`, `reboot`, `afid`
    (the action the alert's CPER AFID names in the AFID table: physical ⇒ quarantine, reboot ⇒
    the reboot rung, reset ⇒ reset, none ⇒ no run) or `none` (switched off).
    """
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    """Resets per GPU before the ladder escalates."""
    probation: Annotated[Duration, Span(0, "30d")] = 7200.0
    """A GPU that faults again this soon after being re-admitted escalates at once."""
    drain: DrainConfig = Field(default_factory=DrainConfig)
    """How workers are taken out of service."""
    verify: VerifyConfig = Field(default_factory=VerifyConfig)
    """What a reset unit must show before its workers come back."""
    readmit: ReadmitConfig = Field(default_factory=ReadmitConfig)
    """How restarted workers are checked before they take traffic."""
    workers: WorkersConfig = Field(default_factory=WorkersConfig)
    """How fleetd controls the vLLM workers."""
    reboot: RebootConfig | None = None
    """Optional rung between reset and quarantine: a command that reboots the node."""
    fleet: FleetConfig = Field(default_factory=FleetConfig)
    """Cap on GPUs out of service and the circuit breaker."""
    evidence: EvidenceConfig = Field(default_factory=EvidenceConfig)
    """The evidence bundle captured before a reset and on quarantine."""
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    """The validation ladder run before workers come back, and the RMA ticket hook."""
    kpi_window: Annotated[Duration, Span(3600, "90d")] = 604800.0
    """The window of the reliability KPIs and rule precision (`GET /api/v1/report`, `fleetctl
    report`, the `fleetd_kpi_*` series): runs and alerts of the last this long."""
    proactive: ProactiveConfig = Field(default_factory=ProactiveConfig)
    """Rolling proactive validation: each hive drained and validated on a schedule when the
    node has headroom."""

    @model_validator(mode="after")
    @documents("proactive.enabled needs a ladder: validation.plans.proactive")
    def _proactive_ladder(self) -> RemediationConfig:
        if self.proactive.enabled and not self.validation.plans.get("proactive"):
            raise ValueError("proactive.enabled needs a ladder: validation.plans.proactive")
        return self
