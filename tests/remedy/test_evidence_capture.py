"""The capture's time bound: a capture that hangs is abandoned at its timeout, the run gets a
failure to record at once, and the late capture leaves no bundle behind."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fleetd.remedy import machine as m
from fleetd.remedy.bundle import BundleStore
from fleetd.remedy.config import EvidenceConfig
from fleetd.remedy.evidence import EvidenceCapture
from fleetd.remedy.journal import RunJournal
from fleetd.store.db import Database, sqlite_url

from .machine_world import NOW, new_run


def capture(tmp: Path, dumper: Any, timeout: float) -> tuple[EvidenceCapture, Database]:
    db = Database.open(sqlite_url(tmp / "fleetd.db"))
    store = BundleStore(tmp / "evidence", max_bundle_bytes=1 << 20, max_total_bytes=1 << 24, keep=5)
    cap = EvidenceCapture(
        node="node-a",
        config=EvidenceConfig(timeout=timeout),
        store=store,
        journal=RunJournal(db),
        dumper=dumper,
        config_hash="c0ffee",
    )
    return cap, db


def test_a_hung_capture_is_abandoned_at_its_timeout_and_leaves_no_bundle(tmp_path: Path) -> None:
    release = threading.Event()

    def hung(indices: Sequence[int]) -> dict[str, Any]:
        release.wait(10)
        return {"gpus": {}}

    cap, db = capture(tmp_path, hung, timeout=0.2)
    run, _ = new_run(capture_evidence=True)
    started = time.monotonic()
    result = cap.capture(run, m.CaptureEvidence("pre_reset", 1), NOW)
    assert time.monotonic() - started < 2.0  # bounded: the reset is not held up
    assert result.error == "capture timed out after 0.2s" and result.path is None
    release.set()
    for t in threading.enumerate():
        if t.name.startswith("evidence-"):
            t.join(5)
    assert cap.store.bundles() == []
    db.dispose()


def test_a_capture_keeps_what_it_could_not_read_as_an_error(tmp_path: Path) -> None:
    def broken(indices: Sequence[int]) -> dict[str, Any]:
        raise RuntimeError("amdsmi went away")

    cap, db = capture(tmp_path, broken, timeout=5.0)
    run, _ = new_run(capture_evidence=True)
    result = cap.capture(run, m.CaptureEvidence("quarantine", 1), NOW)
    assert result.error is None and result.path is not None
    body = cap.content(run, m.CaptureEvidence("quarantine", 1), NOW)
    assert body["gpus"] == {"error": "RuntimeError: amdsmi went away"}
    assert body["events"] == {"error": "no event log"}
    assert body["config_sha256"] == "c0ffee" and body["unit"] == [0, 1, 2, 3]
    assert body["journal"]["run"]["run_id"] == run.run_id
    assert body["alerts"]["trigger"]["rule"] == "GpuUncorrectableEcc"
    db.dispose()


class StubPoller:
    def __init__(self, hung: bool) -> None:
        self.hung = hung

    def busy(self) -> bool:
        return self.hung


def test_the_dump_never_waits_on_a_hung_or_held_poll() -> None:
    from fleetd.collect.serial import PollSafeBackend, SerialPoller

    hung = PollSafeBackend(object(), SerialPoller(StubPoller(True)))  # type: ignore[arg-type]
    assert "still hung" in hung.dump([0])["error"]
    serial = SerialPoller(StubPoller(False))  # type: ignore[arg-type]
    held = PollSafeBackend(object(), serial)  # type: ignore[arg-type]
    with serial.lock:  # a poll under way that does not end in time
        assert "held the GPU lock" in held.dump([0], wait=0.01)["error"]
