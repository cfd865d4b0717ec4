"""Firmware versions through both faces: ``amdsmi_get_fw_info`` read by fleetd's backend at
discovery, from the stand-in and from the real amdsmi over the emulated library, gives the
same blocks and versions (formatted by the real wrapper's rules), once per physical GPU; a
failing call is missing (None), never an empty list; a flash is seen at the next discovery."""

from __future__ import annotations

from collections.abc import Callable

from fleetd.clock import FakeClock
from fleetd.registry.drift import firmware_text
from fleetd.sim import build_node

from .pollers import Pair

PSP_SOSDRV, PM, CP_MEC1 = 30, 77, 7

MI300X_FIRMWARE = {
    "CP_PFP": "24",
    "CP_ME": "24",
    "CP_MEC1": "177",
    "RLC": "90",
    "SDMA0": "21",
    "VCN": "01.10.10.1B",
    "PSP_SOSDRV": "00.36.02.59",
    "TA_RAS": "1B.36.02.14",
    "TA_XGMI": "20.00.00.14",
    "PM": "00.85.114.00",
}


def test_both_faces_read_the_same_firmware(clock: FakeClock, polled: Callable[..., Pair]) -> None:
    node = build_node("MI300X", seed=4, clock=clock)
    node.set_firmware(2, PSP_SOSDRV, 0x0036025A)  # one GPU flashed ahead of the others
    node.inject(5, "unsupported_fields", calls=["amdsmi_get_fw_info"])
    pair = polled(node)
    stand_in, real = (b.firmware() for b in pair.backends)
    assert stand_in == real
    bdfs = [g.bdf for g in pair.backends[1].gpus()]
    assert real[bdfs[0]] == MI300X_FIRMWARE
    assert real[bdfs[2]] == {**MI300X_FIRMWARE, "PSP_SOSDRV": "00.36.02.5A"}
    assert real[bdfs[5]] is None  # the call failed: missing, not "no firmware"
    assert firmware_text(real.values()) == (
        "CP_ME=24 CP_MEC1=177 CP_PFP=24 PM=00.85.114.00 PSP_SOSDRV=00.36.02.59|00.36.02.5A "
        "RLC=90 SDMA0=21 TA_RAS=1B.36.02.14 TA_XGMI=20.00.00.14 VCN=01.10.10.1B"
    )
    # static: a flash shows at the next discovery (a firmware update reloads the driver)
    node.set_firmware(None, PM, 0x00557300)
    node.set_firmware(None, CP_MEC1, 178)
    assert pair.backends[1].firmware()[bdfs[0]] == MI300X_FIRMWARE
    for backend in pair.backends:
        backend.rediscover()
    stand_in, real = (b.firmware() for b in pair.backends)
    assert stand_in == real
    assert real[bdfs[0]] == {**MI300X_FIRMWARE, "PM": "00.85.115.00", "CP_MEC1": "178"}


def test_a_partitioned_node_reads_firmware_once_per_physical_gpu(
    clock: FakeClock, polled: Callable[..., Pair]
) -> None:
    node = build_node("MI300X", seed=4, clock=clock, compute_partition="CPX")
    pair = polled(node)
    stand_in, real = (b.firmware() for b in pair.backends)
    assert stand_in == real
    assert len(pair.backends[1].gpus()) == 64 and len(real) == 8
    primaries = {g.bdf for g in pair.backends[1].gpus() if g.primary}
    assert set(real) == primaries and all(v == MI300X_FIRMWARE for v in real.values())
