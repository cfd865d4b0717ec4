"""Where kernel lines come from: the systemd journal, /dev/kmsg, or a file (simulator, tests).

Every source reads without blocking (``read`` returns what is there now, ``[]`` when nothing
is), knows its resume position (``position()``, persisted by the follower after the lines it
returned were handled) and resumes from one (``open(position)``) without repeating a line.

- ``JournalSource`` runs ``journalctl --dmesg --output=json --follow --no-tail`` (kernel
  transport, this boot) with ``--after-cursor`` from the saved cursor. journalctl is what
  every systemd host has; python-systemd would bind libsystemd but has no wheels, so a
  subprocess is the dependency-free choice. A cursor journalctl rejects (vacuumed journal,
  another machine's) is dropped and the read restarts at the saved cursor's wall time,
  skipping entries up to it.
- ``KmsgSource`` reads /dev/kmsg records ``<prio>,<seq>,<usec>,<flags>;message`` and resumes
  after the saved sequence number when the boot id is the same (a new boot starts at the
  oldest record the ring still holds). Records the ring overwrote before they were read
  are counted (EPIPE), not fatal.
- ``FileSource`` tails a file of kmsg records or journal JSON lines (or plain messages),
  resuming at the saved byte offset; a file replaced or truncated is read from its start.
"""

from __future__ import annotations

import errno
import json
import os
import select
import subprocess
from collections.abc import Sequence
from typing import Any, Protocol

from fleetd.events.kernel_log import KernelLine
from fleetd.events.model import Tally

MAX_LINE = 64 * 1024
"""Longest line accepted (journal JSON of one kernel message is well under 8 KiB)."""


class SourceError(Exception):
    """The source cannot be read now (missing, exited, refused); ``kind`` names why."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail


class Source(Protocol):
    name: str

    def open(self, position: dict[str, Any] | None) -> None: ...

    def read(self, limit: int) -> list[KernelLine]: ...

    def position(self) -> dict[str, Any] | None: ...

    def fileno(self) -> int | None: ...

    def close(self) -> None: ...


# ---------------------------------------------------------------------------------- record formats
def parse_kmsg(record: str) -> tuple[int, int, str] | None:
    """``"6,1234,5678901,-;msg"`` → (seq, usec, msg); None when it is not a kmsg record.

    Continuation lines (`` SUBSYSTEM=pci``) and the kernel's ``\\xNN`` escapes are left to the
    caller / kept as they are: only the first line of a record is the message.
    """
    head, sep, message = record.partition(";")
    if not sep:
        return None
    parts = head.split(",")
    if len(parts) < 4:
        return None
    try:
        int(parts[0])
        seq = int(parts[1])
        usec = int(parts[2])
    except ValueError:
        return None
    return seq, usec, message.split("\n", 1)[0]


def parse_journal(line: str) -> dict[str, Any] | None:
    """One ``journalctl -o json`` line → {message, cursor, realtime_usec, boot_id}; None if bad.

    MESSAGE is a string, or a list of byte values when the text was not valid UTF-8.
    """
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    message = data.get("MESSAGE")
    if isinstance(message, list):
        try:
            message = bytes(int(b) & 0xFF for b in message).decode("utf-8", "replace")
        except (TypeError, ValueError):
            return None
    if not isinstance(message, str):
        return None
    realtime = data.get("__REALTIME_TIMESTAMP")
    try:
        usec = int(realtime) if realtime is not None else None
    except (TypeError, ValueError):
        usec = None
    cursor = data.get("__CURSOR")
    boot = data.get("_BOOT_ID")
    return {
        "message": message,
        "cursor": cursor if isinstance(cursor, str) else None,
        "realtime_usec": usec,
        "boot_id": boot if isinstance(boot, str) else None,
    }


_OURS = (b"amdgpu", b"[drm", b"AER", b"PCIe Bus Error")


def _maybe_ours(raw: bytes) -> bool:
    """The parser's own first test, on the raw bytes (a JSON-escaped message still holds
    these ASCII words): lines without any of them cannot be amdgpu or AER lines."""
    return any(word in raw for word in _OURS)


class _Lines:
    """Splits bytes read in chunks into lines, dropping (and counting) oversized ones."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self._buf = b""
        self._skipping = False

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        out: list[bytes] = []
        while True:
            cut = self._buf.find(b"\n")
            if cut < 0:
                break
            line, self._buf = self._buf[:cut], self._buf[cut + 1 :]
            if self._skipping:
                self._skipping = False
                continue
            out.append(line)
        if len(self._buf) > MAX_LINE:
            self.tally.note("oversized_line")
            self._buf = b""
            self._skipping = True
        return out

    @property
    def pending(self) -> int:
        return len(self._buf)


