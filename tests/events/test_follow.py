"""The follower: source choice, cursor resume without duplicates, lost sources, the thread."""

from __future__ import annotations

import json
import os
import queue
import stat
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fleetd.events import KernelLogConfig, KernelLogFollower
from fleetd.events.follow import CURSOR_FILE, Host
from fleetd.events.model import Tally
from fleetd.events.sources import FileSource, JournalSource, KmsgSource, parse_kmsg

BOOT = "8a3c0c1e-0000-4000-8000-000000000001"
BOOT_TIME = 1_767_225_000.0
T0 = 1_767_225_600.0
UE = (
    "amdgpu 0000:c1:00.0: amdgpu: socket: 0, die: 0, 1 new uncorrectable hardware errors "
    "detected in umc block"
)
RESET = "amdgpu 0000:c1:00.0: amdgpu: GPU reset begin!"
NOISE = "EXT4-fs (nvme0n1p2): re-mounted. Quota mode: none."


def kmsg(seq: int, message: str, usec: int | None = None) -> str:
    return f"6,{seq},{usec if usec is not None else seq * 1000},-;{message}\n"


def journal(n: int, message: str) -> str:
    entry = {
        "MESSAGE": message,
        "__CURSOR": f"s=abc;i={n:x};b={BOOT};t={n:x}",
        "__REALTIME_TIMESTAMP": str(int((T0 + n) * 1e6)),
        "_BOOT_ID": BOOT,
        "_TRANSPORT": "kernel",
    }
    return json.dumps(entry) + "\n"


def follower(tmp: Path, log: Path, **cfg: object) -> KernelLogFollower:
    config = KernelLogConfig(source="file", path=str(log), **cfg)  # type: ignore[arg-type]
    return KernelLogFollower(
        config, tmp / "state", gpus=["0000:c1:00.0"], boot_id=BOOT, boot_time=BOOT_TIME
    )


def drain(f: KernelLogFollower) -> list[str]:
    out = []
    while True:
        try:
            event = f.events.get_nowait()
        except queue.Empty:
            return out
        out.append(f"{event.kind}:{event.get('phase') or event.get('severity')}")


def test_file_source_in_kmsg_format_resumes_without_duplicates(tmp_path: Path) -> None:
    log = tmp_path / "kmsg.log"
    log.write_text(kmsg(1, NOISE) + kmsg(2, UE, usec=5_000_000) + " SUBSYSTEM=pci\n")
    first = follower(tmp_path, log)
    assert first.step(T0) == 2
    event = first.events.get_nowait()
    assert (event.kind, event.bdf, event.at) == ("ras_error", "0000:c1:00.0", BOOT_TIME + 5.0)
    first.stop()
    saved = json.loads((tmp_path / "state" / CURSOR_FILE).read_text())
    assert saved["file"]["offset"] == log.stat().st_size
    with log.open("a") as handle:
        handle.write(kmsg(3, RESET))
    second = follower(tmp_path, log)  # a restart: same state directory
    assert second.step(T0 + 1) == 1
    assert drain(second) == ["gpu_reset:begin"]
    assert second.step(T0 + 2) == 0 and drain(second) == []


def test_file_source_in_journal_json(tmp_path: Path) -> None:
    log = tmp_path / "journal.jsonl"
    log.write_text(journal(1, NOISE) + journal(2, RESET) + "{not json\n")
    f = follower(tmp_path, log)
    assert f.step(T0) == 2
    event = f.events.get_nowait()
    assert event.at == T0 + 2 and event.kind == "gpu_reset"
    assert f.stats()["malformed_record"] == 1


def test_a_partial_last_line_waits_for_its_end(tmp_path: Path) -> None:
    log = tmp_path / "kmsg.log"
    line = kmsg(1, RESET)
    log.write_text(line[:20])
    f = follower(tmp_path, log)
    assert f.step(T0) == 0
    with log.open("a") as handle:
        handle.write(line[20:])
    assert f.step(T0 + 1) == 1 and drain(f) == ["gpu_reset:begin"]


def test_a_rotated_file_is_read_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "kmsg.log"
    log.write_text(kmsg(1, NOISE) * 50)
    f = follower(tmp_path, log)
    f.step(T0)
    os.unlink(log)
    log.write_text(kmsg(1, RESET))  # a new file (new inode), shorter than the old offset
    f.step(T0 + 1)
    assert drain(f) == ["gpu_reset:begin"]
    assert f.stats()["file_rotated"] == 1


