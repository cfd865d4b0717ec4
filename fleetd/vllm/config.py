"""The ``vllm:`` section of fleetd.yaml: the vLLM servers on this node and the GPUs each serves.

The collector, the remediation worker adapters and the demo take these models alone, never
the whole ``FleetdConfig``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictBool, StrictInt, ValidationError, field_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from fleetd.configbase import Duration, HttpUrlText, Span, StrictModel, documents

MAX_GPU_INDEX = 1023
"""GPU indexes are 0 to this (a node has at most a few dozen; 1024 leaves room)."""


class VllmWorkerConfig(StrictModel):
    """One vLLM server process and the GPUs it serves."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@:-]+$")
    """The worker's name (labels, the API, `{worker}` in remediation commands)."""
    url: HttpUrlText
    """Base URL of the vLLM server: fleetd reads `/metrics` and `/health` for telemetry, and
    `/v1/models` (and optionally a 1-token completion) when re-admitting it.
    """
    gpus: list[Annotated[StrictInt, Field(ge=0, le=MAX_GPU_INDEX)]] = Field(
        min_length=1, max_length=MAX_GPU_INDEX + 1
    )
    """GPU indices the worker runs on (what HIP_VISIBLE_DEVICES gives it). Remediation drains every
    worker with a GPU in the reset unit. On a partitioned node (CPX, DPX, QPX) each partition is
    a GPU index of its own (64 on an 8-GPU CPX node): a worker may own one or more partitions,
    and no two workers the same one.
    """
    unit: str | None = Field(default=None, min_length=1, max_length=256)  # e.g. vllm@3.service
    """The worker's systemd unit (e.g. `vllm@3.service`), which remediation's `systemd` adapter
    stops and starts.
    """
    model: str | None = Field(default=None, min_length=1, max_length=1024)  # in /v1/models
    """The served model name; re-admission waits until `/v1/models` lists it. Unset: any listed
    model will do.
    """

    @field_validator("gpus")
    @classmethod
    @documents("GPU indexes must be unique: … more than once")
    def _unique(cls, value: list[int]) -> list[int]:
        repeated = sorted({i for i in value if value.count(i) > 1})
        if repeated:
            raise ValueError(f"GPU indexes must be unique: {repeated} more than once")
        return value


class PeersConfig(StrictModel):
    """Gray-failure detection: each worker's decode speed against the other workers serving
    the same model on the node (docs/rules.md, "Gray failure"); the `VllmGrayFailure` rule
    alerts on a persistent outlier."""

    enabled: StrictBool = True
    """Compare the workers with their peers after each scrape."""
    window: Annotated[Duration, Span(30, "1h")] = 300.0
    """The window each worker's figures are taken over."""
    min_peers: StrictInt = Field(default=3, ge=2, le=1024)
    """Fewest other workers with data (same model) for a verdict; fewer: none, and
    `fleetd_vllm_peer_compared` says 0."""
    z: float = Field(default=4.0, gt=0, le=100)
    """Robust z-score (against the peers' median and scaled MAD) a worker must exceed."""
    min_slowdown: float = Field(default=0.15, gt=0, le=10)
    """...and how much slower than the peers' median it must also be (0.15: 15 %)."""
    mad_floor: float = Field(default=0.05, ge=0, le=1)
    """The MAD is taken as at least this fraction of the median, so near-identical peers do not
    turn a small wobble into a large z-score."""
    clock_drop: float = Field(default=0.1, gt=0, lt=1)
    """Attribution: a GPU whose average gfx clock is this much below its peers' points at the
    hardware."""
    throttle_ratio: float = Field(default=0.1, gt=0, le=1)
    """Attribution: a GPU throttled this much more of the time than its peers points at the
    hardware."""
    load_factor: float = Field(default=1.5, gt=1, le=100)
    """Attribution: running requests or prompt tokens per request more than this factor away
    from the peers' median means the traffic differs (workload)."""
    fleet: StrictBool = True
    """With a registry configured: publish the workers' figures with the heartbeat and compare
    each hive with the fleet's hives of the same SKU serving the same model (a node whose GPUs
    are all equally slow is invisible to the node-local comparison)."""
    fleet_min_peers: StrictInt = Field(default=3, ge=2, le=100000)
    """Fewest peer hives (other nodes', same SKU and model, fresh) for a fleet verdict; fewer:
    none, and `fleetd_vllm_peer_compared{level="hive"}` says 0."""


