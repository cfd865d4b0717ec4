"""The whole daemon's own cost per tick, over the replay backend and over the simulator, with
prometheus-node-exporter measured side by side in the same window.

Two daemons run one after the other, each in its own process with the environment the shipped
unit gives it (systemd/fleetd.service's ``Environment=``), polling 8 MI355X GPUs every
second with everything on — poll, rules, SQLite store, alert delivery, remediation ticks
(dry-run), the event sources, and HTTP: /metrics and /api/v1/status are fetched every 5 s.
One reads a recording of the simulator (fleetd.sim.replay: answers served at near-zero cost,
the shipped recording fleetd/data/replay/mi355x-healthy.json.gz), the other the live
simulator (whose own CPU is included). ``prometheus-node-exporter`` runs beside each and is
scraped at the same cadence. After a warm-up each process's CPU time is read from
/proc/PID/stat over the same measuring window, with RSS at its end. (Run at once, the two
daemons competed for the two cores and each figure rose by a third.)

Figures: ``replay.cpu_ms_per_tick`` (the whole replay daemon process), ``replay.own_cpu_ms_
per_tick`` (less the CPU the replay itself spent serving answers, which it measures with
time.thread_time), ``simulator.cpu_ms_per_tick``, node_exporter's CPU per scrape and series,
and the ratios ``fleetd own CPU per tick / node_exporter CPU per scrape`` and the same per
series. ``--footprint-ticks N`` instead ticks a replay daemon by hand N times on a fake clock
(in this process, each of its jobs at its own interval: bench/handdriven.py) and prints its
RSS along the way;
``--breakdown-ticks N`` ticks one the same way and prints the thread CPU of each part of a
tick (rules, remediation status, self-metrics, store, alert state); ``--http-requests N``
runs one replay daemon and prints its HTTP threads' CPU per request of /healthz, /metrics
and /api/v1/status, and in ms per second at the 5 s scrape cadence.

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmark this checkout

from handdriven import HandDriven, fetch  # noqa: E402 - bench/, beside this file

NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
UNIT = ROOT / "systemd/fleetd.service"
SCRAPE_S = 5.0
GPUS = 8


# ------------------------------------------------------------------------------ /proc
def cpu_seconds(pid: int) -> float:
    """The process's CPU time in nanoseconds' resolution: the sum of its threads' run time
    from /proc/PID/task/*/schedstat (utime + stime in /proc/PID/stat count 10 ms ticks,
    too coarse for node_exporter's few milliseconds per scrape). Both processes keep their
    threads for the whole window (worker pools), so none of its CPU leaves with a thread."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return total / 1e9


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def series(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_http(url: str, proc: subprocess.Popen[bytes], limit_s: float = 90.0) -> None:
    deadline = time.monotonic() + limit_s
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args!r} exited with {proc.returncode} before serving {url}")
        try:
            fetch(url)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


# ------------------------------------------------------------------------------ the child
def child(kind: str, state: Path, port: int, stats: Path) -> None:
    """One daemon, as ``fleetd run`` runs it, over the replay or the simulator."""
    import faulthandler

    from fleetd.clock import SteadyClock
    from fleetd.collect.amdsmi_backend import AmdSmiBackend
    from fleetd.daemon import Daemon
    from fleetd.gpu_wiring import BASELINE_FILE, SimContext
    from fleetd.logs import configure_logging
    from fleetd.replay_wiring import open_replay_backend, recording_config
    from fleetd.sim import SimulatedAmdSmi, build_node
    from fleetd.sim.replay import Recording

    config = recording_config(state, port=port)
    configure_logging(config.logging.format, config.logging.level)
    clock = SteadyClock()
    replay = None
    sim = None
    if kind == "replay":
        recording = Recording.load(ROOT / "fleetd/data/replay/mi355x-healthy.json.gz")
        state.mkdir(parents=True, exist_ok=True)
        backend, replay = open_replay_backend(state, recording)
    else:
        meta = Recording.load(ROOT / "fleetd/data/replay/mi355x-healthy.json.gz").meta
        node = build_node(str(meta["model"]), seed=int(meta["seed"]), clock=clock)
        node.set_load(None, float(meta["load"]))
        sysfs = node.attach_sysfs(state / "simulated-sysfs")
        backend = AmdSmiBackend(
            SimulatedAmdSmi(node), pci_root=sysfs, baseline_path=state / BASELINE_FILE
        )
        sim = SimContext(node, None)
    daemon = Daemon(config, clock=clock, backend=backend, sim=sim)
    sequence = 0

    def write_stats(_signum: int, _frame: object) -> None:
        nonlocal sequence
        sequence += 1
        figures: dict[str, Any] = {"seq": sequence}
        # which thread is which, for a reader of /proc/PID/task/*/schedstat (Python 3.11
        # does not name native threads, so comm says "python" for every one of them)
        figures["threads"] = {str(t.native_id): t.name for t in threading.enumerate()}
        if replay is not None:
            figures |= {
                "replay_cpu_s": replay.cpu_s,
                "replay_calls": replay.calls,
                "replay_misses": sum(replay.misses.values()),
                "replay_missed_keys": sorted(replay.misses)[:5],
            }
        tmp = stats.with_name(stats.name + ".tmp")
        tmp.write_text(json.dumps(figures))
        os.replace(tmp, stats)

    signal.signal(signal.SIGUSR1, write_stats)
    daemon.install_signal_handlers()
    faulthandler.enable()
    try:
        daemon.start()
        gc.collect()  # as fleetd run does
        gc.freeze()
        daemon.run_until_stopped()
    finally:
        daemon.stop()


def unit_environment() -> dict[str, str]:
    """The shipped unit's ``Environment=`` settings, so that the daemon measured runs as
    systemd runs it (its ``MALLOC_ARENA_MAX=2`` changes the RSS)."""
    settings: dict[str, str] = {}
    for line in UNIT.read_text(encoding="utf-8").splitlines():
        if line.startswith("Environment="):
            name, _, value = line.removeprefix("Environment=").partition("=")
            settings[name] = value
    return settings


class Child:
    """A child daemon process, in the shipped unit's environment, and its URLs."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind = kind
        self.port = free_port()
        self.stats = tmp / f"{kind}.stats.json"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--child",
                kind,
                "--state",
                str(tmp / kind),
                "--port",
                str(self.port),
                "--stats",
                str(self.stats),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **unit_environment()},
        )
        self.metrics_url = f"http://127.0.0.1:{self.port}/metrics"
        self.status_url = f"http://127.0.0.1:{self.port}/api/v1/status"

    def stats_now(self) -> dict[str, Any]:
        """Ask the child for its replay figures (SIGUSR1) and read them."""
        before = json.loads(self.stats.read_text())["seq"] if self.stats.exists() else 0
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.stats.exists():
                found: dict[str, Any] = json.loads(self.stats.read_text())
                if found["seq"] > before:
                    return found
            time.sleep(0.02)
        raise SystemExit(f"{self.kind} daemon wrote no stats")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def every_scrape(measure_s: float, scrape: Callable[[], object]) -> tuple[int, float]:
    """``scrape()`` now and every SCRAPE_S for ``measure_s``: how many, and the seconds taken."""
    t0 = time.monotonic()
    scrapes = 0
    while True:
        scrape()
        scrapes += 1
        next_at = t0 + scrapes * SCRAPE_S
        if next_at - t0 > measure_s:
            break
        time.sleep(max(0.0, next_at - time.monotonic()))
    return scrapes, time.monotonic() - t0


def measure_window(
    daemon: Child,
    exporter: subprocess.Popen[bytes],
    exporter_url: str,
    warmup_s: float,
    measure_s: float,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One daemon and node_exporter over the same window, each scraped every SCRAPE_S (the
    daemon's /api/v1/status too): the daemon's figures and node_exporter's."""
    wait_http(daemon.metrics_url, daemon.proc)
    time.sleep(warmup_s)
    cpu0 = cpu_seconds(daemon.proc.pid)
    stats0 = daemon.stats_now()
    polls0 = metric(fetch(daemon.metrics_url), "fleetd_polls_total")
    exporter_cpu0 = cpu_seconds(exporter.pid)
    texts = {"ne": "", "fleetd": ""}

    def scrape() -> None:
        texts["ne"] = fetch(exporter_url)
        texts["fleetd"] = fetch(daemon.metrics_url)
        fetch(daemon.status_url)

    scrapes, elapsed = every_scrape(measure_s, scrape)
    ne_text, text = texts["ne"], texts["fleetd"]
    exporter_cpu = cpu_seconds(exporter.pid) - exporter_cpu0
    cpu = cpu_seconds(daemon.proc.pid) - cpu0
    stats1 = daemon.stats_now()
    last = fetch(daemon.metrics_url)
    ticks = metric(last, "fleetd_polls_total") - polls0
    figures: dict[str, Any] = {
        "ticks": int(ticks),
        "measure_s": round(elapsed, 1),
        "cpu_ms_per_tick": round(1000 * cpu / ticks, 2),
        "cpu_percent_of_one_core": round(100 * cpu / elapsed, 2),
        "rss_mb": round(rss_mb(daemon.proc.pid), 1),
        "series": series(text),
        "polls_missed": metric(last, "fleetd_polls_missed_total"),
    }
    if daemon.kind == "replay":
        replay_cpu = stats1["replay_cpu_s"] - stats0["replay_cpu_s"]
        figures["replay_cpu_ms_per_tick"] = round(1000 * replay_cpu / ticks, 3)
        figures["own_cpu_ms_per_tick"] = round(1000 * (cpu - replay_cpu) / ticks, 2)
        figures["replay_misses"] = stats1["replay_misses"]
        if stats1["replay_missed_keys"]:
            figures["replay_missed_keys"] = stats1["replay_missed_keys"]
    ne = {
        "scrapes": scrapes,
        "cpu_ms_per_scrape": round(1000 * exporter_cpu / scrapes, 2),
        "series": series(ne_text),
        "rss_mb": round(rss_mb(exporter.pid), 1),
    }
    return figures, ne


def side_by_side(warmup_s: float, measure_s: float) -> dict[str, Any]:
    """The replay daemon beside node_exporter, then the simulator daemon beside it: one
    daemon at a time, so neither competes with the other for the two cores."""
    tmp = Path(tempfile.mkdtemp(prefix="fleetd-bench-daemon-"))
    exporter_port = free_port()
    exporter = subprocess.Popen(
        [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{exporter_port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    exporter_url = f"http://127.0.0.1:{exporter_port}/metrics"
    try:
        wait_http(exporter_url, exporter)
        result: dict[str, Any] = {}
        ne: dict[str, Any] = {}
        for kind in ("replay", "simulator"):
            daemon = Child(kind, tmp)
            try:
                result[kind], ne[kind] = measure_window(
                    daemon, exporter, exporter_url, warmup_s, measure_s
                )
            finally:
                daemon.stop()
        own = result["replay"]["own_cpu_ms_per_tick"]
        beside = ne["replay"]
        own_per_series = own / result["replay"]["series"]
        ne_per_series = beside["cpu_ms_per_scrape"] / beside["series"]
        return {
            "bench": "daemon",
            "gpus": GPUS,
            "poll_interval_s": 1.0,
            "scrape_interval_s": SCRAPE_S,
            "replay": result["replay"],
            "simulator": result["simulator"],
            "node_exporter": beside,
            "node_exporter_beside_simulator": ne["simulator"],
            "own_cpu_per_tick_over_node_exporter_cpu_per_scrape": round(
                own / beside["cpu_ms_per_scrape"], 2
            ),
            "per_series_ratio": round(own_per_series / ne_per_series, 3),
            "note": "replay.own_cpu_ms_per_tick = the replay daemon's process CPU per 1 s tick "
            "(poll, rules, store, alerts, remediation, events, HTTP: /metrics and "
            "/api/v1/status every 5 s) less the replay's own CPU; simulator.cpu_ms_per_tick "
            "includes the simulator; node_exporter scraped every 5 s in the same window as "
            "each daemon; the two daemons run one after the other",
        }
    finally:
        exporter.terminate()
        exporter.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------ HTTP side
def http_side(requests: int, warmup_s: float, measure_s: float) -> dict[str, Any]:
    """The HTTP threads' CPU in a replay daemon (its I/O loops and handler pool, by name from
    the child's stats): per request of /healthz, /metrics and /api/v1/status (``requests``
    of each, 1.1 s apart so each sees a new poll, the median), then in ms per second over
    ``measure_s`` with /metrics and /api/v1/status fetched every SCRAPE_S."""
    tmp = Path(tempfile.mkdtemp(prefix="fleetd-bench-http-"))
    daemon = Child("replay", tmp)
    try:
        wait_http(daemon.metrics_url, daemon.proc)
        time.sleep(warmup_s)
        names = daemon.stats_now()["threads"]
        http = [tid for tid, name in names.items() if name.startswith("fleetd-http")]

        def http_cpu() -> float:
            total = 0
            for tid in http:
                stat = Path(f"/proc/{daemon.proc.pid}/task/{tid}/schedstat")
                total += int(stat.read_text().split()[0])
            return total / 1e9

        base = daemon.metrics_url.removesuffix("/metrics")
        per_request: dict[str, float] = {}
        for path in ("/healthz", "/metrics", "/api/v1/status"):
            spent = []
            for _ in range(requests):
                time.sleep(1.1)
                cpu0 = http_cpu()
                fetch(base + path)
                spent.append(http_cpu() - cpu0)
            per_request[path] = round(1000 * sorted(spent)[len(spent) // 2], 2)
        cpu0 = http_cpu()
        _, elapsed = every_scrape(
            measure_s, lambda: (fetch(daemon.metrics_url), fetch(daemon.status_url))
        )
        ms_per_s = 1000 * (http_cpu() - cpu0) / elapsed
    finally:
        daemon.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "bench": "daemon_http",
        "cpu_ms_per_request": per_request,
        "http_threads_cpu_ms_per_s": round(ms_per_s, 2),
        "measure_s": round(elapsed, 1),
        "note": "replay daemon (8 GPUs, 1 s polls); CPU of the HTTP threads only (schedstat: "
        "kernel time of the socket calls included); per request the median of "
        f"{requests}, each after a new poll; ms/s with /metrics and /api/v1/status every "
        f"{SCRAPE_S:g} s",
    }


# ------------------------------------------------------------------------------ footprint
def footprint(ticks: int, every: int, trace: bool = False) -> dict[str, Any]:
    """RSS of a replay daemon ticked by hand ``ticks`` times on a fake clock: right after
    start, every ``every`` ticks, and the memory window's own figures. With ``trace``,
    tracemalloc's top differences between the first sample after the window is full and
    the last one go to stderr (where RSS still grows, and from which line)."""
    import tracemalloc

    import psutil

    process = psutil.Process()
    driven = HandDriven("fleetd-bench-footprint-")
    daemon, replay = driven.daemon, driven.replay
    samples: list[tuple[int, float]] = []
    peaks: list[tuple[int, float]] = []  # the highest RSS of each block of ``every`` ticks
    peak = 0
    page = os.sysconf("SC_PAGE_SIZE")
    retention_ticks = int(daemon.config.store.memory_retention)
    window: dict[str, Any] = {}
    first_full: tracemalloc.Snapshot | None = None

    def after(tick: int) -> None:
        nonlocal peak
        with open("/proc/self/statm", "rb") as statm:  # every tick: RSS between samples
            peak = max(peak, int(statm.read().split()[1]) * page)
        if tick % every == 0 or tick == ticks:
            sample(tick)

    def sample(tick: int) -> None:
        nonlocal first_full, peak
        block_peak: dict[str, float] = {}
        if tick:
            peaks.append((tick, round(peak / 2**20, 2)))
            block_peak = {"rss_peak_mb_of_block": peaks[-1][1]}
            peak = 0
        gc.collect()
        samples.append((tick, round(process.memory_info().rss / 2**20, 2)))
        memory = daemon.memory
        window.update(
            samples=memory.sample_count(),
            series=memory.series_count(),
            timestamp_columns=memory.column_count(),
        )
        progress = {"tick": tick, "rss_mb": samples[-1][1], **block_peak, **window}
        print(json.dumps(progress), file=sys.stderr, flush=True)
        if trace and tick >= retention_ticks and first_full is None:
            first_full = tracemalloc.take_snapshot()

    if trace:
        tracemalloc.start(8)
    cpu0 = time.process_time()
    driven.start()
    try:
        sample(0)
        driven.run(ticks, after)
        if first_full is not None:
            last = tracemalloc.take_snapshot()
            for stat in last.compare_to(first_full, "traceback")[:12]:
                grew = f"{stat.size_diff / 2**20:+.2f} MB {stat.count_diff:+d} blocks"
                print(grew, file=sys.stderr)
                for line in stat.traceback.format()[-8:]:
                    print("   " + line, file=sys.stderr)
    finally:
        driven.stop()
    cpu = time.process_time() - cpu0
    full = [s for s in samples if s[0] >= retention_ticks] or samples
    full_peaks = [p for p in peaks if p[0] - every >= retention_ticks] or peaks
    return {
        "bench": "daemon_footprint",
        "ticks": ticks,
        "rss_mb_by_tick": dict((str(t), r) for t, r in samples),
        "rss_mb_at_start": samples[0][1],
        "rss_mb_memory_window_full": full[0][1],
        "rss_growth_mb": round(samples[-1][1] - samples[0][1], 2),
        "rss_growth_mb_after_memory_window_full": round(full[-1][1] - full[0][1], 2),
        "rss_peak_mb_by_block": dict((str(t), r) for t, r in peaks),
        "rss_peak_growth_mb_after_memory_window_full": round(
            full_peaks[-1][1] - full_peaks[0][1], 2
        ),
        "memory_retention_s": daemon.config.store.memory_retention,
        "memory_window": window,
        "cpu_ms_per_tick": round(1000 * cpu / ticks, 2),
        "replay_misses": sum(replay.misses.values()),
        "note": "replay daemon ticked by hand on a fake clock (1 s per tick; every job the "
        "daemon schedules at its own interval; a /metrics fetch every 5 ticks); "
        "RSS after gc.collect() at start (tick 0) and at each sample; rss_peak: the highest "
        "RSS (/proc/self/statm, every tick) in each block of sample-every ticks, whose "
        "growth counts blocks that start once the memory window is full",
    }


def breakdown(ticks: int) -> dict[str, Any]:
    """Where a replay daemon's CPU goes: ticked by hand on a fake clock (as ``footprint``),
    the thread CPU of each part of a tick, per tick, after 60 warm-up ticks."""
    from fleetd.alert.dispatch import Dispatcher
    from fleetd.handoff import AlertStateKeeper
    from fleetd.remedy.service import Remediation
    from fleetd.rules.engine import RuleEngine
    from fleetd.rules.health import ServiceWatch
    from fleetd.selfmetrics import SelfMetrics
    from fleetd.store.memory import MemoryWindow
    from fleetd.store.resilient import ResilientStore

    spent: dict[str, float] = {}
    measuring = [False]

    def timed(owner: Any, name: str, label: str) -> None:
        inner: Callable[..., Any] = getattr(owner, name)

        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.thread_time()
            try:
                return inner(*a, **k)
            finally:
                if measuring[0]:
                    spent[label] = spent.get(label, 0.0) + time.thread_time() - t0

        setattr(owner, name, wrapper)

    parts = [
        (RuleEngine, "evaluate", "rules evaluation"),
        (ServiceWatch, "refresh", "remediation status for the rules' service view"),
        (SelfMetrics, "publish", "self-metrics publish"),
        (ResilientStore, "append", "store append"),
        (MemoryWindow, "append", "memory window append"),
        (MemoryWindow, "prune", "memory window prune"),
        (AlertStateKeeper, "save", "alert state save"),
        (Dispatcher, "metrics", "alert metrics (in publish)"),
        (Remediation, "status", "remediation status (every caller)"),
    ]
    driven = HandDriven("fleetd-bench-breakdown-")
    for owner, name, label in parts:
        timed(owner, name, label)
    timed(driven.daemon, "tick", "tick (main thread, all of it)")
    driven.start()
    try:
        driven.run(60)
        measuring[0] = True
        cpu0 = time.process_time()
        driven.run(ticks)
        cpu = time.process_time() - cpu0
    finally:
        driven.stop()
    return {
        "bench": "daemon_breakdown",
        "ticks": ticks,
        "process_cpu_ms_per_tick": round(1000 * cpu / ticks, 2),
        "thread_cpu_ms_per_tick": {
            k: round(1000 * v / ticks, 2) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])
        },
        "note": "replay daemon ticked by hand on a fake clock (every job the daemon schedules "
        "at its own interval; a /metrics fetch every 5 ticks); process CPU includes the replay, "
        "the poll's threads and the HTTP server; parts overlap (publish holds alert metrics)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds before measuring")
    parser.add_argument("--measure", type=float, default=45.0, help="measuring window, seconds")
    parser.add_argument(
        "--footprint-ticks", type=int, default=0, help="instead: RSS over N hand-driven ticks"
    )
    parser.add_argument("--sample-every", type=int, default=10_000)
    parser.add_argument(
        "--trace", action="store_true", help="with --footprint-ticks: tracemalloc differences"
    )
    parser.add_argument(
        "--breakdown-ticks", type=int, default=0, help="instead: CPU per part of a tick"
    )
    parser.add_argument(
        "--http-requests", type=int, default=0, help="instead: HTTP threads' CPU per request"
    )
    parser.add_argument("--child", choices=["replay", "simulator"], help=argparse.SUPPRESS)
    parser.add_argument("--state", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stats", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.state, args.port, args.stats)
        return
    if args.footprint_ticks:
        print(json.dumps(footprint(args.footprint_ticks, args.sample_every, args.trace)))
        return
    if args.breakdown_ticks:
        print(json.dumps(breakdown(args.breakdown_ticks)))
        return
    if args.http_requests:
        print(json.dumps(http_side(args.http_requests, args.warmup, args.measure)))
        return
    if not Path(NODE_EXPORTER).exists():
        raise SystemExit(f"{NODE_EXPORTER} not found (apt-get install prometheus-node-exporter)")
    print(json.dumps(side_by_side(args.warmup, args.measure)))


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
