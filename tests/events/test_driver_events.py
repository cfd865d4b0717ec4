"""The KFD event reader over amdsmi's AmdSmiEventReader (the simulator's face, which behaves
as amdsmi 7.0.2 does, traps included): events of every GPU from one read, the payloads
decoded, the PAGE_FAULT_START numbering trap, bad input counted, stale handles reopened."""

from __future__ import annotations

import threading
from typing import Any

from fleetd.clock import FakeClock
from fleetd.events.driver_events import (
    DEVICE_WIDE,
    AmdSmiEventSource,
    DriverEvent,
    decode_message,
)
from fleetd.sim import SimulatedAmdSmi, build_node
from fleetd.sim import wrapper as w


def _source(kinds: tuple[str, ...] = DEVICE_WIDE) -> tuple[Any, Any, AmdSmiEventSource]:
    clock = FakeClock(1_800_000_000.0)
    node = build_node("MI300X", seed=2, clock=clock)
    amdsmi = SimulatedAmdSmi(node)
    amdsmi.amdsmi_init()
    handles = amdsmi.amdsmi_get_processor_handles()
    source = AmdSmiEventSource(
        amdsmi, lambda: list(enumerate(handles)), lambda _e: None, kinds=kinds, now=clock.now
    )
    return node, clock, source


def test_one_read_brings_every_gpus_events_decoded() -> None:
    node, clock, source = _source()
    assert source.open() == 8
    assert source.read_once() == []  # NO_DATA is "nothing happened", not an error
    node.inject(0, "vm_fault", pid=0x1092, process="python3")
    node.inject(2, "power_excursion")
    node.reset_hive(5)
    clock.advance(1.0)
    events = source.read_once()
    assert events is not None
    kinds = [(e.gpu, e.kind) for e in events]
    assert (0, "vmfault") in kinds and (2, "thermal_throttle") in kinds
    assert [g for g, k in kinds if k == "gpu_post_reset"] == list(range(8))  # the hive
    vm = next(e for e in events if e.kind == "vmfault")
    assert vm.fields == {"pid": 0x1092, "task": "python3"}
    ppt = next(e for e in events if e.kind == "thermal_throttle")
    assert ppt.fields["bitmask"] == 0x10000 and ppt.fields["counter"] == 1
    assert source.tally["events.gpu_pre_reset"] == 8


def test_page_fault_start_cannot_be_asked_for_and_8_is_page_fault_end() -> None:
    _node, _clock, source = _source((*DEVICE_WIDE, "page_fault_start", "page_fault_end"))
    assert "page_fault_start" not in source.kinds and source.tally["page_fault_start_unreceivable"]
    members = source.members()
    assert [int(m.value) for m in members][-1] == 8  # the reader subscribes KFD event 8
    # read() names KFD event 8 "PAGE_FAULT_START" (the enum's first name for 8): it is the end
    assert source.kind_of("PAGE_FAULT_START") == "page_fault_end"
    assert source.kind_of("GPU_POST_RESET") == "gpu_post_reset"
    assert source.kind_of("NO_SUCH_EVENT") is None


def test_payloads_that_are_not_what_kfd_sends_are_counted_not_invented() -> None:
    assert decode_message("thermal_throttle", "zz:1") is None
    assert decode_message("vmfault", "1092") is None
    assert decode_message("gpu_post_reset", "1f") == {"seq": 0x1F}
    node, clock, source = _source()
    source.open()
    node.emit_event(1, w.AMDSMI_EVT_NOTIF_THERMAL_THROTTLE, "garbage")
    clock.advance(1.0)
    [event] = source.read_once() or []
    assert event.fields == {"payload": "garbage"} and source.tally["unparsed_message"] == 1


def test_a_failed_read_closes_the_readers_and_the_thread_reopens_them() -> None:
    node, clock, source = _source()
    got: list[DriverEvent] = []
    arrived = threading.Event()

    def deliver(events: list[DriverEvent]) -> None:
        got.extend(events)
        arrived.set()

    source.on_events = deliver
    source.reopen_interval = 0.05
    source.read_timeout = 0.02
    source.open()
    source.amdsmi.amdsmi_shut_down()  # a rediscovery: every old handle is stale
    source.amdsmi.amdsmi_init()
    handles = source.amdsmi.amdsmi_get_processor_handles()
    source.sources = lambda: list(enumerate(handles))
    source.start()
    try:
        node.emit_event(4, w.AMDSMI_EVT_NOTIF_VMFAULT, "10:python3")
        clock.advance(1.0)
        for _ in range(3):  # the event may have been emitted before the new readers opened
            if arrived.wait(2.0):
                break
            node.emit_event(4, w.AMDSMI_EVT_NOTIF_VMFAULT, "10:python3")
            clock.advance(1.0)
        assert any(e.gpu == 4 and e.kind == "vmfault" for e in got), source.tally.snapshot()
    finally:
        source.stop()
