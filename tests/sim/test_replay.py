"""The replay backend (fleetd.sim.replay, fleetd.replay_wiring): recorded amdsmi answers served
back exactly, in recorded order, and a call the recording lacks raising what the library
would — never a value."""

from __future__ import annotations

import ctypes
import math
from pathlib import Path
from typing import Any

import pytest
import requests

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend, ReadError
from fleetd.collect.collectors import default_collectors
from fleetd.collect.config import CollectConfig
from fleetd.collect.poller import Poller
from fleetd.daemon import Daemon
from fleetd.model import Reading
from fleetd.replay_wiring import (
    DEFAULT_RECORDING,
    RecordPlan,
    open_replay_backend,
    record_daemon,
    recording_config,
)
from fleetd.sim import SimulatedAmdSmi, build_node
from fleetd.sim import exceptions as exc
from fleetd.sim import wrapper as w
from fleetd.sim.replay import Recorder, Recording, ReplayAmdSmi, ReplayError

POLLS = 26  # past two slow-tier rounds (slow_every 12), so per-block ECC is read too


def _poller(backend: AmdSmiBackend, clock: FakeClock) -> Poller:
    collect = CollectConfig()
    return Poller(
        backend,
        default_collectors(
            processes_interval=5.0,
            slow_every=collect.slow_every,
            ecc_guard=collect.ecc_guard,
            metrics_table=collect.metrics_table,
        ),
        node="n",
        gpu_timeout=5.0,
        timer=clock.monotonic,
    )


def _readings(poller: Poller, clock: FakeClock, polls: int) -> list[list[tuple[Any, ...]]]:
    out = []
    for _ in range(polls):
        clock.advance(1.0)
        snapshot = poller.poll(clock.now())
        out.append(sorted(_row(r) for r in snapshot.readings))
    return out


def _row(r: Reading) -> tuple[Any, ...]:
    value = "nan" if r.value is not None and math.isnan(r.value) else r.value
    return (r.metric, r.labels, repr(value), r.ts, r.reason)


def _record(tmp_path: Path, polls: int) -> tuple[Recording, list[list[tuple[Any, ...]]]]:
    clock = FakeClock()
    node = build_node("MI355X", seed=3, clock=clock)
    node.set_load(None, 0.7)
    recorder = Recorder(SimulatedAmdSmi(node))
    backend = AmdSmiBackend(recorder, pci_root=node.attach_sysfs(tmp_path / "sim-sysfs"))
    poller = _poller(backend, clock)
    try:
        seen = _readings(poller, clock, polls)
    finally:
        poller.close()
    recording = recorder.recording(
        {"model": "MI355X"}, Recording.read_sysfs(tmp_path / "sim-sysfs")
    )
    path = tmp_path / "rec.json.gz"
    recording.save(path)
    return Recording.load(path), seen


def test_the_replay_serves_exactly_the_readings_the_simulator_gave(tmp_path: Path) -> None:
    recording, simulated = _record(tmp_path, POLLS)
    backend, replay = open_replay_backend(tmp_path / "replay", recording)
    clock = FakeClock()
    poller = _poller(backend, clock)
    try:
        replayed = _readings(poller, clock, POLLS)
    finally:
        poller.close()
    assert replayed == simulated
    assert replay.misses == {}
    assert replay.calls == sum(len(v) for v in recording.calls.values())
    assert len(simulated[-1]) > 500  # a whole node's readings, not a handful


def test_answers_cycle_through_the_recorded_ticks_so_counters_move(tmp_path: Path) -> None:
    recording, _ = _record(tmp_path, 3)
    replay = ReplayAmdSmi(recording)
    replay.amdsmi_init(flag=replay.AmdSmiInitFlags.INIT_AMD_GPUS)
    handle = replay.amdsmi_get_processor_handles()[0]
    seen = [replay.amdsmi_get_gpu_metrics_info(handle)["energy_accumulator"] for _ in range(4)]
    assert seen[0] < seen[1] < seen[2]  # three polls recorded: the counter moved each time
    assert seen[3] == seen[0]  # then the first tick again
    first, again = (
        replay.amdsmi_get_gpu_metrics_info(handle),
        replay.amdsmi_get_gpu_metrics_info(handle),
    )
    assert first is not again  # a fresh object each call, as from the real package


