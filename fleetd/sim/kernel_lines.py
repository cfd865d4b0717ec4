"""The kernel messages the simulated amdgpu driver prints, per fault class.

Each function returns the message text of one report (without the journal's or kmsg's own
prefix), in the formats of the driver and the PCI core as public bug reports quote them
(tests/events/fixtures/ holds those real lines with their sources; fleetd's parser,
fleetd/events/kernel_log.py, reads both). The simulator only fills in the values: which GPU
(its BDF), the RAS event number, the counts.

Faults that print nothing at run time on MI300/MI350-class parts print nothing here either:
a PCIe link that retrained narrower or slower (the PCI core reports the link only when it
enumerates), thermal and power throttling (the SMU reports them as KFD THERMAL_THROTTLE
events and in the violation counters, not in the kernel log).
"""

from __future__ import annotations

AMDGPU_DEVICE = "1002:74a1"  # MI300X; the AER "device [vendor:device]" line names it
AER_BITS = {
    "RxErr": (0, 0x1),
    "BadTLP": (6, 0x40),
    "BadDLLP": (7, 0x80),
    "Rollover": (8, 0x100),
    "Timeout": (12, 0x1000),
}


def _dev(bdf: str, text: str) -> str:
    """``dev_info``/``dev_err`` of amdgpu: ``amdgpu <bdf>: amdgpu: <text>``."""
    return f"amdgpu {bdf}: amdgpu: {text}"


def ras_count(bdf: str, event_id: int, count: int, kind: str, block: str) -> str:
    """amdgpu_ras.c's per-block report: ``{N}socket: 0, die: 0, 1 new uncorrectable hardware
    errors detected in umc block`` (``kind``: uncorrectable, correctable, deferred)."""
    tail = ", no user action is needed" if kind == "correctable" else ""
    return _dev(
        bdf,
        f"{{{event_id}}}socket: 0, die: 0, {count} new {kind} hardware errors detected in "
        f"{block.lower()} block{tail}",
    )


def ras_fatal(bdf: str, event_id: int, source: str = "ERREVENT_ATHUB_INTERRUPT") -> str:
    """The fatal-error interrupt (sync flood) report of amdgpu_ras.c."""
    return f"amdgpu {bdf}: {{{event_id}}}uncorrectable hardware error({source}) detected!"


def poison_created(bdf: str) -> str:
    return _dev(bdf, "Poison is created")


def reset_begin(bdf: str) -> str:
    """amdgpu_device_gpu_recover: printed once, by the device that starts the recovery."""
    return _dev(bdf, "GPU reset begin!")


def reset_method(bdf: str, method: str = "MODE1") -> str:
    return _dev(bdf, f"{method} reset")


def reset_resuming(bdf: str) -> str:
    return _dev(bdf, "GPU reset succeeded, trying to resume")


def reset_succeeded(bdf: str, counter: int) -> str:
    """Printed by every device of the hive once its part of the recovery is over."""
    return _dev(bdf, f"GPU reset({counter}) succeeded!")


def ring_timeout(
    bdf: str, ring: str, signaled: int, emitted: int, process: str, pid: int
) -> list[str]:
    """amdgpu_job_timedout: the timeout and the process the job belonged to."""
    head = f"amdgpu {bdf}: [drm:amdgpu_job_timedout [amdgpu]] *ERROR* "
    return [
        f"{head}ring {ring} timeout, signaled seq={signaled}, emitted seq={emitted}",
        f"{head}Process information: process {process} pid {pid} thread {process} pid {pid}",
    ]


def page_fault(
    bdf: str, hub: str, vmid: int, pasid: int, process: str, pid: int, address: int
) -> list[str]:
    """gmc_v9_0_process_interrupt: the fault and the page it hit (client UTCL2)."""
    return [
        _dev(
            bdf,
            f"[{hub}] retry page fault (src_id:0 ring:0 vmid:{vmid} pasid:{pasid}, for process "
            f"{process} pid {pid} thread {process} pid {pid})",
        ),
        _dev(bdf, f"  in page starting at address 0x{address:016x} from client 0x1b (UTCL2)"),
    ]


def aer_corrected(bdf: str, port: str, error: str) -> list[str]:
    """The PCI core's AER report of a corrected error whose source is the GPU."""
    bit, mask = AER_BITS[error]
    return [
        f"pcieport {port}: AER: Corrected error message received from {bdf}",
        f"amdgpu {bdf}: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Receiver ID)",
        f"amdgpu {bdf}:   device [{AMDGPU_DEVICE}] error status/mask={mask:08x}/00002000",
        f"amdgpu {bdf}:    [{bit:2d}] {error}",
    ]


def firmware_failure(bdf: str, block: str, firmware: str, error: int = -22) -> list[str]:
    """A firmware that fails to load when the driver brings an IP block up again."""
    return [
        _dev(bdf, f'{block}: Failed to load firmware "{firmware}"'),
        _dev(bdf, f"hw_init of IP block <{block}> failed {error}"),
    ]


def reset_failed(bdf: str, counter: int) -> str:
    return _dev(bdf, f"GPU reset({counter}) failed")
