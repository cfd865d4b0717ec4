"""The parser against real amdgpu/AER lines (tests/events/fixtures) and against bad input."""

from __future__ import annotations

import random
import string
from collections.abc import Sequence

import pytest

from fleetd.events import KernelLine, KernelLogParser
from fleetd.events.model import KernelEvent

from .fixtures import Block, load_blocks, strip_stamp

BLOCKS = load_blocks()
NOW = 1_767_225_600.0


def parse(lines: list[str], gpus: Sequence[str] = ()) -> tuple[list[KernelEvent], KernelLogParser]:
    parser = KernelLogParser(gpus)
    events: list[KernelEvent] = []
    for i, text in enumerate(lines):
        events.extend(parser.feed(KernelLine(text, None, f"t:{i}"), NOW))
    events.extend(parser.flush())
    return events, parser


def value_of(event: KernelEvent, key: str) -> str:
    if key == "bdf":
        return str(event.bdf)
    return str(event.fields.get(key))


def test_every_fixture_block_names_its_source() -> None:
    assert len(BLOCKS) >= 25
    for block in BLOCKS:
        assert block.source, block.name
        assert block.source.startswith(("https://", "torvalds/linux:", "ROCm/", "drivers/"))
        assert block.lines, block.name


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_fixture_block(block: Block) -> None:
    events, parser = parse([strip_stamp(x) for x in block.lines], block.gpus)
    got = [(e.kind, e) for e in events]
    assert [k for k, _ in got] == [k for k, _ in block.expect], block.name
    for (kind, wanted), (_, event) in zip(block.expect, got, strict=True):
        for key, value in wanted.items():
            assert value_of(event, key) == value, f"{block.name}: {kind}.{key}"
    for name, n in block.counts.items():
        assert parser.tally[name] == n, f"{block.name}: count {name}"
    assert parser.tally["parser_error"] == 0


def test_fixture_lines_count() -> None:
    """The fixtures hold real lines from public reports, not only our own renderings."""
    quoted = sum(len(b.lines) for b in BLOCKS if b.source.startswith("https://"))
    assert quoted >= 80


def test_event_time_and_key_come_from_the_first_line() -> None:
    parser = KernelLogParser()
    first = KernelLine(
        "amdgpu 0000:c1:00.0: ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=3",
        1000.5,
        "cursor-a",
    )
    second = KernelLine("amdgpu 0000:c1:00.0:  Process vllm pid 7 thread vllm pid 8", 1000.6, "b")
    assert parser.feed(first, NOW) == [] and parser.feed(second, NOW) == []
    (event,) = parser.flush()
    assert (event.at, event.key, event.get("pid")) == (1000.5, "cursor-a", 7)
    assert len(event.lines) == 2
    unknown_time = KernelLine("amdgpu 0000:c1:00.0: amdgpu: GPU reset(2) succeeded!")
    (reset,) = parser.feed(unknown_time, NOW)
    assert reset.at == NOW  # the source had no stamp: the time it was read


def test_a_new_event_closes_the_open_one_of_the_same_gpu_only() -> None:
    lines = [
        "amdgpu 0000:c1:00.0: ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=3",
        "amdgpu 0000:d1:00.0: ring sdma0 timeout, signaled seq=5, emitted seq=6",
        "amdgpu 0000:c1:00.0:  Process a pid 1 thread a pid 1",
        "amdgpu 0000:d1:00.0:  Process b pid 2 thread b pid 2",
    ]
    events, _ = parse(lines)
    assert {(e.bdf, e.get("process")) for e in events} == {
        ("0000:c1:00.0", "a"),
        ("0000:d1:00.0", "b"),
    }


def test_a_detail_line_without_its_event_is_counted_not_a_fault() -> None:
    events, parser = parse(
        [
            "amdgpu 0000:c1:00.0:  Process a pid 1 thread a pid 1",
            "amdgpu 0000:c1:00.0:   device [1002:74a1] error status/mask=00000001/00000000",
        ]
    )
    assert events == []
    assert parser.tally["orphan_detail"] == 2


def test_unparsed_amdgpu_fault_lines_are_counted_and_other_lines_ignored() -> None:
    events, parser = parse(
        [
            "amdgpu 0000:c1:00.0: amdgpu: something new failed in a way we never saw",
            "amdgpu 0000:c1:00.0: amdgpu: all is well",
            "nvme 0000:01:00.0: I/O 12 QID 3 timeout, aborting",
            "EXT4-fs (sda1): mounted filesystem",
        ]
    )
    assert events == []
    assert (parser.tally["unparsed"], parser.tally["routine"], parser.tally["ignored"]) == (1, 1, 2)
    assert "never saw" in parser.last_unparsed


def test_aer_for_a_device_that_is_not_a_gpu_is_ignored() -> None:
    lines = [
        "pcieport 0000:00:01.0: AER: Corrected error message received from 0000:01:00.0",
        "pcieport 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer, "
        "(Receiver ID)",
    ]
    assert parse(lines, ["0000:c1:00.0"])[0] == []
    assert len(parse(lines, ["0000:01:00.0"])[0]) == 1


def test_drm_minor_lines_are_learned() -> None:
    parser = KernelLogParser(cards={0: "0000:AA:00.0"})
    parser.feed(KernelLine("[drm] Initialized amdgpu 3.64.0 for 0000:C1:00.0 on minor 1"), NOW)
    assert parser.cards == {0: "0000:aa:00.0", 1: "0000:c1:00.0"}
    assert parser.tally["routine"] == 1


ALPHABET = string.ascii_letters + string.digits + " :;,.[](){}<>=-_/!*'\"\t\\x"


def test_garbage_never_raises_and_never_becomes_a_fault() -> None:
    rng = random.Random(17)
    prefixes = ["amdgpu 0000:c1:00.0: amdgpu: ", "[drm] ", "pcieport 0000:00:01.0: AER: ", ""]
    lines = []
    for _ in range(3000):
        body = "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 120)))
        lines.append(rng.choice(prefixes) + body)
    events, parser = parse(lines, ["0000:c1:00.0"])
    assert events == []
    assert parser.tally["parser_error"] == 0


def test_mutated_real_lines_never_raise() -> None:
    rng = random.Random(3)
    real = [strip_stamp(x) for b in BLOCKS for x in b.lines]
    parser = KernelLogParser(["0000:01:00.0", "0000:c1:00.0"])
    for _ in range(4000):
        text = rng.choice(real)
        cut = rng.randrange(len(text) + 1)
        mutated = (
            text[:cut]
            + rng.choice(["", "\x00", "9999999999999999999", "(", "]"])
            + text[cut + rng.randrange(3) :]
        )
        parser.feed(KernelLine(mutated), NOW)
    parser.flush()
    assert parser.tally["parser_error"] == 0


def test_drm_minor_line_with_the_driver_date_is_learned() -> None:
    """Older kernels print the driver date: ``Initialized amdgpu 3.26.0 20150101 for ...``."""
    parser = KernelLogParser()
    line = "[drm] Initialized amdgpu 3.26.0 20150101 for 0000:04:00.0 on minor 2"
    parser.feed(KernelLine(line), NOW)
    assert parser.cards == {2: "0000:04:00.0"}


def test_other_drm_drivers_lines_are_ignored() -> None:
    events, parser = parse(["[drm:r600_ib_test [radeon]] *ERROR* radeon: fence wait timed out."])
    assert events == [] and parser.tally["ignored"] == 1 and parser.tally["unparsed"] == 0