def test_a_vanished_file_backs_off_and_comes_back(tmp_path: Path) -> None:
    log = tmp_path / "kmsg.log"
    f = follower(tmp_path, log, backoff_initial=1.0, backoff_max=4.0)
    assert f.step(T0) == 0 and f.stats()["file_missing"] == 1
    log.write_text(kmsg(1, RESET))
    assert f.step(T0 + 0.5) == 0  # still backing off: no attempt
    assert f.stats()["file_missing"] == 1
    assert f.step(T0 + 1.0) == 1
    assert drain(f) == ["gpu_reset:begin"]


def test_a_full_queue_drops_and_counts(tmp_path: Path) -> None:
    log = tmp_path / "kmsg.log"
    log.write_text("".join(kmsg(i, RESET) for i in range(1, 6)))
    f = follower(tmp_path, log, queue_size=2)
    f.step(T0)
    assert f.events.qsize() == 2 and f.stats()["dropped"] == 3


def test_a_sink_that_raises_is_counted_and_the_follower_goes_on(tmp_path: Path) -> None:
    log = tmp_path / "kmsg.log"
    log.write_text(kmsg(1, RESET) + kmsg(2, RESET))
    config = KernelLogConfig(source="file", path=str(log))

    def sink(event: object) -> None:
        raise RuntimeError("consumer broke")

    f = KernelLogFollower(config, tmp_path, sink=sink, boot_id=BOOT, boot_time=BOOT_TIME)
    assert f.step(T0) == 2
    assert f.stats()["sink_error"] == 2 and f.stats()["event.gpu_reset"] == 2


def test_an_unreadable_cursor_file_starts_afresh_and_is_counted(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / CURSOR_FILE).write_text("{half")
    log = tmp_path / "kmsg.log"
    log.write_text(kmsg(1, RESET))
    f = follower(tmp_path, log)
    assert f.stats()["cursor_unreadable"] == 1
    assert f.step(T0) == 1


# ---------------------------------------------------------------------------------- kmsg records
def test_kmsg_records_resume_after_the_saved_sequence_in_the_same_boot() -> None:
    tally = Tally()
    same = KmsgSource(tally, BOOT, BOOT_TIME, path="/nonexistent")
    same._after = 41  # what open({"boot_id": BOOT, "seq": 41}) sets
    assert same.record(kmsg(41, RESET)) is None
    line = same.record(kmsg(42, RESET, usec=2_500_000))
    assert line is not None and line.key == f"{BOOT}:42" and line.at == BOOT_TIME + 2.5
    assert same.position() == {"boot_id": BOOT, "seq": 42}
    assert tally["skipped_duplicate"] == 1
    assert same.record("garbage without a semicolon") is None and tally["malformed_record"] == 1


def test_a_kmsg_cursor_from_another_boot_is_not_applied(tmp_path: Path) -> None:
    fake = tmp_path / "kmsg"
    fake.write_text("")
    source = KmsgSource(Tally(), BOOT, BOOT_TIME, path=str(fake))
    source.open({"boot_id": "another-boot", "seq": 10_000})
    assert source.record(kmsg(3, RESET)) is not None
    source.open({"boot_id": BOOT, "seq": 10_000})
    assert source.record(kmsg(3, RESET)) is None
    source.close()


def test_parse_kmsg_takes_the_first_line_of_a_record() -> None:
    record = "3,77,123456,-,caller=T1;msg here\n SUBSYSTEM=pci\n"
    assert parse_kmsg(record) == (77, 123456, "msg here")
    assert parse_kmsg("x,1,2,-;m") is None and parse_kmsg("1,2;m") is None


# ---------------------------------------------------------------------------------- journal
FAKE_JOURNALCTL = """\
    import json, sys
    args = sys.argv[1:]
    cursor = next((a.split("=", 1)[1] for a in args if a.startswith("--after-cursor=")), None)
    if cursor == "bad":
        sys.stderr.write("Failed to seek to cursor: Invalid argument\\n")
        sys.exit(1)
    start = int(cursor.split("i=")[1], 16) + 1 if cursor else 1
    for n in range(start, {total} + 1):
        msg = {messages!r}[(n - 1) % {count}]
        print(json.dumps({{"MESSAGE": msg, "__CURSOR": "s=x;i=%x" % n,
                          "__REALTIME_TIMESTAMP": str(n * 1000000)}}), flush=True)
    """