def test_a_call_the_recording_lacks_raises_what_the_library_would(tmp_path: Path) -> None:
    recording, _ = _record(tmp_path, 2)
    replay = ReplayAmdSmi(recording)
    handle = replay.amdsmi_get_processor_handles()[0]
    with pytest.raises(exc.AmdSmiLibraryException) as unsupported:
        replay.amdsmi_get_gpu_vram_usage(handle)  # never read by the poll: not recorded
    assert unsupported.value.err_code == w.AMDSMI_STATUS_NOT_SUPPORTED
    with pytest.raises(exc.AmdSmiLibraryException) as unknown:
        replay.amdsmi_get_gpu_metrics_info(w.amdsmi_processor_handle(12345))
    assert unknown.value.err_code == w.AMDSMI_STATUS_NOT_FOUND
    with pytest.raises(exc.AmdSmiLibraryException) as null:
        replay.amdsmi_get_gpu_metrics_info(w.amdsmi_processor_handle(None))
    assert null.value.err_code == w.AMDSMI_STATUS_INVAL
    assert sum(replay.misses.values()) == 3
    # through the backend it is a missing reading with the library's reason, not a zero
    backend, _ = open_replay_backend(tmp_path / "replay", recording)
    with pytest.raises(ReadError) as read:
        backend.call("amdsmi_get_gpu_vram_usage", backend._gpu(0).handle)
    assert read.value.reason == "not_supported"


def test_a_recorded_failure_is_raised_again_with_its_status(tmp_path: Path) -> None:
    clock = FakeClock()
    node = build_node("MI355X", clock=clock)
    recorder = Recorder(SimulatedAmdSmi(node))
    recorder.amdsmi_init(flag=recorder.AmdSmiInitFlags.INIT_AMD_GPUS)
    handle = recorder.amdsmi_get_processor_handles()[0]
    with pytest.raises(exc.AmdSmiLibraryException) as live:  # gfx950: xgmi_error unreadable
        recorder.amdsmi_gpu_xgmi_error_status(handle)
    replay = ReplayAmdSmi(recorder.recording({}, {}))
    again = replay.amdsmi_get_processor_handles()[0]
    with pytest.raises(exc.AmdSmiLibraryException) as replayed:
        replay.amdsmi_gpu_xgmi_error_status(again)
    assert replayed.value.err_code == live.value.err_code == w.AMDSMI_STATUS_INVAL
    assert isinstance(again, ctypes.c_void_p) and again.value == handle.value


def test_a_file_that_is_not_a_recording_is_refused_with_its_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json.gz"
    bad.write_text("not gzip")
    with pytest.raises(ReplayError, match=str(bad)):
        Recording.load(bad)


def test_the_shipped_recording_loads_and_covers_every_gpu() -> None:
    recording = Recording.load(DEFAULT_RECORDING)
    replay = ReplayAmdSmi(recording)
    handles = replay.amdsmi_get_processor_handles()
    assert len(handles) == recording.meta["gpus"] == 8
    assert {"amdsmi_get_gpu_metrics_info", "amdsmi_get_gpu_total_ecc_count"} <= replay.functions


def test_the_shipped_recording_answers_every_call_of_todays_daemon(tmp_path: Path) -> None:
    """The benchmarks' recording is not stale: a daemon as configured today (its event read's
    timeout is part of the call's key, for one) gets every answer from it, never a miss."""
    backend, replay = open_replay_backend(tmp_path, DEFAULT_RECORDING)
    clock = FakeClock()
    daemon = Daemon(recording_config(tmp_path), clock=clock, backend=backend, schedule_jobs=False)
    daemon.start()
    try:
        assert daemon.events is not None and daemon.events.service.driver is not None
        for tick in range(1, 14):  # past one slow-tier round (slow_every 12)
            clock.advance(1.0)
            daemon.tick()
            daemon.events.poll_cper()
            assert daemon.events.service.driver.read_once() is not None
            if tick % 5 == 0:
                daemon.maintain()
    finally:
        daemon.stop()
    assert replay.misses == {}


def test_a_daemon_over_a_recorded_daemon_runs_without_a_miss(tmp_path: Path) -> None:
    """End to end: record the real daemon over the simulator, then run a real daemon (poll,
    rules, store, alerts, remediation, events, HTTP) over the recording past one cycle."""
    recording = record_daemon(RecordPlan(ticks=8), state_dir=tmp_path / "rec")
    state = tmp_path / "replay"
    backend, replay = open_replay_backend(state, recording)
    clock = FakeClock()
    daemon = Daemon(recording_config(state), clock=clock, backend=backend, schedule_jobs=False)
    daemon.start()
    try:
        assert daemon.http is not None
        for tick in range(1, 21):
            clock.advance(1.0)
            daemon.tick()
            daemon.deliver()
            daemon.remediate()
            if tick % 5 == 0:
                daemon.maintain()
        text = requests.get(f"http://127.0.0.1:{daemon.http.port}/metrics", timeout=10).text
    finally:
        daemon.stop()
    assert replay.misses == {}
    assert 'fleetd_amdsmi_calls_total{function="amdsmi_get_gpu_metrics_info"}' in text
    snapshot = daemon.last_snapshot
    assert snapshot is not None and len(snapshot.gpus) == 8