DEFAULT_PROMPTS = (
    "Explain in one paragraph why the sky is blue.",
    "Write a short Python function that reverses a string.",
    "List three uses of a graphics processor other than graphics.",
)


class BenchmarkConfig(StrictModel):
    """The readmission benchmark (docs/remediation.md, "Benchmark gate"): a short fixed probe
    per worker, recorded on a healthy hive by `fleetctl baseline capture NODE` and run again
    after a reset, before the worker goes back into rotation. No baseline: the probe is
    skipped and the run says so."""

    enabled: StrictBool = True
    """Run the probe at re-admission (for workers that have a baseline)."""
    requests: StrictInt = Field(default=8, ge=1, le=1000)
    """Completions in one probe, sent one at a time."""
    warmup: StrictInt = Field(default=1, ge=0, le=100)
    """Completions sent first and not counted (a freshly started engine's first request pays
    for cold caches that a warm baseline never saw)."""
    max_tokens: StrictInt = Field(default=64, ge=2, le=4096)
    """Tokens generated per completion (sent with `ignore_eos`, so each produces them all)."""
    prompts: list[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        default_factory=lambda: list(DEFAULT_PROMPTS), min_length=1, max_length=100
    )
    """Fixed prompts, used in turn; the baseline and later probes must use the same ones."""
    tolerance: float = Field(default=0.8, gt=0, le=1)
    """Tokens/s must reach the baseline's × this, or the worker is quarantined."""
    latency_factor: float | None = Field(default=2.0, ge=1, le=100)
    """TTFT p99 and TPOT p99 may be at most the baseline's × this (looser than `tolerance`:
    a p99 over a few requests is their worst one, and moves more than the average). Null: the
    latencies are reported but only tokens/s decides."""
    timeout: Annotated[Duration, Span(0, "10m", above=True)] = 60.0
    """How long one probe completion may take."""


class VllmConfig(StrictModel):
    """The vLLM servers on this node, scraped for telemetry and drained by remediation."""

    workers: list[VllmWorkerConfig] = Field(default_factory=list, max_length=1024)
    """The vLLM servers on this node; none means no vLLM telemetry."""
    scrape_interval: Annotated[Duration, Span(1, "1h")] = 5.0
    """How often each worker's /metrics and /health are read."""
    timeout: Annotated[Duration, Span(0, "1m", above=True)] = 2.0
    """How long one worker has to answer a scrape."""
    peers: PeersConfig = Field(default_factory=PeersConfig)
    """Gray-failure detection against the node's other workers."""
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)
    """The per-worker probe that gates re-admission after a reset."""

    @field_validator("workers")
    @classmethod
    @documents("worker names must be unique: …")
    def _unique_names(cls, value: list[VllmWorkerConfig]) -> list[VllmWorkerConfig]:
        names = [w.name for w in value]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"worker names must be unique: {', '.join(repeated)}")
        return value

    @field_validator("workers")
    @classmethod
    @documents("GPU … is claimed by worker … and worker …: a GPU or partition has one worker")
    def _one_worker_per_gpu(cls, value: list[VllmWorkerConfig]) -> list[VllmWorkerConfig]:
        """Two workers on one GPU index (one partition, on a partitioned node) would both be
        killed by its reset and fight over its memory: an error at the second claim."""
        owner: dict[int, str] = {}
        claims: list[InitErrorDetails] = []
        for i, worker in enumerate(value):
            for j, gpu in enumerate(worker.gpus):
                first = owner.setdefault(gpu, worker.name)
                if first != worker.name:
                    message = (
                        f"GPU {gpu} is claimed by worker {first!r} and worker {worker.name!r}: "
                        "a GPU or partition has one worker"
                    )
                    claims.append(
                        InitErrorDetails(
                            type=PydanticCustomError("value_error", message),
                            loc=(i, "gpus", j),
                            input=gpu,
                        )
                    )
        if claims:
            raise ValidationError.from_exception_data(cls.__name__, claims)
        return value
