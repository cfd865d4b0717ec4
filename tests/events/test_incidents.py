"""One uncorrectable fault, one incident: the first report opens it and fixes its labels, the
others join (the most severe action wins), and it closes when a run has reset the GPU, when
the driver resets it on its own (a reset-class incident), or after max_age; the service's
series, the reset evidence (live and from the event log of an earlier process), and the
bad-input counters on the series."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetd.events.config import EventsConfig
from fleetd.events.incidents import INCIDENTS_FILE, IncidentBook
from fleetd.events.model import KernelEvent
from fleetd.events.service import UE_COUNTS_FILE, EventService, severity_mask
from fleetd.model import GpuIdentity, Reading, label_value, make_labels
from fleetd.statefile import StateFile

T0 = 1_800_000_000.0


def test_the_first_report_opens_and_the_most_severe_action_wins() -> None:
    book = IncidentBook()
    first, opened = book.report(3, "kernel", T0, severity="uncorrectable", action="reset",
                                why="amdgpu: 1 new uncorrectable")  # fmt: skip
    assert opened and first.source == "kernel" and first.action == "reset"
    joined, opened = book.report(3, "cper", T0 + 1, severity="fatal", action="physical",
                                 why="AFID 20 calls for physical", afid="20",
                                 label_action="physical")  # fmt: skip
    assert not opened and joined.source == "kernel" and joined.afid == ""  # labels stay
    assert joined.action == "physical" and joined.why == "AFID 20 calls for physical"
    assert joined.classified == "AFID 20 calls for physical" and len(joined.reports) == 2
    later, _ = book.report(3, "counters", T0 + 2, severity="uncorrectable", action="reset",
                           why="ECC counters")  # fmt: skip
    assert later.action == "physical"  # a lesser report does not lower it
    assert book.close(3, T0 + 3) is not None and book.get(3) is None
    assert [i.gpu for i in book.closed(T0 + 10, keep=60)] == [3]
    assert book.closed(T0 + 100, keep=60) == []
    book.report(4, "kernel", T0, severity="poison", action="reset", why="x")
    assert [i.gpu for i in book.expired(T0 + 30, max_age=20)] == [4] and book.all() == []


@dataclass
class Gpu:
    identity: GpuIdentity
    handle: Any = None


class Backend:
    amdsmi = object()

    def __init__(self) -> None:
        self._gpus = [
            GpuIdentity(index=i, uuid=f"GPU-{i}", bdf=f"0000:{0x10 * (i + 1):02x}:00.0")
            for i in range(8)
        ]

    def gpus(self) -> list[GpuIdentity]:
        return self._gpus

    def sources(self) -> list[Gpu]:
        return [Gpu(g) for g in self._gpus]


@dataclass
class Logged:
    ts: float
    gpu: int | None
    kind: str
    message: str
    data: dict[str, Any]


class World:
    def __init__(self, tmp: Path, **config: Any) -> None:
        self.now = T0
        self.log: list[Logged] = []
        self.arrivals = 0
        self.verified: dict[int, str] = {}
        self.by_fleetd: set[int] = set()
        section = {"kernel_log": {"source": "off"}, "cper": {"enabled": False},
                   "amdsmi_events": {"enabled": False}, **config}  # fmt: skip
        self.service = self.make(tmp, EventsConfig.model_validate(section))

    def make(self, tmp: Path, config: EventsConfig) -> EventService:
        return EventService(
            config,
            state_dir=tmp,
            backend=Backend(),
            append_event=self.append,
            on_arrival=self.arrived,
            fleetd_has_gpu=lambda gpu: gpu in self.by_fleetd,
            verified_since=lambda gpu, since: self.verified.get(gpu),
            now=lambda: self.now,
            query_events=self.query,
        )

    def append(self, kind: str, *, now: float, gpu: int | None, message: str,
               data: dict[str, Any], actor: str) -> None:  # fmt: skip
        self.log.append(Logged(now, gpu, kind, message, data))

    def query(self, *, kinds: list[str], since: float) -> list[Logged]:
        return [e for e in self.log if e.kind in kinds and e.ts >= since]

    def arrived(self) -> None:
        self.arrivals += 1

    def incidents(self) -> list[Reading]:
        return [
            r
            for r in self.service.readings(self.now)
            if r.metric == "fleetd_gpu_fault_incident_open"
        ]


def kernel(kind: str, bdf: str, key: str, **fields: Any) -> KernelEvent:
    return KernelEvent(kind, bdf, T0, fields, (f"amdgpu {bdf}: {kind}",), key)  # type: ignore[arg-type]


def test_an_open_incident_outlives_a_restart_so_a_late_report_joins_it(tmp_path: Path) -> None:
    book = IncidentBook(StateFile(tmp_path, INCIDENTS_FILE))
    book.report(3, "counters", T0, severity="uncorrectable", action="reset", why="ECC counters")
    book.report(5, "kernel", T0, severity="poison", action="reset", why="poison")
    book.close(5, T0 + 1)
    # the next process: the kernel line of GPU 3's fault, read only now, joins its incident
    again = IncidentBook(StateFile(tmp_path, INCIDENTS_FILE))
    assert [i.gpu for i in again.all()] == [3]
    joined, opened = again.report(3, "kernel", T0 + 20, severity="uncorrectable",
                                  action="reset", why="amdgpu: 1 new uncorrectable")  # fmt: skip
    assert not opened and joined.source == "counters" and len(joined.reports) == 2
    (tmp_path / INCIDENTS_FILE).write_text('{"open": [{"gpu": "x"}, 7]}')
    assert IncidentBook(StateFile(tmp_path, INCIDENTS_FILE)).all() == []  # unreadable: afresh


def test_a_kernel_line_the_counters_and_a_cper_report_are_one_incident(tmp_path: Path) -> None:
    world = World(tmp_path)
    service = world.service
    bdf = "0000:40:00.0"  # GPU 3
    service.handle_kernel_events(
        [kernel("ras_error", bdf, "k1", severity="uncorrectable", block="umc", count=1)]
    )
    ecc = [Reading("fleetd_gpu_ecc_errors_total",
                   make_labels({"gpu": 3, "uuid": "GPU-3", "type": "uncorrectable", "block": b}),
                   v, T0) for b, v in (("UMC", 0.0), ("GFX", 0.0))]  # fmt: skip
    service.observe_counters(ecc, T0)  # the base
    service.observe_counters([ecc[0].__class__(ecc[0].metric, ecc[0].labels, 1.0, T0)], T0)
    [series] = world.incidents()
    assert series.value == 1.0 and label_value(series.labels, "source") == "kernel"
    assert label_value(series.labels, "class") == "uncorrectable"
    incident = service.incident(3)
    assert incident is not None and len(incident.reports) == 2
    assert [e.kind for e in world.log].count("incident_opened") == 1


def test_a_reset_class_incident_closes_when_a_run_has_reset_the_gpu(tmp_path: Path) -> None:
    world = World(tmp_path)
    service = world.service
    service._report(2, "cper", T0, severity="non_fatal_uncorrected", action="reset", why="AFID 22")
    service._report(5, "cper", T0, severity="fatal", action="physical", why="AFID 20")
    world.verified = {2: "run r1 reset GPU 2", 5: "run r1 reset GPU 5"}
    world.now += 5
    values = {label_value(r.labels, "gpu"): r.value for r in world.incidents()}
    assert values == {"2": 0.0, "5": 1.0}  # a reset repairs nothing physical
    assert any(e.kind == "incident_closed" and e.gpu == 2 for e in world.log)


def test_a_driver_reset_is_counted_once_and_closes_a_reset_class_incident(tmp_path: Path) -> None:
    world = World(tmp_path)
    service = world.service
    service._report(1, "kernel", T0, severity="poison", action="reset", why="poison consumed")
    bdf = "0000:20:00.0"  # GPU 1
    service.handle_kernel_events([kernel("gpu_reset", bdf, "r1", phase="begin")])
    service.handle_kernel_events([kernel("gpu_reset", bdf, "r2", phase="succeeded", counter=1)])
    from fleetd.events.driver_events import DriverEvent

    service.handle_driver_events([DriverEvent("gpu_post_reset", 1, T0, "1", {"seq": 1})])
    unplanned = [r for r in service.readings(T0) if r.metric == "fleetd_gpu_unplanned_resets_total"]
    assert [(label_value(r.labels, "gpu"), r.value) for r in unplanned] == [("1", 1.0)]
    assert service.incident(1) is None and world.arrivals == 1
    evidence = service.reset_evidence([1, 2], T0 - 1)
    assert 1 in evidence.succeeded and not evidence.failed and 2 not in evidence.succeeded
    world.by_fleetd = {1}  # a reset fleetd made is evidence, never "unplanned"
    service.handle_kernel_events([kernel("gpu_reset", bdf, "r3", phase="failed")])
    assert 1 in service.reset_evidence([1], T0).failed


def test_reset_evidence_survives_a_restart_through_the_event_log(tmp_path: Path) -> None:
    world = World(tmp_path)
    bdf = "0000:30:00.0"  # GPU 2
    world.service.handle_kernel_events([kernel("gpu_reset", bdf, "a", phase="succeeded")])
    world.now += 10
    after = world.make(tmp_path, world.service.config)  # a new process, the same log
    found = after.reset_evidence([2], T0 - 5)
    assert 2 in found.succeeded and "gpu_reset" in found.succeeded[2]


def test_bad_input_counters_are_series(tmp_path: Path) -> None:
    world = World(tmp_path, cper={"enabled": True, "severities": ["fatal"]})
    service = world.service
    assert service.cper is not None and service.cper.severity_mask == severity_mask(["fatal"])
    service.cper.tally.note("malformed_buffer", 2)
    found = {
        (label_value(r.labels, "source"), label_value(r.labels, "kind")): r.value
        for r in service.readings(T0)
        if r.metric == "fleetd_event_source_input_total"
    }
    assert found[("cper", "malformed_buffer")] == 2.0


def test_a_rise_while_fleetd_was_down_is_reported_after_the_restart(tmp_path: Path) -> None:
    """The last counts are kept with the incidents: the next process compares its first read
    with them, so an error counted while fleetd was down (or restarting) opens a counters
    incident, which GpuEccUncorrectableError's stand-down after a closed incident depends on.
    A damaged file is a fresh start."""

    def counts(value: float, uuid: str = "GPU-3") -> list[Reading]:
        labels = make_labels({"gpu": 3, "uuid": uuid, "type": "uncorrectable", "block": "UMC"})
        return [Reading("fleetd_gpu_ecc_errors_total", labels, value, T0)]

    World(tmp_path).service.observe_counters(counts(5.0), T0)  # the base, then fleetd stops
    again = World(tmp_path)
    again.service.observe_counters(counts(6.0), T0 + 60)  # the first read of the next process
    incident = again.service.incident(3)
    assert incident is not None and incident.source == "counters", incident
    # another board in the slot, with errors of its own from before: not a rise
    swapped = World(tmp_path)
    swapped.service.observe_counters(counts(40.0, uuid="GPU-3-replacement"), T0 + 90)
    assert len(swapped.service.incident(3).reports) == len(incident.reports)  # type: ignore[union-attr]
    (tmp_path / UE_COUNTS_FILE).write_text("[1, 2")
    fresh = World(tmp_path)
    fresh.service.observe_counters(counts(9.0), T0 + 120)  # no base: the first read sets it
    kept = fresh.service.incident(3)  # the open incident, kept by its own file
    assert kept is not None and len(kept.reports) == len(incident.reports)  # no new report
    fresh.service.observe_counters(counts(10.0), T0 + 180)  # and from there on, rises count
    grown = fresh.service.incident(3)
    assert grown is not None and len(grown.reports) == len(incident.reports) + 1