# ---------------------------------------------------------------------------------- journal
class JournalSource:
    """Kernel messages of this boot from the systemd journal, through journalctl."""

    name = "journal"

    def __init__(self, tally: Tally, journalctl: str = "journalctl") -> None:
        self.tally = tally
        self.journalctl = journalctl
        self._proc: subprocess.Popen[bytes] | None = None
        self._lines = _Lines(tally)
        self._cursor: str | None = None
        self._realtime: int | None = None
        self._skip_until: int | None = None
        self._tried_cursor: str | None = None

    def command(self, position: dict[str, Any] | None) -> list[str]:
        argv = [self.journalctl, "--dmesg", "--output=json", "--follow", "--no-tail", "--quiet"]
        cursor = (position or {}).get("cursor")
        realtime = (position or {}).get("realtime_usec")
        if isinstance(cursor, str) and cursor:
            argv.append(f"--after-cursor={cursor}")
        elif isinstance(realtime, int):
            argv.append(f"--since=@{realtime // 1_000_000}")
        return argv

    def open(self, position: dict[str, Any] | None) -> None:
        self.close()
        position = dict(position or {})
        self._cursor = position.get("cursor") if isinstance(position.get("cursor"), str) else None
        realtime = position.get("realtime_usec")
        self._realtime = realtime if isinstance(realtime, int) else None
        if self._cursor is None and self._realtime is not None:
            self._skip_until = self._realtime  # --since is whole seconds: skip what we had
        self._tried_cursor = self._cursor
        try:
            self._proc = subprocess.Popen(
                self.command(position),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            raise SourceError("journal_unavailable", str(exc)) from None
        for stream in (self._proc.stdout, self._proc.stderr):
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
        self._lines = _Lines(self.tally)

    def fileno(self) -> int | None:
        if self._proc is None or self._proc.stdout is None:
            return None
        return self._proc.stdout.fileno()

    def read(self, limit: int) -> list[KernelLine]:
        proc = self._proc
        if proc is None or proc.stdout is None:
            raise SourceError("journal_closed")
        out: list[KernelLine] = []
        eof = False
        while len(out) < limit:
            try:
                chunk = os.read(proc.stdout.fileno(), 65536)
            except BlockingIOError:
                break
            if not chunk:
                eof = True
                break
            for raw in self._lines.feed(chunk):
                if not _maybe_ours(raw):
                    # 95 % of a kernel log is other drivers': skip their JSON decoding and
                    # keep only the last one's raw text for the cursor
                    self._unparsed_tail = raw
                    self.tally.counts["prefiltered"] += 1
                    continue
                self._unparsed_tail = None
                line = self._record(raw)
                if line is not None:
                    out.append(line)
        if self._unparsed_tail is not None:
            self._position_from(self._unparsed_tail)
            self._unparsed_tail = None
        self._drain_stderr()
        if eof and not out:
            code = proc.wait()
            err = self._stderr_tail
            self.close()
            if self._tried_cursor is not None and "cursor" in err.lower():
                self._cursor = None  # rejected: resume from its time instead
                raise SourceError("cursor_rejected", err)
            raise SourceError("journal_exited", f"exit {code}: {err}".strip())
        return out

    _unparsed_tail: bytes | None = None

    def _position_from(self, raw: bytes) -> None:
        """Advance the cursor past a line that was skipped unparsed."""
        entry = parse_journal(raw.decode("utf-8", "replace"))
        if entry is None:
            return
        if self._skip_until is not None and entry["realtime_usec"] is not None:
            if entry["realtime_usec"] <= self._skip_until:
                return
            self._skip_until = None
        if entry["cursor"] is not None:
            self._cursor = entry["cursor"]
        if entry["realtime_usec"] is not None:
            self._realtime = entry["realtime_usec"]

    def _record(self, raw: bytes) -> KernelLine | None:
        entry = parse_journal(raw.decode("utf-8", "replace"))
        if entry is None:
            self.tally.note("malformed_record")
            return None
        usec = entry["realtime_usec"]
        if self._skip_until is not None and usec is not None and usec <= self._skip_until:
            self.tally.counts["skipped_duplicate"] += 1
            return None
        self._skip_until = None
        if entry["cursor"] is not None:
            self._cursor = entry["cursor"]
        if usec is not None:
            self._realtime = usec
        at = None if usec is None else usec / 1e6
        return KernelLine(entry["message"], at, entry["cursor"] or "")

    _stderr_tail = ""

    def _drain_stderr(self) -> None:
        if self._proc is None or self._proc.stderr is None:
            return
        try:
            data = os.read(self._proc.stderr.fileno(), 65536)
        except (BlockingIOError, OSError):
            return
        if data:
            self._stderr_tail = (self._stderr_tail + data.decode("utf-8", "replace"))[-500:]

    def position(self) -> dict[str, Any] | None:
        if self._cursor is None and self._realtime is None:
            return None
        return {"cursor": self._cursor, "realtime_usec": self._realtime}

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


# ---------------------------------------------------------------------------------- /dev/kmsg
class KmsgSource:
    """The kernel ring buffer through /dev/kmsg (one record per read)."""

    name = "kmsg"

    def __init__(
        self,
        tally: Tally,
        boot_id: str | None,
        boot_time: float | None,
        path: str = "/dev/kmsg",
    ) -> None:
        self.tally = tally
        self.boot_id = boot_id
        self.boot_time = boot_time
        self.path = path
        self._fd: int | None = None
        self._seq: int | None = None
        self._after: int | None = None

    def open(self, position: dict[str, Any] | None) -> None:
        self.close()
        position = position or {}
        saved_seq = position.get("seq")
        same_boot = self.boot_id is not None and position.get("boot_id") == self.boot_id
        self._after = saved_seq if same_boot and isinstance(saved_seq, int) else None
        self._seq = self._after
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise SourceError("kmsg_unavailable", exc.strerror or str(exc)) from None

    def fileno(self) -> int | None:
        return self._fd

    def read(self, limit: int) -> list[KernelLine]:
        if self._fd is None:
            raise SourceError("kmsg_closed")
        out: list[KernelLine] = []
        while len(out) < limit:
            try:
                data = os.read(self._fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    self.tally.note("kmsg_overrun")  # the ring overwrote records we had not read
                    continue
                self.close()
                raise SourceError("kmsg_lost", exc.strerror or str(exc)) from None
            if not data:
                break
            line = self.record(data.decode("utf-8", "replace"))
            if line is not None:
                out.append(line)
        return out

    def record(self, text: str) -> KernelLine | None:
        parsed = parse_kmsg(text)
        if parsed is None:
            self.tally.note("malformed_record")
            return None
        seq, usec, message = parsed
        if self._after is not None and seq <= self._after:
            self.tally.counts["skipped_duplicate"] += 1
            return None
        self._seq = seq
        at = None if self.boot_time is None else self.boot_time + usec / 1e6
        return KernelLine(message, at, f"{self.boot_id or '?'}:{seq}")

    def position(self) -> dict[str, Any] | None:
        if self._seq is None or self.boot_id is None:
            return None
        return {"boot_id": self.boot_id, "seq": self._seq}

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


# ---------------------------------------------------------------------------------- a file
class FileSource:
    """A file another process appends to: kmsg records, journal JSON lines or plain messages
    (``fmt`` "auto" decides per line). The simulator writes one; so do the tests."""

    name = "file"

    def __init__(
        self,
        tally: Tally,
        path: str,
        fmt: str = "auto",
        boot_time: float | None = None,
    ) -> None:
        self.tally = tally
        self.path = path
        self.fmt = fmt
        self.boot_time = boot_time
        self._handle: Any = None
        self._inode: int | None = None
        self._offset = 0
        self._lines = _Lines(tally)

    def open(self, position: dict[str, Any] | None) -> None:
        self.close()
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 - kept open across reads
        except OSError as exc:
            raise SourceError("file_missing", exc.strerror or str(exc)) from None
        stat = os.fstat(handle.fileno())
        position = position or {}
        offset = position.get("offset")
        same = (
            position.get("path") == self.path
            and position.get("inode") == stat.st_ino
            and isinstance(offset, int)
            and 0 <= offset <= stat.st_size
        )
        self._offset = offset if same and isinstance(offset, int) else 0
        if position and not same:
            self.tally.note("file_replaced")
        handle.seek(self._offset)
        self._handle, self._inode = handle, stat.st_ino
        self._lines = _Lines(self.tally)

    def fileno(self) -> int | None:
        return None  # a regular file is always "readable": the follower polls it

    def read(self, limit: int) -> list[KernelLine]:
        if self._handle is None:
            raise SourceError("file_closed")
        self._check_rotation()
        out: list[KernelLine] = []
        while len(out) < limit:
            chunk = self._handle.read(65536)
            if not chunk:
                break
            start = self._offset
            for raw in self._lines.feed(chunk):
                line = self._parse(raw.decode("utf-8", "replace"), start)
                start += len(raw) + 1
                if line is not None:
                    out.append(line)
            # the next unread line starts after the complete lines (a partial one is re-read)
            self._offset = self._handle.tell() - self._lines.pending
        return out

    def _check_rotation(self) -> None:
        try:
            stat = os.stat(self.path)
        except OSError:
            self.close()
            raise SourceError("file_missing", self.path) from None
        if stat.st_ino != self._inode or stat.st_size < self._offset:
            self.tally.note("file_rotated")
            self.open(None)

    def _parse(self, text: str, offset: int) -> KernelLine | None:
        if not text.strip() or text.startswith(" "):
            return None  # blank, or a kmsg continuation line (" SUBSYSTEM=pci")
        key = f"{self.path}:{offset}"
        fmt = self.fmt
        if fmt == "auto":
            fmt = "journal" if text.startswith("{") else "kmsg" if parse_kmsg(text) else "text"
        if fmt == "journal":
            entry = parse_journal(text)
            if entry is None:
                self.tally.note("malformed_record")
                return None
            usec = entry["realtime_usec"]
            return KernelLine(entry["message"], None if usec is None else usec / 1e6, key)
        if fmt == "kmsg":
            parsed = parse_kmsg(text)
            if parsed is None:
                self.tally.note("malformed_record")
                return None
            _seq, usec, message = parsed
            at = None if self.boot_time is None else self.boot_time + usec / 1e6
            return KernelLine(message, at, key)
        return KernelLine(text, None, key)

    def position(self) -> dict[str, Any] | None:
        if self._inode is None:
            return None
        return {"path": self.path, "inode": self._inode, "offset": self._offset}

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()


def wait_readable(fds: Sequence[int], timeout: float) -> bool:
    """True when one of ``fds`` is readable within ``timeout`` seconds (the thread's wait)."""
    if not fds:
        return False
    try:
        ready, _, _ = select.select(list(fds), [], [], max(0.0, timeout))
    except (OSError, ValueError):
        return False
    return bool(ready)