def fake_journalctl(tmp: Path, messages: list[str], total: int) -> Path:
    script = tmp / "journalctl"
    body = textwrap.dedent(FAKE_JOURNALCTL).format(
        total=total, messages=messages, count=len(messages)
    )
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def step_until(f: KernelLogFollower, want: int, deadline: float = 10.0) -> list[str]:
    """Drive ``step`` until ``want`` events arrived (the subprocess runs on its own)."""
    got: list[str] = []
    end = time.monotonic() + deadline
    now = T0
    while len(got) < want and time.monotonic() < end:
        now += 1.0
        f.step(now)
        got += drain(f)
        time.sleep(0.01)
    return got


def test_journal_source_resumes_after_its_cursor(tmp_path: Path) -> None:
    script = fake_journalctl(tmp_path, [RESET], total=3)
    config = KernelLogConfig(source="journal", journalctl=str(script), backoff_initial=0.5)
    f = KernelLogFollower(config, tmp_path / "s", boot_id=BOOT, boot_time=BOOT_TIME)
    assert step_until(f, 3) == ["gpu_reset:begin"] * 3
    f.stop()
    assert json.loads((tmp_path / "s" / CURSOR_FILE).read_text())["journal"]["cursor"] == "s=x;i=3"
    script = fake_journalctl(tmp_path, [RESET], total=5)
    again = KernelLogFollower(config, tmp_path / "s", boot_id=BOOT, boot_time=BOOT_TIME)
    assert step_until(again, 2) == ["gpu_reset:begin"] * 2  # entries 4 and 5 only
    assert step_until(again, 1, deadline=1.0) == []
    again.stop()


def test_journal_lines_of_other_drivers_are_skipped_but_move_the_cursor(tmp_path: Path) -> None:
    script = fake_journalctl(tmp_path, [RESET, NOISE], total=4)
    config = KernelLogConfig(source="journal", journalctl=str(script))
    f = KernelLogFollower(config, tmp_path / "s", boot_id=BOOT, boot_time=BOOT_TIME)
    assert step_until(f, 2) == ["gpu_reset:begin"] * 2
    end = time.monotonic() + 10
    while f.stats().get("prefiltered", 0) < 2 and time.monotonic() < end:
        f.step(T0 + 50)
        time.sleep(0.01)
    f.stop()
    assert f.stats()["prefiltered"] == 2 and f.parser.tally["ignored"] == 0
    saved = json.loads((tmp_path / "s" / CURSOR_FILE).read_text())["journal"]
    assert saved == {"cursor": "s=x;i=4", "realtime_usec": 4_000_000}


def test_journal_exit_is_counted_and_retried_after_a_backoff(tmp_path: Path) -> None:
    script = fake_journalctl(tmp_path, [RESET], total=1)
    config = KernelLogConfig(source="journal", journalctl=str(script), backoff_initial=5.0)
    f = KernelLogFollower(config, tmp_path, boot_id=BOOT, boot_time=BOOT_TIME)
    assert step_until(f, 1) == ["gpu_reset:begin"]
    end = time.monotonic() + 10
    while f.stats().get("journal_exited", 0) == 0 and time.monotonic() < end:
        f.step(T0 + 100)
        time.sleep(0.01)
    assert f.stats()["journal_exited"] == 1 and f.source is None
    assert f.step(T0 + 101) == 0 and f.stats()["opened.journal"] == 1  # backing off
    f.step(T0 + 106)
    assert f.stats()["opened.journal"] == 2
    f.stop()


def test_a_rejected_journal_cursor_falls_back_to_its_time(tmp_path: Path) -> None:
    source = JournalSource(Tally(), "journalctl")
    argv = source.command({"cursor": None, "realtime_usec": 7_500_000})
    assert "--since=@7" in argv and not any(a.startswith("--after-cursor") for a in argv)
    script = fake_journalctl(tmp_path, [RESET], total=9)
    state = tmp_path / "s"
    state.mkdir()
    (state / CURSOR_FILE).write_text(
        json.dumps({"journal": {"cursor": "bad", "realtime_usec": 7_000_000}})
    )
    config = KernelLogConfig(source="journal", journalctl=str(script), backoff_initial=0.1)
    f = KernelLogFollower(config, state, boot_id=BOOT, boot_time=BOOT_TIME)
    got = step_until(f, 2)
    assert f.stats()["cursor_rejected"] == 1
    assert got == ["gpu_reset:begin"] * 2  # entries 8 and 9: after the saved time
    f.stop()


