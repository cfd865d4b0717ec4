"""Gray failure: a worker that decodes markedly slower than its peers on the node, and why.

Every GPU of a node is the same SKU, so the workers serving the same model on it are peers.
Over a window (default 5 minutes) each worker gets a *decode time per token* — the mean
inter-token latency from its histogram's ``_sum``/``_count``, or, where the server exports no
such histogram, the time per generated token of one running request (average running requests
over generation tokens per second) — and the workers' figures are compared robustly:

* the reference is the median of the *other* workers and the spread their MAD (median absolute
  deviation, scaled by 1.4826 to read as a standard deviation), floored at ``mad_floor`` of the
  median so identical peers do not turn a 1 % wobble into a verdict;
* a worker is an outlier when its robust z-score is above ``z`` *and* it is at least
  ``min_slowdown`` slower than the median: both, because a z-score alone flags tiny absolute
  differences when peers are very alike, and a ratio alone flags noise when they are not;
* fewer than ``min_peers`` peers with data gives no verdict (``fleetd_vllm_peer_compared`` 0),
  never a false alarm; a worker whose metrics are missing, stale or down is neither judged nor
  anyone's peer. Persistence is the rule's ``for`` (``VllmGrayFailure``, 10 minutes).

Attribution of an outlier, in this order:

* **hardware** — one of its GPUs shows a signal its peers do not: gfx clock ``clock_drop``
  below the peers' median, throttled for ``throttle_ratio`` of the time more than they are, a PCIe
  link narrower than its maximum, PCIe replays or correctable ECC errors while the peers have
  none (or several times theirs);
* **workload** — the traffic differs: average running requests (batch size) or prompt tokens
  per request more than ``load_factor`` times (or less than 1/``load_factor``) the peers' median,
  so the comparison is not like for like;
* **engine** — neither: the worker's own engine (its queue, preemptions, a bad build or
  setting) is the suspect, and restarting the worker is the suggested action.

The verdicts are readings (``fleetd_vllm_peer_slowdown_ratio{worker, gpu, model, attribution,
peers}`` for an outlier, ``fleetd_vllm_peer_compared{worker, model}`` for everyone) so the
rules, the store and /metrics see them like any other series.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fleetd.model import Labels, Reading, SeriesKey, make_labels
from fleetd.query import Matcher, Query
from fleetd.vllm.collector import GENERATION_TOKENS, RUNNING, TOKENS_PER_JOULE, UP
from fleetd.vllm.config import PeersConfig, VllmWorkerConfig
from fleetd.vllm.fleet import FleetVerdict, FleetView, ServingFigure, judge_fleet
from fleetd.vllm.robust import robust_z as robust_z

SLOWDOWN = "fleetd_vllm_peer_slowdown_ratio"
COMPARED = "fleetd_vllm_peer_compared"

ITL = "fleetd_vllm_inter_token_latency_seconds"
E2E_COUNT = "fleetd_vllm_e2e_request_latency_seconds_count"
PROMPT = "fleetd_vllm_prompt_tokens_total"
CLOCK = "fleetd_gpu_clock_hertz"
THROTTLE = "fleetd_gpu_throttle_ratio"
WIDTH = "fleetd_gpu_pcie_link_width_lanes"
MAX_WIDTH = "fleetd_gpu_pcie_link_max_width_lanes"
REPLAYS = "fleetd_gpu_pcie_replays_total"
ECC = "fleetd_gpu_ecc_errors_total"


@dataclass(frozen=True, slots=True)
class GpuSignals:
    """One GPU over the window; None where the reading is missing."""

    clock_hz: float | None = None
    throttle: float | None = None
    narrow_link: bool = False
    replays: float | None = None
    ecc_ce: float | None = None


@dataclass(frozen=True, slots=True)
class WorkerFigures:
    """One worker over the window: what is compared and what explains it."""

    name: str
    model: str
    gpus: tuple[int, ...]
    per_token_s: float | None
    batch: float | None
    prompt_per_request: float | None
    hardware: Mapping[int, GpuSignals] = field(default_factory=dict)
    tokens_per_joule: float | None = None

    def serving_figure(self, node: str, sku: str, hive: str, now: float) -> ServingFigure:
        """What the heartbeat publishes of this worker (medians over its GPUs)."""
        clocks = [s.clock_hz for s in self.hardware.values() if s.clock_hz is not None]
        throttles = [s.throttle for s in self.hardware.values() if s.throttle is not None]
        return ServingFigure(
            node=node, hive=hive, worker=self.name, model=self.model, sku=sku, gpus=self.gpus,
            at=now, per_token_s=self.per_token_s, tokens_per_joule=self.tokens_per_joule,
            clock_hz=statistics.median(clocks) if clocks else None,
            throttle=statistics.median(throttles) if throttles else None, batch=self.batch,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class PeerVerdict:
    """The comparison of one worker with its peers."""

    worker: str
    model: str
    gpus: tuple[int, ...]
    peers: int
    compared: bool
    slowdown: float | None = None  # (mine / peers' median) - 1
    z: float | None = None
    outlier: bool = False
    attribution: str | None = None  # hardware | engine | workload
    why: str = ""


# ------------------------------------------------------------------------------- reading
def _per_worker(found: Mapping[SeriesKey, float]) -> dict[str, float]:
    """Summed per worker (the serving series are one per worker and model)."""
    out: dict[str, float] = {}
    for key, value in found.items():
        name = key.label("worker")
        if name is not None and math.isfinite(value):
            out[name] = out.get(name, 0.0) + value
    return out


def _per_gpu(found: Mapping[SeriesKey, float], combine: str = "sum") -> dict[int, float]:
    out: dict[int, float] = {}
    for key, value in found.items():
        gpu = key.label("gpu")
        if gpu is None or not gpu.isdigit() or not math.isfinite(value):
            continue
        index = int(gpu)
        if combine == "max":
            out[index] = max(out.get(index, value), value)
        else:
            out[index] = out.get(index, 0.0) + value
    return out


def gather(
    query: Query,
    workers: Sequence[VllmWorkerConfig],
    now: float,
    window: float,
    *,
    fresh_s: float = 30.0,
) -> list[WorkerFigures]:
    """Each serving worker's figures over ``(now - window, now]``; workers that are down or
    whose load is unknown are left out (never anyone's peer). ``fresh_s``: how old the newest
    ``fleetd_vllm_up`` may be for the worker to count as up now (a few scrapes)."""
    up: dict[str, float] = {}
    for key, sample in query.latest(UP, now=now, max_age=fresh_s).items():
        name = key.label("worker")
        if name is not None:
            up[name] = min(up.get(name, sample.value), sample.value)
    itl_sum = _per_worker(query.window("increase", ITL + "_sum", window=window, now=now))
    itl_count = _per_worker(query.window("increase", ITL + "_count", window=window, now=now))
    requests = _per_worker(query.window("increase", E2E_COUNT, window=window, now=now))
    prompt = _per_worker(query.window("increase", PROMPT, window=window, now=now))
    # vLLM series are copied per GPU: the max over copies is the worker's value
    tokens_rate = _max_per_worker(query.window("rate", GENERATION_TOKENS, window=window, now=now))
    running = _max_per_worker(query.window("avg", RUNNING, window=window, now=now))
    models = _models(query, now, window)

    clock = _per_gpu(
        query.window("avg", CLOCK, (Matcher("domain", "=", "gfx"),), window=window, now=now),
        "max",
    )
    throttle = _per_gpu(query.window("avg", THROTTLE, window=window, now=now))
    widths = _latest_per_gpu(query, WIDTH, now, window)
    max_widths = _latest_per_gpu(query, MAX_WIDTH, now, window)
    replays = _per_gpu(query.window("increase", REPLAYS, window=window, now=now))
    ecc = _per_gpu(
        query.window(
            "increase", ECC, (Matcher("type", "=", "correctable"),), window=window, now=now
        )
    )

    tpj = _per_gpu(query.window("avg", TOKENS_PER_JOULE, window=window, now=now))

    out: list[WorkerFigures] = []
    for worker in workers:
        name = worker.name
        if up.get(name) != 1.0 or name not in running:
            continue
        per_token: float | None = None
        if itl_count.get(name, 0.0) > 0 and name in itl_sum:
            per_token = itl_sum[name] / itl_count[name]
        elif tokens_rate.get(name, 0.0) > 0 and running[name] > 0:
            per_token = running[name] / tokens_rate[name]
        prompt_len = None
        if requests.get(name, 0.0) > 0 and name in prompt:
            prompt_len = prompt[name] / requests[name]
        hardware = {
            gpu: GpuSignals(
                clock_hz=clock.get(gpu),
                throttle=throttle.get(gpu),
                narrow_link=(gpu in widths and gpu in max_widths and widths[gpu] < max_widths[gpu]),
                replays=replays.get(gpu),
                ecc_ce=ecc.get(gpu),
            )
            for gpu in worker.gpus
        }
        out.append(
            WorkerFigures(
                name,
                models.get(name, worker.model or ""),
                tuple(worker.gpus),
                per_token,
                running[name],
                prompt_len,
                hardware,
                _mean([tpj[g] for g in worker.gpus if g in tpj]),
            )
        )
    return out


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _max_per_worker(found: Mapping[SeriesKey, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in found.items():
        name = key.label("worker")
        if name is not None and math.isfinite(value):
            out[name] = max(out.get(name, value), value)
    return out


def _latest_per_gpu(query: Query, metric: str, now: float, window: float) -> dict[int, float]:
    out: dict[int, float] = {}
    for key, sample in query.latest(metric, now=now, max_age=window).items():
        gpu = key.label("gpu")
        if gpu is not None and gpu.isdigit():
            out[int(gpu)] = sample.value
    return out


def _models(query: Query, now: float, window: float) -> dict[str, str]:
    """The model each worker serves, from its histogram series (the most recent one)."""
    out: dict[str, str] = {}
    for key in query.latest(ITL + "_count", now=now, max_age=window):
        worker, model = key.label("worker"), key.label("model")
        if worker is not None and model is not None:
            out[worker] = model
    return out


# ------------------------------------------------------------------------------- judging
def judge(figures: Sequence[WorkerFigures], settings: PeersConfig) -> list[PeerVerdict]:
    """Compare each worker with the others serving the same model."""
    by_model: dict[str, list[WorkerFigures]] = {}
    for f in figures:
        by_model.setdefault(f.model, []).append(f)
    verdicts: list[PeerVerdict] = []
    for group in by_model.values():
        for me in group:
            peers = [p for p in group if p is not me and p.per_token_s is not None]
            if me.per_token_s is None:
                verdicts.append(PeerVerdict(me.name, me.model, me.gpus, len(peers), False,
                                        why="no decode figure"))  # fmt: skip
                continue
            if len(peers) < settings.min_peers:
                why = f"{len(peers)} peer(s) with data, {settings.min_peers} needed"
                verdicts.append(PeerVerdict(me.name, me.model, me.gpus, len(peers), False, why=why))
                continue
            values = [p.per_token_s for p in peers if p.per_token_s is not None]
            med, z = robust_z(me.per_token_s, values, settings.mad_floor)
            slowdown = me.per_token_s / med - 1.0 if med > 0 else None
            outlier = slowdown is not None and z > settings.z and slowdown >= settings.min_slowdown
            attribution, why = (None, "")
            if outlier:
                attribution, why = attribute(me, peers, settings)
            verdicts.append(
                PeerVerdict(me.name, me.model, me.gpus, len(peers), True, slowdown, z, outlier,
                        attribution, why)
            )  # fmt: skip
    return verdicts


def attribute(
    me: WorkerFigures, peers: Sequence[WorkerFigures], settings: PeersConfig
) -> tuple[str, str]:
    """hardware, workload or engine, with the evidence in words."""
    peer_gpus = [s for p in peers for s in p.hardware.values()]

    def med(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    clock_ref = med([s.clock_hz for s in peer_gpus if s.clock_hz is not None])
    throttle_ref = med([s.throttle for s in peer_gpus if s.throttle is not None]) or 0.0
    replay_ref = med([s.replays for s in peer_gpus if s.replays is not None]) or 0.0
    ecc_ref = med([s.ecc_ce for s in peer_gpus if s.ecc_ce is not None]) or 0.0
    for gpu, s in sorted(me.hardware.items()):
        if (
            clock_ref
            and s.clock_hz is not None
            and s.clock_hz < clock_ref * (1 - settings.clock_drop)
        ):
            pct = round(100 * (1 - s.clock_hz / clock_ref))
            return "hardware", f"GPU {gpu} gfx clock {pct} % below its peers"
        if s.throttle is not None and s.throttle - throttle_ref > settings.throttle_ratio:
            return "hardware", f"GPU {gpu} throttled {round(100 * s.throttle)} % of the time"
        if s.narrow_link:
            return "hardware", f"GPU {gpu} PCIe link below its maximum width"
        if s.replays and s.replays > max(1.0, 4 * replay_ref):
            return "hardware", f"GPU {gpu} PCIe replays ({s.replays:g} in the window)"
        if s.ecc_ce and s.ecc_ce > max(1.0, 4 * ecc_ref):
            return "hardware", f"GPU {gpu} correctable ECC errors ({s.ecc_ce:g} in the window)"
    for what, mine, theirs in (
        ("running requests", me.batch, [p.batch for p in peers]),
        ("prompt tokens per request", me.prompt_per_request, [p.prompt_per_request for p in peers]),
    ):
        ref = med([t for t in theirs if t is not None])
        if mine is not None and ref and ref > 0:
            ratio = mine / ref
            if ratio > settings.load_factor or ratio < 1 / settings.load_factor:
                return "workload", f"{what} {mine:.3g} vs the peers' {ref:.3g}"
    return "engine", "no hardware signal and comparable traffic: restart the worker"


# ------------------------------------------------------------------------------- readings
def verdict_readings(verdicts: Sequence[PeerVerdict | FleetVerdict], now: float) -> list[Reading]:
    """``level`` "gpu": a worker against its node's workers; "hive": a hive against the
    fleet's (its ``worker`` label lists the hive's workers)."""
    out: list[Reading] = []
    for v in verdicts:
        if isinstance(v, FleetVerdict):
            base = {"worker": ",".join(v.workers), "model": v.model, "level": "hive"}
        else:
            base = {"worker": v.worker, "model": v.model, "level": "gpu"}
        compared = 1.0 if v.compared else 0.0
        out.append(Reading(COMPARED, make_labels(base), compared, now, v.why or None))
        if v.outlier and v.slowdown is not None:
            labels = make_labels(
                {**base, "gpu": ",".join(map(str, v.gpus)), "attribution": v.attribution or "",
                 "peers": v.peers}
            )  # fmt: skip
            out.append(Reading(SLOWDOWN, labels, round(v.slowdown, 4), now))
    return out


ZERO_FOR_S = 3600.0
"""How long a slowdown series that was an outlier keeps being written as 0 once it is not."""


class PeerComparison:
    """The daemon's peer comparison: ``assess(query, now)`` after each vLLM scrape.

    A series that was an outlier is written as 0 once it is not (for ``ZERO_FOR_S``): the rule
    then sees the outlier *end*, where a vanished series would read as missing data and hold
    the alert as unknown. Its labels (attribution, peers) are part of it, so a change of either
    ends one series and starts another.
    """

    def __init__(
        self,
        workers: Sequence[VllmWorkerConfig],
        settings: PeersConfig,
        *,
        scrape_interval: float = 5.0,
    ) -> None:
        self._workers = tuple(workers)
        self._settings = settings
        self._fresh_s = max(3.0 * scrape_interval, 15.0)
        self.last: list[PeerVerdict] = []
        self.last_fleet: list[FleetVerdict] = []
        self.figures: tuple[WorkerFigures, ...] = ()  # as of the last assessment
        self._figures_at = float("-inf")
        # the fleet: set by the registry heartbeat (another thread: one tuple assignment)
        self._fleet: tuple[str, str, Mapping[int, str], FleetView, float] | None = None
        self._shown: dict[Labels, float] = {}  # outlier label sets -> last time an outlier

    def assess(self, query: Query, now: float) -> list[Reading]:
        if not self._settings.enabled or not self._workers:
            return []
        figures = gather(query, self._workers, now, self._settings.window, fresh_s=self._fresh_s)
        self.figures, self._figures_at = tuple(figures), now
        self.last = judge(figures, self._settings)
        self.last_fleet = self._judge_fleet(figures, now)
        readings = verdict_readings([*self.last, *self.last_fleet], now)
        current = {r.labels for r in readings if r.metric == SLOWDOWN}
        for labels in current:
            self._shown[labels] = now
        for labels, seen in list(self._shown.items()):
            if labels in current:
                continue
            if now - seen > ZERO_FOR_S:
                del self._shown[labels]
            else:
                readings.append(Reading(SLOWDOWN, labels, 0.0, now))
        return readings

    # ---- the fleet (fleetd.vllm.fleet) ---------------------------------------------------
    def enable_fleet(self, node: str, sku: str, hives: Mapping[int, str], max_age: float) -> None:
        """Compare this node's hives with the fleet's from now on (the daemon, with a registry):
        until the first read, every fleet verdict says the comparison is node-local only."""
        if self._settings.fleet:
            self._fleet = (node, sku, dict(hives), FleetView(), max_age)

    def publishable(self, now: float) -> list[ServingFigure]:
        """This node's figures for the heartbeat to publish: the last assessment's, stamped with
        its time; none when it is older than the fleet's ``max_age`` (the scrape job stalled —
        stale figures published as fresh would be a false peer)."""
        if self._fleet is None:
            return []
        node, sku, hives, _, max_age = self._fleet
        at, figures = self._figures_at, self.figures
        if now - at > max_age:
            return []
        return [
            f.serving_figure(node, sku, _hive(hives, f.gpus), at)
            for f in figures
            if f.per_token_s is not None
        ]

    def fleet_read(self, view: FleetView) -> None:
        """What the heartbeat read of the fleet (or the error that stopped it)."""
        if self._fleet is not None:
            node, sku, hives, _, max_age = self._fleet
            self._fleet = (node, sku, hives, view, max_age)

    @property
    def fleet_target(self) -> tuple[str, str] | None:
        """(node, SKU) the fleet comparison publishes under; None when it is off."""
        return None if self._fleet is None else (self._fleet[0], self._fleet[1])

    def _judge_fleet(self, figures: Sequence[WorkerFigures], now: float) -> list[FleetVerdict]:
        if self._fleet is None:
            return []
        node, sku, hives, view, max_age = self._fleet
        mine = [f.serving_figure(node, sku, _hive(hives, f.gpus), now) for f in figures]
        return judge_fleet(mine, view, self._settings, now, max_age)


def _hive(hives: Mapping[int, str], gpus: Sequence[int]) -> str:
    """The hive of a worker's first GPU; a node without hive ids is one hive ("0")."""
    return next((hives[g] for g in gpus if g in hives), "0")