# ---------------------------------------------------------------------------------- selection
def host(journal: bool, kmsg_ok: bool) -> Host:
    return Host(
        which=lambda name: "/usr/bin/journalctl" if journal else None,
        isdir=lambda path: journal,
        readable=lambda path: kmsg_ok,
    )


@pytest.mark.parametrize(
    ("wanted", "journal_ok", "kmsg_ok", "chosen"),
    [
        ("auto", True, True, "journal"),
        ("auto", False, True, "kmsg"),
        ("auto", False, False, None),
        ("kmsg", True, True, "kmsg"),
        ("journal", False, True, "journal"),
    ],
)
def test_source_selection(
    tmp_path: Path, wanted: str, journal_ok: bool, kmsg_ok: bool, chosen: str | None
) -> None:
    config = KernelLogConfig(source=wanted)  # type: ignore[arg-type]
    f = KernelLogFollower(
        config, tmp_path, host=host(journal_ok, kmsg_ok), boot_id=BOOT, boot_time=BOOT_TIME
    )
    source = f.select_source()
    assert (source.name if source else None) == chosen


def test_no_source_is_counted_once_and_retried(tmp_path: Path) -> None:
    config = KernelLogConfig(source="auto", backoff_initial=2.0)
    f = KernelLogFollower(
        config, tmp_path, host=host(False, False), boot_id=BOOT, boot_time=BOOT_TIME
    )
    assert f.step(T0) == 0 and f.step(T0 + 1) == 0
    assert f.stats()["no_source"] == 1
    f.step(T0 + 2)
    assert f.stats()["no_source"] == 2


# ---------------------------------------------------------------------------------- the thread
def test_the_thread_delivers_an_appended_line_and_stops(tmp_path: Path) -> None:
    log = tmp_path / "kmsg.log"
    log.write_text("")
    f = follower(tmp_path, log, poll_interval=0.05)
    f.start()
    try:
        with log.open("a") as handle:
            handle.write(kmsg(1, RESET))
        event = f.events.get(timeout=10)  # a deadline, not a sleep
        assert event.kind == "gpu_reset"
    finally:
        assert f.stop(timeout=10)
    f.close()
    assert json.loads((tmp_path / "state" / CURSOR_FILE).read_text())["file"]["offset"] > 0


def test_file_source_keys_name_the_line_offset(tmp_path: Path) -> None:
    log = tmp_path / "kmsg.log"
    first = kmsg(1, NOISE)
    log.write_text(first + kmsg(2, RESET))
    source = FileSource(Tally(), str(log))
    source.open(None)
    lines = source.read(10)
    assert [line.key for line in lines] == [f"{log}:0", f"{log}:{len(first)}"]
    source.close()


def test_auto_falls_back_to_kmsg_when_journalctl_cannot_run(tmp_path: Path) -> None:
    fake_kmsg = tmp_path / "kmsg"
    fake_kmsg.write_text("")
    config = KernelLogConfig(
        source="auto",
        journalctl=str(tmp_path / "missing-journalctl"),
        kmsg_path=str(fake_kmsg),
        backoff_initial=1.0,
    )
    f = KernelLogFollower(
        config, tmp_path, host=host(True, True), boot_id=BOOT, boot_time=BOOT_TIME
    )
    f.step(T0)
    assert f.stats()["journal_unavailable"] == 1
    f.step(T0 + 1)
    assert f.source is not None and f.source.name == "kmsg"
    f.stop()


def test_events_serialise_for_the_event_log(tmp_path: Path) -> None:
    log = tmp_path / "kmsg.log"
    log.write_text(kmsg(1, RESET))
    f = follower(tmp_path, log)
    f.step(T0)
    data = f.events.get_nowait().as_dict()
    assert json.loads(json.dumps(data))["kind"] == "gpu_reset"
    assert data["lines"] == [RESET] and data["key"] == f"{log}:0"
