"""SimNode: an 8-GPU node in one XGMI hive, with physics, counters, processes and faults.

The model keeps its state in the C library's raw terms (°C, W, µW caps, MT/s, energy ticks,
KB, counts) and never builds a Python amdsmi dict: the faces (``face.SimulatedAmdSmi`` and,
later, an emulated libamd_smi.so) read it through ``raw.RawLibrary``.

Time comes only from the injected clock. Every read first advances the model to
``clock.now()``; between input changes every quantity has a closed form (see physics.py),
so the same seed and the same sequence of (time, call) give the same numbers. The only real
time anywhere is a hung call's optional duration (the backend's timeout is real time).
"""

from __future__ import annotations

import functools
import random
import shutil
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from fleetd.clock import Clock
from fleetd.logs import get_logger
from fleetd.sim import kernel_lines as kl
from fleetd.sim import physics
from fleetd.sim import wrapper as w
from fleetd.sim.faults import (
    DEFAULT_PERSISTENT,
    BadPages,
    EccCeStorm,
    EccDeferred,
    EccUncorrectable,
    Fault,
    FirmwareFailure,
    HungCall,
    PcieDowngrade,
    PcieReplayStorm,
    PowerExcursion,
    RingTimeout,
    ThermalRunaway,
    UnsupportedFields,
    VmFault,
    XgmiLinkDown,
    parse_params,
)
from fleetd.sim.hardware import SPECS, BoardIdentity, GpuSpec, make_hive_id, make_identities
from fleetd.sim.partitions import Partition, check_modes, layout

log = get_logger(__name__)
T = TypeVar("T")

ACC_HZ = 100.0
"""gpu_metrics accumulation_counter ticks per second (residency counters use the same unit)."""
FW_TICKS_PER_S = 100_000_000
"""firmware_timestamp resolution: 10 ns."""
ENERGY_RESOLUTION_UJ: float = struct.unpack("f", struct.pack("f", 15.259))[0]
"""µJ per energy tick, as the C float the library returns (15.258999824523926)."""
PAGE_SIZE = 4096
ENABLED_BLOCKS: tuple[str, ...] = ("UMC", "SDMA", "GFX", "MMHUB", "PCIE_BIF", "HDP", "XGMI_WAFL")
BASE_VRAM_USED = 290 * 1024 * 1024

TAU_POWER = 3.0
TAU_HOTSPOT = 20.0
TAU_HBM = 45.0
TAU_VR = 15.0
TAU_EDGE = 40.0

PAGE_STATUS = {
    "reserved": w.AMDSMI_MEM_PAGE_STATUS_RESERVED,
    "pending": w.AMDSMI_MEM_PAGE_STATUS_PENDING,
    "unreservable": w.AMDSMI_MEM_PAGE_STATUS_UNRESERVABLE,
}


# ---------------------------------------------------------------------------------- value types
@dataclass
class SimProcess:
    """A process holding /dev/kfd and memory on one or more GPUs."""

    pid: int
    name: str
    vram: dict[int, int] = field(default_factory=dict)  # gpu index → bytes
    gfx_ns: dict[int, float] = field(default_factory=dict)  # gpu index → busy ns
    on_kill: list[Callable[[int], None]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class KilledProcess:
    """A process a hive reset tore down."""

    pid: int
    name: str
    gpus: tuple[int, ...]
    at: float


@dataclass(frozen=True, slots=True)
class ResetRecord:
    """One hive reset, as counted for tests ("exactly one reset")."""

    seq: int
    at: float
    hive_id: int
    initiator: int
    gpus: tuple[int, ...]
    killed_pids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SimEvent:
    """A KFD SMI event (raw C event value; message as the C parser keeps it)."""

    seq: int
    at: float
    gpu: int
    event: int
    message: str


@dataclass(frozen=True, slots=True)
class SimKernelLine:
    """One message the simulated driver (or the PCI core) printed to the kernel log."""

    seq: int
    at: float
    text: str


@dataclass(frozen=True, slots=True)
class BadPage:
    address: int
    size: int
    status: int


@dataclass(frozen=True, slots=True)
class CperEntry:
    """One CPER record in a GPU's ring (``seq`` is its absolute index, for cursors)."""

    seq: int
    at: float
    severity: int
    notify: int
    block: str
    count: int
    afid: int | None = None  # None: the class's AFID (raw.CPER_AFIDS)


CPER_RING = 1024
"""Records a GPU keeps; older ones are overwritten (cursors keep counting)."""
CES_PER_CPER = 100
"""A correctable-error storm writes one CPER record per this many errors."""
REPLAYS_PER_AER = 1000
"""A replay storm makes one (rate-limited) corrected AER report and CPER record per this many
replays."""
KERNEL_LOG_KEEP = 20_000
"""Kernel lines the node keeps (readers follow by sequence number)."""
THROTTLE_PPT = 0x1 << 16
"""The PPT bit of the THERMAL_THROTTLE event's bitmask (the thermal ones are 0x1-0x4)."""


@dataclass(frozen=True, slots=True)
class Throttle:
    """Which throttlers are active right now."""

    ppt: bool
    socket_thermal: bool
    hbm_thermal: bool
    vr_thermal: bool

    @property
    def thermal(self) -> bool:
        return self.socket_thermal or self.hbm_thermal or self.vr_thermal


# ---------------------------------------------------------------------------------- one GPU
class SimGpu:
    """One GPU's mutable state (raw units). Only SimNode changes it, under the node lock."""

    def __init__(self, spec: GpuSpec, ident: BoardIdentity, hive_id: int, seed: int) -> None:
        rng = random.Random(f"gpu:{spec.model}:{seed}:{ident.index}")
        self.spec = spec
        self.ident = ident
        self.index = ident.index
        self.hive_id = hive_id
        self.firmware = dict(spec.firmware)  # amdsmi_fw_block_t value → raw version
        self.load = 0.0
        self.power_w = spec.idle_power_w
        self.t_hotspot = spec.ambient_c + spec.hotspot_c_per_w * spec.idle_power_w
        self.t_hbm = spec.ambient_c + spec.hbm_c_per_w * spec.idle_power_w
        self.t_vr = spec.ambient_c + spec.vr_c_per_w * spec.idle_power_w
        self.t_edge = spec.ambient_c + 0.02 * spec.idle_power_w
        # counters that started before the simulation (the board has been up for a while)
        self.uptime_s = rng.uniform(3 * 86400, 40 * 86400)
        self.energy_j = self.uptime_s * spec.idle_power_w * rng.uniform(1.1, 1.6)
        self.acc_counter = self.uptime_s * ACC_HZ
        self.residency = {"ppt": 0.0, "socket": 0.0, "hbm": 0.0, "vr": 0.0, "prochot": 0.0}
        self.activity_acc = {"gfx": 0.0, "mem": 0.0}
        self.busy_acc = 0.0
        self.xgmi_read_kb = [0.0] * 8
        self.xgmi_write_kb = [0.0] * 8
        self.pcie_bw_acc = 0.0
        self.ecc = {name: [0.0, 0.0, 0.0] for name in ENABLED_BLOCKS}  # ce, ue, deferred
        self.pcie = {k: 0.0 for k in ("replay", "l0", "rollover", "nak_sent", "nak_rcvd", "other")}
        self.xgmi_error = w.AMDSMI_XGMI_STATUS_NO_ERRORS
        self.bad_pages: list[BadPage] = []
        self.cper: list[CperEntry] = []
        self.cper_total = 0
        self.page_rng = random.Random(f"pages:{spec.model}:{seed}:{ident.index}")
        self.throttle_events = 0
        self.unavailable_until = float("-inf")
        self.reset_counter = 0  # amdgpu's gpu_reset_counter: "GPU reset(N) succeeded!"

    @property
    def ecc_counts(self) -> dict[str, tuple[int, int, int]]:
        """Per enabled block: (correctable, uncorrectable, deferred) as integers."""
        return {b: (int(v[0]), int(v[1]), int(v[2])) for b, v in self.ecc.items()}


# ---------------------------------------------------------------------------------- the node
class SimNode:
    """An 8-GPU node forming one XGMI hive. Thread-safe; time comes from ``clock``."""

    def __init__(
        self,
        spec: GpuSpec,
        *,
        seed: int,
        clock: Clock,
        gpu_count: int = 8,
        root: bool = True,
        reset_unavailable_s: float = 0.0,
    ) -> None:
        if not 1 <= gpu_count <= 8:
            raise ValueError("a simulated node has 1 to 8 GPUs")
        self.spec = spec
        self.seed = seed
        self.clock = clock
        self.root = root
        self.library_version: tuple[int, int, int, str] = (26, 1, 0, "7.0.2")
        """What ``amdsmi_get_lib_version`` reports: the ROCm library installed on the node
        (26.1.x is ROCm 7.0; 7.13 ships 26.4.0). Set it to model a node with another ROCm."""
        """Whether the caller has root: without it resets fail NO_PERM, debugfs reads fail."""
        self.reset_unavailable_s = reset_unavailable_s
        """Model seconds after a reset during which the hive answers BUSY."""
        self.vram_read_opens_kfd = spec.gfx_target == 0x942
        """gfx942 (MI300X/MI325X) under a library before 26.3 (ROCm 7.12): reading VRAM usage
        falls back to opening /dev/kfd in the caller, which stays a KFD process for its life
        (ROCm/ROCm#4411; fixed in 7.12 by a fork-and-exit reader, ROCm/rocm-systems#2840).
        ``kfd_self_client`` applies it; reference: hardware-behaviour.md §1.3 #5."""
        self.xgmi_error_status_readable = spec.xgmi_error_status_readable
        """Whether amdsmi_gpu_xgmi_error_status answers (False on gfx942/gfx950: INVAL). Set
        it to model a DF 3.6 part (MI2xx) whose sysfs ``xgmi_error`` works."""
        self.reset_call_s = 0.0
        """How long ``amdsmi_reset_gpu`` blocks its caller. The reset itself happens at once,
        as amdgpu's recovery runs in the kernel: a caller killed during the call still leaves
        the hive reset (what a daemon restarted mid-reset must be able to find out)."""
        self.compute_partition = "SPX"
        self.memory_partition = "NPS1"
        """The node's partition modes (one for every GPU); ``set_partition_modes`` checks them."""
        self.partition_lost_on_reset = False
        """Whether a hive reset returns the GPUs to SPX/NPS1 (what a reboot or driver reload
        does; AMD's gpu-operator docs: the profile must be re-applied)."""
        self.partition_set_status = 0
        """The status amdsmi_set_gpu_{compute,memory}_partition answers (0: they work); set it
        to model a mode that will not re-apply."""
        self.hive_id = make_hive_id(spec, seed)
        self.gpus = [
            SimGpu(spec, ident, self.hive_id, seed)
            for ident in make_identities(spec, seed, gpu_count)
        ]
        self._peers = [
            tuple(g.index for g in self.gpus if g.index != gpu.index) for gpu in self.gpus
        ]
        self.lock = threading.RLock()
        self._now = clock.now()
        self._faults: list[Fault] = []
        self._fault_gen = 0
        """Bumped whenever the fault list changes: what the per-call lookups below cache on."""
        self._fault_cache: dict[tuple[object, ...], Any] = {}
        self._fault_cache_gen = 0
        self._next_fault_id = 1
        self._processes: dict[int, SimProcess] = {}
        self._kill_listeners: list[Callable[[KilledProcess], None]] = []
        self._killed: list[KilledProcess] = []
        self._events: list[SimEvent] = []
        self._event_seq = 0
        self._klog: list[SimKernelLine] = []
        self._klog_seq = 0
        self._ras_event_id = 0
        self._resets: list[ResetRecord] = []
        self._sysfs_root: Path | None = None
        self._vram_written: dict[int, int] = {}  # mem_info_vram_used last written, per GPU

    # ------------------------------------------------------------------ partitions
    def set_partition_modes(self, compute: str, memory: str) -> None:
        """Partition every GPU (ValueError for an invalid combination, e.g. SPX+NPS4)."""
        check_modes(compute, memory)
        with self.lock:
            self.compute_partition, self.memory_partition = compute, memory

    def partitions(self) -> list[Partition]:
        """The logical devices of the current modes (GPU-major, partition-minor)."""
        with self.lock:
            return layout([g.ident for g in self.gpus], self.compute_partition)

    # ------------------------------------------------------------------ time
    @property
    def now(self) -> float:
        """The model time the state was last advanced to."""
        return self._now

    def sync(self, now: float | None = None) -> float:
        """Advance every GPU to ``now`` (default: the clock's now); returns the model time.

        The model never goes back: a time earlier than the model's own is ignored.
        """
        with self.lock:
            target = self.clock.now() if now is None else now
            if target > self._now:
                for gpu in self.gpus:
                    self._advance(gpu, self._now, target)
                self._now = target
                self._sync_vram_files()
            return self._now

    def _sync_vram_files(self) -> None:
        """amdgpu's ``mem_info_vram_used`` in the fake sysfs tree, rewritten when it changes."""
        if self._sysfs_root is None:
            return
        for gpu in self.gpus:
            used = self.vram_used_bytes(gpu)
            path = self.pci_device_dir(gpu.index)
            if path is None or self._vram_written.get(gpu.index) == used or not path.is_dir():
                continue
            (path / "mem_info_vram_used").write_text(f"{used}\n")
            self._vram_written[gpu.index] = used

    def _advance(self, gpu: SimGpu, t0: float, t1: float) -> None:
        dt = t1 - t0
        spec = gpu.spec
        faults = self.active_faults(gpu.index)
        demand = self._demand(gpu, faults)
        p_target = min(demand, self._power_limit(gpu, faults))
        hot_t, hbm_t, vr_t, edge_t = self._temperature_targets(gpu, p_target, faults)
        # energy and power (first order, exact)
        gpu.energy_j += physics.relax_integral(gpu.power_w, p_target, TAU_POWER, dt)
        gpu.power_w = physics.relax(gpu.power_w, p_target, TAU_POWER, dt)
        # throttle residency: exact time spent above each limit
        crit_hot, crit_hbm = spec.hotspot_limits_c[0], spec.hbm_limits_c[0]
        gpu.residency["socket"] += (
            physics.time_above(gpu.t_hotspot, hot_t, TAU_HOTSPOT, dt, crit_hot) * ACC_HZ
        )
        gpu.residency["hbm"] += physics.time_above(gpu.t_hbm, hbm_t, TAU_HBM, dt, crit_hbm) * ACC_HZ
        gpu.residency["vr"] += (
            physics.time_above(gpu.t_vr, vr_t, TAU_VR, dt, spec.vr_throttle_c) * ACC_HZ
        )
        if demand >= 0.98 * spec.power_cap_w:
            gpu.residency["ppt"] += dt * ACC_HZ
        self._thermal_events(gpu, t0, dt, hot_t, hbm_t, vr_t)
        gpu.t_hotspot = physics.relax(gpu.t_hotspot, hot_t, TAU_HOTSPOT, dt)
        gpu.t_hbm = physics.relax(gpu.t_hbm, hbm_t, TAU_HBM, dt)
        gpu.t_vr = physics.relax(gpu.t_vr, vr_t, TAU_VR, dt)
        gpu.t_edge = physics.relax(gpu.t_edge, edge_t, TAU_EDGE, dt)
        # activity accumulators and traffic
        gpu.acc_counter += dt * ACC_HZ
        gpu.uptime_s += dt
        gpu.activity_acc["gfx"] += gpu.load * 100.0 * dt
        gpu.activity_acc["mem"] += gpu.load * 55.0 * dt
        gpu.busy_acc += gpu.load * 100.0 * dt * ACC_HZ
        width, speed = self.pcie_link(gpu.index)
        gpu.pcie_bw_acc += self.pcie_bandwidth_gbs(gpu, width, speed) * dt
        for link in range(len(self.gpus) - 1):
            if self.link_up(gpu.index, link):
                rate = spec.xgmi_link_kb_per_s * gpu.load
                gpu.xgmi_read_kb[link] += rate * dt
                gpu.xgmi_write_kb[link] += rate * 0.92 * dt
        for pid_proc in self._processes.values():
            if gpu.index in pid_proc.vram:
                pid_proc.gfx_ns[gpu.index] = (
                    pid_proc.gfx_ns.get(gpu.index, 0.0) + gpu.load * dt * 1e9
                )
        # faults with rates
        for fault in faults:
            params = fault.params
            if isinstance(params, EccCeStorm):
                before = gpu.ecc[params.block][0]
                gpu.ecc[params.block][0] += params.rate_per_s * dt
                first = int(before // CES_PER_CPER) + 1
                for k in range(first, int(gpu.ecc[params.block][0] // CES_PER_CPER) + 1):
                    at = t0 + (k * CES_PER_CPER - before) / params.rate_per_s
                    self._add_cper(
                        gpu,
                        w.AMDSMI_CPER_SEV_NON_FATAL_CORRECTED,
                        w.AMDSMI_CPER_NOTIFY_TYPE_CMC,
                        params.block,
                        CES_PER_CPER,
                        at,
                    )
                    self._ras_line(gpu, CES_PER_CPER, "correctable", params.block, at)
            elif isinstance(params, PcieReplayStorm):
                before = gpu.pcie["replay"]
                gpu.pcie["replay"] += params.rate_per_s * dt
                first = int(before // REPLAYS_PER_AER) + 1
                for k in range(first, int(gpu.pcie["replay"] // REPLAYS_PER_AER) + 1):
                    at = t0 + (k * REPLAYS_PER_AER - before) / params.rate_per_s
                    self._add_cper(
                        gpu,
                        w.AMDSMI_CPER_SEV_NON_FATAL_CORRECTED,
                        w.AMDSMI_CPER_NOTIFY_TYPE_PCIE,
                        "PCIE_BIF",
                        REPLAYS_PER_AER,
                        at,
                    )
                    self._kernel(
                        kl.aer_corrected(gpu.ident.bdf, self.root_port(gpu), "BadDLLP"), at
                    )
                gpu.pcie["rollover"] += params.rate_per_s * dt / 256.0
                gpu.pcie["l0"] += params.rate_per_s * dt / 40.0
                gpu.pcie["nak_sent"] += params.rate_per_s * dt / 8.0
                gpu.pcie["nak_rcvd"] += params.rate_per_s * dt / 10.0
                gpu.pcie["other"] += params.rate_per_s * dt / 120.0
            elif isinstance(params, BadPages):
                self._retire_pages(gpu, fault, params, dt)

    def _demand(self, gpu: SimGpu, faults: Iterable[Fault]) -> float:
        spec = gpu.spec
        demand = spec.idle_power_w + (0.92 * spec.power_cap_w - spec.idle_power_w) * gpu.load
        for fault in faults:
            if isinstance(fault.params, PowerExcursion):
                wanted = fault.params.demand_w or 1.12 * spec.power_cap_w
                demand = max(demand, wanted)
        return demand

    def power_limit_w(self, gpu: SimGpu) -> float:
        """The power the firmware holds this GPU to right now (its cap, unless it fails)."""
        return self._power_limit(gpu, self.active_faults(gpu.index))

    def _power_limit(self, gpu: SimGpu, faults: Iterable[Fault]) -> float:
        """The cap the firmware holds power to (above it only when it fails to)."""
        overshoot = max(
            (f.params.cap_overshoot for f in faults if isinstance(f.params, PowerExcursion)),
            default=0.0,
        )
        return float(gpu.spec.power_cap_w) * (1.0 + overshoot)

    def _temperature_targets(
        self, gpu: SimGpu, p_target: float, faults: Iterable[Fault]
    ) -> tuple[float, float, float, float]:
        spec = gpu.spec
        d_hot = d_hbm = d_vr = 0.0
        for fault in faults:
            if isinstance(fault.params, ThermalRunaway):
                d_hot += fault.params.delta_c
                d_hbm += fault.params.hbm_delta_c
                d_vr += fault.params.vr_delta_c
        base = spec.ambient_c
        return (
            base + spec.hotspot_c_per_w * p_target + d_hot,
            base + spec.hbm_c_per_w * p_target + d_hbm,
            base + spec.vr_c_per_w * p_target + d_vr,
            base + 0.02 * p_target + d_hot * 0.5,
        )

    def _thermal_events(
        self, gpu: SimGpu, t0: float, dt: float, hot_t: float, hbm_t: float, vr_t: float
    ) -> None:
        """One THERMAL_THROTTLE event each time a thermal throttler switches on."""
        spec = gpu.spec
        checks = (
            (gpu.t_hotspot, hot_t, TAU_HOTSPOT, spec.hotspot_limits_c[0], 0x1),
            (gpu.t_hbm, hbm_t, TAU_HBM, spec.hbm_limits_c[0], 0x2),
            (gpu.t_vr, vr_t, TAU_VR, spec.vr_throttle_c, 0x4),
        )
        for value, target, tau, limit, bit in checks:
            cross = physics.crossing_time(value, target, tau, limit)
            if cross is not None and cross <= dt:
                gpu.throttle_events += 1
                self._emit(
                    gpu.index,
                    w.AMDSMI_EVT_NOTIF_THERMAL_THROTTLE,
                    f"{bit:x}:{gpu.throttle_events:x}",
                    at=t0 + cross,
                )

    def _retire_pages(self, gpu: SimGpu, fault: Fault, params: BadPages, dt: float) -> None:
        limit = params.count if params.count is not None else gpu.spec.bad_page_threshold
        fault.progress += params.rate_per_s * dt
        while int(fault.progress) > 0 and len(gpu.bad_pages) < limit:
            fault.progress -= 1.0
            self._add_page(gpu, PAGE_STATUS[params.status])
        if len(gpu.bad_pages) >= limit:
            fault.progress = 0.0

    def _add_page(self, gpu: SimGpu, status: int) -> None:
        frames = (gpu.spec.vram_mb * 1024 * 1024) // PAGE_SIZE
        used = {p.address for p in gpu.bad_pages}
        while True:
            address = gpu.page_rng.randrange(frames) * PAGE_SIZE
            if address not in used:
                break
        gpu.bad_pages.append(BadPage(address, PAGE_SIZE, status))

    def _add_cper(
        self,
        gpu: SimGpu,
        severity: int,
        notify: int,
        block: str,
        count: int,
        at: float,
        afid: int | None = None,
    ) -> None:
        gpu.cper.append(CperEntry(gpu.cper_total, at, severity, notify, block, count, afid))
        gpu.cper_total += 1
        if len(gpu.cper) > CPER_RING:
            del gpu.cper[0]

    # ------------------------------------------------------------------ derived state
    def throttle_state(self, gpu: SimGpu) -> Throttle:
        """Which throttlers are active at the current model time."""
        spec = gpu.spec
        return Throttle(
            ppt=self._demand(gpu, self.active_faults(gpu.index)) >= 0.98 * spec.power_cap_w,
            socket_thermal=gpu.t_hotspot >= spec.hotspot_limits_c[0],
            hbm_thermal=gpu.t_hbm >= spec.hbm_limits_c[0],
            vr_thermal=gpu.t_vr >= spec.vr_throttle_c,
        )

    def gfx_clock_mhz(self, gpu: SimGpu) -> int:
        """Current gfx clock: idles low, rises with load, drops when throttling."""
        lo, hi = gpu.spec.gfx_clk_mhz
        busy = gpu.load >= 0.02
        clock = lo + (hi - lo) * (0.55 + 0.45 * gpu.load) if busy else 132.0  # deep sleep
        return round(clock * self.throttle_factor(gpu))

    def throttle_factor(self, gpu: SimGpu) -> float:
        """What the active throttlers leave of the clock (1.0: none), whatever the load."""
        factor = 1.0
        throttle = self.throttle_state(gpu)
        if throttle.thermal:
            factor *= 0.7
        if throttle.ppt:
            demand = self._demand(gpu, self.active_faults(gpu.index))
            factor *= max(0.6, gpu.spec.power_cap_w / demand)
        return factor

    def pcie_link(self, gpu_index: int) -> tuple[int, int]:
        """(width lanes, speed MT/s) of the host link right now."""
        spec = self.gpus[gpu_index].spec
        width, speed = spec.pcie_max_width, spec.pcie_max_speed_mts
        for fault in self.active_faults(gpu_index):
            if isinstance(fault.params, PcieDowngrade):
                width = min(width, fault.params.width)
                speed = min(speed, fault.params.speed_mts)
        return width, speed

    def pcie_bandwidth_gbs(self, gpu: SimGpu, width: int, speed: int) -> float:
        """Instantaneous host-link traffic, GB/s."""
        return 2.0 + 28.0 * gpu.load * (width / 16.0) * (speed / 32000.0)

    def peers(self, gpu_index: int) -> list[int]:
        """Other GPUs of the hive in link order: link k of GPU i goes to peers(i)[k]."""
        return list(self._peers[gpu_index])

    def _by_faults(self, key: tuple[object, ...], compute: Callable[[], T]) -> T:
        """``compute()`` once per state of the fault list (faults are the only input of the
        lookups that use this): a call costs a dict look-up, not a scan of every fault."""
        with self.lock:
            if self._fault_cache_gen != self._fault_gen:
                self._fault_cache = {}
                self._fault_cache_gen = self._fault_gen
            try:
                return self._fault_cache[key]  # type: ignore[no-any-return]
            except KeyError:
                value = self._fault_cache[key] = compute()
                return value

    def link_up(self, gpu_index: int, link: int) -> bool:
        """Whether XGMI link ``link`` of ``gpu_index`` is up (a link is down on both ends)."""
        return self._by_faults(("link", gpu_index, link), lambda: self._link_up(gpu_index, link))

    def _link_up(self, gpu_index: int, link: int) -> bool:
        peer = self.peers(gpu_index)[link]
        back = self.peers(peer).index(gpu_index)
        for fault in self.active_faults():
            if isinstance(fault.params, XgmiLinkDown) and (
                (fault.gpu == gpu_index and fault.params.link == link)
                or (fault.gpu == peer and fault.params.link == back)
            ):
                return False
        return True

    def xgmi_ports(self, gpu_index: int) -> list[bool | None]:
        """XGMI port states as the C library reports them: one entry per GPU of the node
        (``total_links`` = min(#sockets, 8), the port to itself included), port ``j`` wired
        to GPU ``j``. True up, False down, None unused. The port to itself carries no link
        and reads down (0 in gpu_metrics, "D"), as unused ports can on a healthy board
        (AMD's example prints ``U U U U D U D X``); hardware-behaviour.md §1.3 #6."""
        return list(self._by_faults(("ports", gpu_index), lambda: self._xgmi_ports(gpu_index)))

    def _xgmi_ports(self, gpu_index: int) -> tuple[bool | None, ...]:
        out: list[bool | None] = []
        peers = self.peers(gpu_index)
        for port in range(len(self.gpus)):
            if port == gpu_index:
                out.append(False)
            else:
                out.append(self.link_up(gpu_index, peers.index(port)))
        return tuple(out)

    def present(self, gpu_index: int) -> bool:
        """False while the GPU is off the bus."""
        return self._by_faults(
            ("present", gpu_index),
            lambda: not any(f.kind == "gpu_off_bus" for f in self.active_faults(gpu_index)),
        )

    # ------------------------------------------------------------------ fake sysfs
    def attach_sysfs(self, root: Path) -> Path:
        """Keep a fake sysfs tree under ``root``: ``sys/bus/pci/devices/<bdf>/`` (with a
        ``vendor`` file) for every GPU on the bus. A GPU that falls off the bus leaves it, as
        the kernel removes the PCI device; it comes back when the fault clears. Returns
        ``root``, the filesystem root fleetd's backend is given (``pci_root``)."""
        with self.lock:
            self._sysfs_root = root
            self._sync_sysfs()
        return root

    def pci_device_dir(self, gpu_index: int) -> Path | None:
        """The fake sysfs directory of GPU ``gpu_index`` (None without a fake tree)."""
        if self._sysfs_root is None:
            return None
        return self._sysfs_root / "sys/bus/pci/devices" / self.gpus[gpu_index].ident.bdf

    def _sync_sysfs(self) -> None:
        if self._sysfs_root is None:
            return
        for gpu in self.gpus:
            path = self.pci_device_dir(gpu.index)
            assert path is not None
            if self.present(gpu.index):
                path.mkdir(parents=True, exist_ok=True)
                (path / "vendor").write_text("0x1002\n")
                used = self.vram_used_bytes(gpu)
                (path / "mem_info_vram_used").write_text(f"{used}\n")
                self._vram_written[gpu.index] = used
            elif path.exists():
                shutil.rmtree(path)

    def vram_used_bytes(self, gpu: SimGpu) -> int:
        total = gpu.spec.vram_mb * 1024 * 1024
        used = BASE_VRAM_USED + int(0.01 * total * gpu.load)
        used += sum(p.vram.get(gpu.index, 0) for p in self._processes.values())
        return min(used, total)

    def unsupported_fields(self, gpu_index: int) -> dict[str, int | None]:
        """``<function>.<path>`` → sentinel to leave there (None = the C type's maximum)."""
        out = dict(default_unsupported_fields(self.spec))  # a copy: the default is cached
        for fault in self.active_faults(gpu_index):
            if isinstance(fault.params, UnsupportedFields):
                sentinel = 0xFFFF if fault.params.sentinel == "u16_max" else None
                for item in fault.params.fields:
                    out[item] = sentinel
        return out

    def field_masks(self, gpu_index: int, function: str) -> tuple[tuple[str, int | None], ...]:
        """``unsupported_fields`` of one function: (field path, sentinel) pairs, looked up
        once per state of the fault list."""

        def compute() -> tuple[tuple[str, int | None], ...]:
            out = []
            for path, sentinel in self.unsupported_fields(gpu_index).items():
                func, _, field_path = path.partition(".")
                if func == function:
                    out.append((field_path, sentinel))
            return tuple(out)

        return self._by_faults(("masks", gpu_index, function), compute)

    def call_status(self, gpu_index: int, call: str, args: Iterable[str] = ()) -> int:
        """The status a whole call returns for this GPU (0 when it works).

        ``args`` are the enum member names of the call's argument (all aliases), so a flag
        ``amdsmi_get_temp_metric:JUNCTION`` matches a HOTSPOT query too.
        """
        names = tuple(args)
        return self._by_faults(
            ("status", gpu_index, call, names), lambda: self._call_status(gpu_index, call, names)
        )

    def _call_status(self, gpu_index: int, call: str, args: tuple[str, ...]) -> int:
        keys = {call, *(f"{call}:{a}" for a in args)}
        for fault in self.active_faults(gpu_index):
            if isinstance(fault.params, UnsupportedFields) and keys & set(fault.params.calls):
                return fault.params.status_code()
        if keys & default_unsupported_calls(self.spec):
            return w.AMDSMI_STATUS_NOT_SUPPORTED
        return w.AMDSMI_STATUS_SUCCESS

    # ------------------------------------------------------------------ load
    def set_firmware(
        self, gpu: int | None, block: int, version: int, *, at: float | None = None
    ) -> None:
        """Flash one firmware block (an ``amdsmi_fw_block_t`` value) of one GPU, or of all
        when ``gpu`` is None, to the raw ``version`` (as ``amdsmi_get_fw_info`` holds it)."""
        if not 0 <= version < 1 << 64:
            raise ValueError("a firmware version is a uint64")
        with self.lock:
            self.sync(at)
            for g in self._select(gpu):
                g.firmware[block] = version

    def set_load(self, gpu: int | None, level: float, *, at: float | None = None) -> None:
        """Set the workload level (0..1) of one GPU, or of all when ``gpu`` is None.

        ``at`` (every mutator takes it) is the model time of the change, default the clock's
        now; scenario steps pass their own time so they land exactly when they are due.
        """
        if not 0.0 <= level <= 1.0:
            raise ValueError("load is a fraction between 0 and 1")
        with self.lock:
            self.sync(at)
            for g in self._select(gpu):
                g.load = level

    def _select(self, gpu: int | None) -> list[SimGpu]:
        if gpu is None:
            return list(self.gpus)
        if not 0 <= gpu < len(self.gpus):
            raise ValueError(f"no GPU {gpu} (the node has {len(self.gpus)})")
        return [self.gpus[gpu]]

    # ------------------------------------------------------------------ faults
    def inject(
        self,
        gpu: int,
        kind: str,
        *,
        persistent: bool | None = None,
        at: float | None = None,
        **params: Any,
    ) -> int:
        """Inject fault ``kind`` (see faults.FAULT_NAMES) on ``gpu``; returns its id.

        ``params`` are the fault's parameters (faults.FAULT_PARAMS[kind]); ``persistent``
        decides whether it comes back after every reset (default: transient).
        """
        parsed = parse_params(kind, params)
        with self.lock:
            now = self.sync(at)
            self._select(gpu)
            fault = Fault(
                id=self._next_fault_id,
                kind=kind,
                gpu=gpu,
                params=parsed,
                persistent=DEFAULT_PERSISTENT[kind] if persistent is None else persistent,
                injected_at=now,
            )
            self._next_fault_id += 1
            self._faults.append(fault)
            self._fault_gen += 1
            self._apply_once(fault)
            self._sync_sysfs()
            log.info("sim_fault_injected", fault=kind, gpu=gpu, fault_id=fault.id)
        if isinstance(parsed, RingTimeout) and parsed.driver_reset:
            self.reset_hive(gpu, at=now)  # amdgpu's own recovery: no caller, no drain
        return fault.id

    def _apply_once(self, fault: Fault) -> None:
        """The instantaneous part of a fault (errors that appear at once, sticky states), with
        the CPER records, KFD events and kernel lines the driver writes for it."""
        gpu = self.gpus[fault.gpu]
        params = fault.params
        now = self._now
        bdf = gpu.ident.bdf
        if isinstance(params, EccUncorrectable):
            gpu.ecc[params.block][1] += params.count
            if params.retire_page and params.block == "UMC":
                self._add_page(gpu, w.AMDSMI_MEM_PAGE_STATUS_PENDING)
            # Poison mode contains HBM (UMC) errors only: an uncorrectable error in any other
            # block (XGMI/WAFL, PCIe, the cores) reaches the fatal-error path.
            contained = params.block == "UMC" and not params.fatal
            severity = (
                w.AMDSMI_CPER_SEV_NON_FATAL_UNCORRECTED if contained else w.AMDSMI_CPER_SEV_FATAL
            )
            notify = w.AMDSMI_CPER_NOTIFY_TYPE_MCE
            self._add_cper(gpu, severity, notify, params.block, params.count, now, params.afid)
            if not contained:
                self._ras_event_id += 1
                self._kernel([kl.ras_fatal(bdf, self._ras_event_id)], now)
            self._ras_line(gpu, params.count, "uncorrectable", params.block, now)
        elif isinstance(params, EccDeferred):
            gpu.ecc[params.block][2] += params.count
            self._add_cper(
                gpu,
                w.AMDSMI_CPER_SEV_NON_FATAL_UNCORRECTED,
                w.AMDSMI_CPER_NOTIFY_TYPE_MCE,
                params.block,
                params.count,
                now,
            )
            self._kernel([kl.poison_created(bdf)], now)
            self._ras_line(gpu, params.count, "deferred", params.block, now)
        elif isinstance(params, XgmiLinkDown):
            peer = self.gpus[self.peers(fault.gpu)[params.link]]
            for g in (gpu, peer):
                # what gfx942/gfx950 report: RAS errors of the XGMI_WAFL block (the
                # xgmi_error status below is unreadable there, ROCm/rocm-systems#11468)
                g.ecc["XGMI_WAFL"][0] += params.wafl_ce
                g.ecc["XGMI_WAFL"][1] += params.wafl_ue
                g.xgmi_error = (
                    w.AMDSMI_XGMI_STATUS_ERROR
                    if g.xgmi_error == w.AMDSMI_XGMI_STATUS_NO_ERRORS
                    else w.AMDSMI_XGMI_STATUS_MULTIPLE_ERRORS
                )
                if params.wafl_ce:
                    self._add_cper(
                        g,
                        w.AMDSMI_CPER_SEV_NON_FATAL_CORRECTED,
                        w.AMDSMI_CPER_NOTIFY_TYPE_CMC,
                        "XGMI_WAFL",
                        params.wafl_ce,
                        now,
                    )
                    self._ras_line(g, params.wafl_ce, "correctable", "XGMI_WAFL", now)
                if params.wafl_ue:
                    self._add_cper(
                        g,
                        w.AMDSMI_CPER_SEV_FATAL,
                        w.AMDSMI_CPER_NOTIFY_TYPE_MCE,
                        "XGMI_WAFL",
                        params.wafl_ue,
                        now,
                    )
                    self._ras_line(g, params.wafl_ue, "uncorrectable", "XGMI_WAFL", now)
        elif isinstance(params, PowerExcursion):
            # the SMU reports the PPT throttler switching on like a thermal one (KFD event)
            gpu.throttle_events += 1
            message = f"{THROTTLE_PPT:x}:{gpu.throttle_events:x}"
            self._emit(gpu.index, w.AMDSMI_EVT_NOTIF_THERMAL_THROTTLE, message, at=now)
        elif isinstance(params, RingTimeout):
            seq = 1000 + 2 * self._klog_seq
            lines = kl.ring_timeout(bdf, params.ring, seq, seq + 2, params.process, params.pid)
            self._kernel(lines, now)
        elif isinstance(params, VmFault):
            self._emit(
                gpu.index, w.AMDSMI_EVT_NOTIF_VMFAULT, f"{params.pid:x}:{params.process}", at=now
            )
            self._kernel(
                kl.page_fault(
                    bdf, "gfxhub", 8, 0x8000 + gpu.index, params.process, params.pid, params.address
                ),
                now,
            )

    # ------------------------------------------------------------------ kernel log
    def _kernel(self, texts: Iterable[str], at: float) -> None:
        for text in texts:
            self._klog_seq += 1
            self._klog.append(SimKernelLine(self._klog_seq, at, text))
        if len(self._klog) > KERNEL_LOG_KEEP:
            del self._klog[: len(self._klog) - KERNEL_LOG_KEEP]

    def _ras_line(self, gpu: SimGpu, count: int, kind: str, block: str, at: float) -> None:
        self._ras_event_id += 1
        self._kernel([kl.ras_count(gpu.ident.bdf, self._ras_event_id, count, kind, block)], at)

    def root_port(self, gpu: SimGpu) -> str:
        """The PCIe root port above the GPU (its bus's bridge: bus - 1, device 1)."""
        domain, bus, _rest = gpu.ident.bdf.split(":")
        return f"{domain}:{max(int(bus, 16) - 1, 0):02x}:01.0"

    # ------------------------------------------------------------------ single reports
    def add_cper_record(
        self,
        gpu: int,
        *,
        fatal: bool = True,
        block: str = "MP1",
        afid: int | None = None,
        at: float | None = None,
    ) -> None:
        """One CPER record and nothing else (no counter moves): what the driver writes for a
        fault only its firmware saw (a device-internal error, the bad-page threshold)."""
        with self.lock:
            now = self.sync(at)
            severity = w.AMDSMI_CPER_SEV_FATAL if fatal else w.AMDSMI_CPER_SEV_NON_FATAL_UNCORRECTED
            notify = w.AMDSMI_CPER_NOTIFY_TYPE_MCE
            self._add_cper(self._select(gpu)[0], severity, notify, block, 1, now, afid)

    def print_ras_line(
        self, gpu: int, *, kind: str = "uncorrectable", block: str = "UMC", at: float | None = None
    ) -> None:
        """One RAS report in the kernel log and nothing else (bench and tests of the kernel
        path alone)."""
        with self.lock:
            now = self.sync(at)
            self._ras_line(self._select(gpu)[0], 1, kind, block, now)

    def emit_event(self, gpu: int, event: int, message: str, *, at: float | None = None) -> None:
        """One KFD SMI event and nothing else (bench and tests of the event path alone)."""
        with self.lock:
            now = self.sync(at)
            self._select(gpu)
            self._emit(gpu, event, message, at=now)

    def kernel_lines_after(self, seq: int) -> list[SimKernelLine]:
        """Kernel lines with a sequence number above ``seq`` that were printed by now."""
        with self.lock:
            now = self._now
            return [line for line in self._klog if line.seq > seq and line.at <= now]

    @property
    def last_kernel_seq(self) -> int:
        with self.lock:
            return self._klog_seq

    def clear(self, fault_id: int, *, at: float | None = None) -> bool:
        """Clear one fault by id; False if it was not active."""
        with self.lock:
            self.sync(at)
            for fault in self._faults:
                if fault.id == fault_id:
                    self._drop(fault)
                    return True
            return False

    def clear_faults(
        self, gpu: int | None = None, kind: str | None = None, *, at: float | None = None
    ) -> int:
        """Clear every active fault matching ``gpu``/``kind``; returns how many."""
        with self.lock:
            self.sync(at)
            doomed = [
                f
                for f in self._faults
                if (gpu is None or f.gpu == gpu) and (kind is None or f.kind == kind)
            ]
            for fault in doomed:
                self._drop(fault)
            return len(doomed)

    def _drop(self, fault: Fault) -> None:
        self._faults.remove(fault)
        self._fault_gen += 1
        fault.release.set()
        self._sync_sysfs()
        log.info("sim_fault_cleared", fault=fault.kind, gpu=fault.gpu, fault_id=fault.id)

    def active_faults(self, gpu: int | None = None) -> list[Fault]:
        """Faults currently in effect (on one GPU, or on all)."""
        return [f for f in self._faults if gpu is None or f.gpu == gpu]

    def hang_for(self, gpu_index: int, function: str) -> Fault | None:
        """The hung-call fault that blocks ``function`` on this GPU, if any."""
        if not self._faults:
            return None
        with self.lock:
            for fault in self._faults:
                if (
                    fault.gpu == gpu_index
                    and isinstance(fault.params, HungCall)
                    and fault.params.function == function
                ):
                    return fault
            return None

    def release_hangs(self, gpu: int | None = None) -> int:
        """Let every blocked call (on one GPU or all) return now; the fault stays active
        but no longer blocks. Returns how many hangs were released."""
        with self.lock:
            count = 0
            for fault in self._faults:
                if isinstance(fault.params, HungCall) and (gpu is None or fault.gpu == gpu):
                    fault.release.set()
                    count += 1
            return count

    # ------------------------------------------------------------------ processes
    def add_process(
        self,
        gpu: int,
        pid: int,
        name: str,
        vram_bytes: int,
        on_kill: Callable[[int], None] | None = None,
        *,
        at: float | None = None,
    ) -> None:
        """Register a KFD process using ``vram_bytes`` on ``gpu`` (call again for more GPUs).

        ``on_kill(pid)`` runs when a hive reset kills the process.
        """
        if vram_bytes < 0:
            raise ValueError("vram_bytes cannot be negative")
        with self.lock:
            self.sync(at)
            self._select(gpu)
            proc = self._processes.setdefault(pid, SimProcess(pid, name))
            proc.vram[gpu] = vram_bytes
            proc.gfx_ns.setdefault(gpu, 0.0)
            if on_kill is not None and on_kill not in proc.on_kill:
                proc.on_kill.append(on_kill)

    def add_kfd_client(self, pid: int, name: str, *, at: float | None = None) -> None:
        """A process that holds /dev/kfd with no memory on any GPU (a monitoring agent, or
        the library's own caller after a VRAM fallback): listed as a compute process, on no
        GPU's process list, and spared by a reset here (it holds nothing of the hive)."""
        with self.lock:
            self.sync(at)
            self._processes.setdefault(pid, SimProcess(pid, name))

    def kfd_self_client(self, pid: int, name: str) -> None:
        """The caller read VRAM usage: on a node with the fallback it becomes a KFD client."""
        if self.vram_read_opens_kfd and self.library_version[:2] < (26, 3):
            with self.lock:
                self._processes.setdefault(pid, SimProcess(pid, name))

    def remove_process(self, pid: int, *, at: float | None = None) -> bool:
        """Forget a process (it exited); False if unknown."""
        with self.lock:
            self.sync(at)
            return self._processes.pop(pid, None) is not None

    def processes(self, gpu: int | None = None) -> list[SimProcess]:
        """Processes on one GPU (or all), by pid."""
        with self.lock:
            return sorted(
                (p for p in self._processes.values() if gpu is None or gpu in p.vram),
                key=lambda p: p.pid,
            )

    def add_kill_listener(self, listener: Callable[[KilledProcess], None]) -> None:
        """Be told about every process a reset kills (e.g. a stand-in vLLM worker)."""
        with self.lock:
            self._kill_listeners.append(listener)

    @property
    def killed(self) -> list[KilledProcess]:
        with self.lock:
            return list(self._killed)

    # ------------------------------------------------------------------ reset
    def reset_hive(self, gpu: int, *, at: float | None = None) -> ResetRecord:
        """What amdsmi_reset_gpu does: reset the WHOLE hive ``gpu`` belongs to.

        Every KFD process on the hive is killed (kill callbacks run after the state change),
        ECC/PCIe counters and XGMI error status go to zero, pending bad pages become reserved,
        transient faults clear and persistent ones are applied afresh, loads drop to 0 (the
        workloads died), and GPU_PRE_RESET/GPU_POST_RESET events go to every member.
        """
        with self.lock:
            now = self.sync(at)
            hive_id = self._select(gpu)[0].hive_id
            members = [g for g in self.gpus if g.hive_id == hive_id]
            indices = tuple(g.index for g in members)
            seq = len(self._resets) + 1
            for g in members:
                if self.present(g.index):
                    self._emit(g.index, w.AMDSMI_EVT_NOTIF_GPU_PRE_RESET, f"{seq:x}", at=now)
            initiator = self.gpus[gpu].ident.bdf
            self._kernel([kl.reset_begin(initiator), kl.reset_method(initiator)], now)
            doomed = [p for p in self._processes.values() if set(p.vram) & set(indices)]
            killed = [KilledProcess(p.pid, p.name, tuple(sorted(p.vram)), now) for p in doomed]
            for p in doomed:
                del self._processes[p.pid]
            self._killed.extend(killed)
            for fault in [f for f in self._faults if f.gpu in indices and not f.persistent]:
                self._drop(fault)
            for g in members:
                g.ecc = {name: [0.0, 0.0, 0.0] for name in ENABLED_BLOCKS}
                g.pcie = dict.fromkeys(g.pcie, 0.0)
                g.xgmi_error = w.AMDSMI_XGMI_STATUS_NO_ERRORS
                g.bad_pages = [
                    BadPage(p.address, p.size, w.AMDSMI_MEM_PAGE_STATUS_RESERVED)
                    if p.status == w.AMDSMI_MEM_PAGE_STATUS_PENDING
                    else p
                    for p in g.bad_pages
                ]
                g.load = 0.0
                g.unavailable_until = now + self.reset_unavailable_s
            for fault in [f for f in self._faults if f.gpu in indices]:
                self._apply_once(fault)
            if self.partition_lost_on_reset:
                self.compute_partition, self.memory_partition = "SPX", "NPS1"
            done = now + self.reset_unavailable_s
            for g in members:
                if not self.present(g.index):
                    continue
                g.reset_counter += 1
                broken = [
                    f.params
                    for f in self.active_faults(g.index)
                    if isinstance(f.params, FirmwareFailure)
                ]
                bdf = g.ident.bdf
                if broken:  # the block does not come back: no post-reset event
                    for params in broken:
                        self._kernel(kl.firmware_failure(bdf, params.block, params.firmware), done)
                    self._kernel([kl.reset_failed(bdf, g.reset_counter)], done)
                    continue
                self._kernel(
                    [kl.reset_resuming(bdf), kl.reset_succeeded(bdf, g.reset_counter)], done
                )
                self._emit(g.index, w.AMDSMI_EVT_NOTIF_GPU_POST_RESET, f"{seq:x}", at=done)
            record = ResetRecord(seq, now, hive_id, gpu, indices, tuple(k.pid for k in killed))
            self._resets.append(record)
            callbacks = [(cb, k) for k in killed for cb in self._kill_callbacks(doomed, k)]
            listeners = list(self._kill_listeners)
        log.info("sim_hive_reset", hive_id=hive_id, gpu=gpu, killed=len(killed), seq=seq)
        for callback, victim in callbacks:
            callback(victim.pid)
        for victim in killed:
            for listener in listeners:
                listener(victim)
        if self.reset_call_s > 0:
            self.clock.sleep(self.reset_call_s)  # the call returns once recovery is over
        return record

    @staticmethod
    def _kill_callbacks(doomed: list[SimProcess], victim: KilledProcess) -> list[Any]:
        return [cb for p in doomed if p.pid == victim.pid for cb in p.on_kill]

    @property
    def resets(self) -> list[ResetRecord]:
        with self.lock:
            return list(self._resets)

    def reset_count(self, hive_id: int | None = None) -> int:
        """How many hive resets happened (on ``hive_id``, or on any hive)."""
        with self.lock:
            return sum(1 for r in self._resets if hive_id is None or r.hive_id == hive_id)

    # ------------------------------------------------------------------ events
    def _emit(self, gpu: int, event: int, message: str, *, at: float) -> None:
        self._event_seq += 1
        self._events.append(SimEvent(self._event_seq, at, gpu, event, message))

    def events_after(self, seq: int) -> list[SimEvent]:
        """Events with a sequence number above ``seq`` that have happened by now."""
        with self.lock:
            now = self._now
            return [e for e in self._events if e.seq > seq and e.at <= now]

    @property
    def last_event_seq(self) -> int:
        with self.lock:
            return self._event_seq


@functools.cache
def default_unsupported_fields(spec: GpuSpec) -> dict[str, int | None]:
    """Fields the MI3xx driver leaves empty (gpu_metrics v1.7/1.8 have no such entries)."""
    metrics = "amdsmi_get_gpu_metrics_info"
    out: dict[str, int | None] = {
        f"{metrics}.{name}": None
        for name in (
            "temperature_edge",
            "temperature_vrgfx",
            "temperature_vrmem",
            "average_mm_activity",
            "average_socket_power",
            "average_gfxclk_frequency",
            "average_socclk_frequency",
            "average_uclk_frequency",
            "average_vclk0_frequency",
            "average_dclk0_frequency",
            "average_vclk1_frequency",
            "average_dclk1_frequency",
            "current_gfxclk",
            "current_socclk",
            "current_vclk0",
            "current_dclk0",
            "current_vclk1",
            "current_dclk1",
            "current_fan_speed",
            "temperature_hbm",
            "voltage_soc",
            "voltage_gfx",
            "voltage_mem",
            "indep_throttle_status",
        )
    }
    # the power and activity calls copy u16 gpu_metrics fields: 0xFFFF → the wrapper's "N/A"
    for name in ("average_socket_power", "gfx_voltage", "soc_voltage", "mem_voltage"):
        out[f"amdsmi_get_power_info.{name}"] = 0xFFFF
    out["amdsmi_get_gpu_activity.mm_activity"] = 0xFFFF
    if spec.metrics_content_revision < 8:
        for name in (
            "gfx_below_host_limit_ppt_acc",
            "gfx_below_host_limit_thm_acc",
            "gfx_low_utilization_acc",
            "gfx_below_host_limit_total_acc",
        ):
            out[f"{metrics}.xcp_stats.{name}"] = None
        for name in (
            "acc_gfx_clk_below_host_limit_pwr",
            "acc_gfx_clk_below_host_limit_thm",
            "acc_low_utilization",
            "acc_gfx_clk_below_host_limit_total",
            "per_gfx_clk_below_host_limit_pwr",
            "per_gfx_clk_below_host_limit_thm",
            "per_low_utilization",
            "per_gfx_clk_below_host_limit_total",
            "active_gfx_clk_below_host_limit_pwr",
            "active_gfx_clk_below_host_limit_thm",
            "active_low_utilization",
            "active_gfx_clk_below_host_limit_total",
        ):
            out[f"amdsmi_get_violation_status.{name}"] = None
    return out


@functools.cache
def default_unsupported_calls(spec: GpuSpec) -> frozenset[str]:
    """Calls (with an enum argument) the MI3xx driver answers NOT_SUPPORTED."""
    temp = "amdsmi_get_temp_metric"
    out = {f"{temp}:HBM_{i}" for i in range(4)}
    if not spec.has_edge_sensor:
        out.add(f"{temp}:EDGE")
    for clk in ("DCEF", "PCIE", "VCLK1", "DCLK1"):
        out.add(f"amdsmi_get_clock_info:{clk}")
    return frozenset(out)


def build_node(
    model: str = "MI355X",
    *,
    seed: int = 0,
    clock: Clock,
    gpu_count: int = 8,
    root: bool = True,
    reset_unavailable_s: float = 0.0,
    compute_partition: str = "SPX",
    memory_partition: str = "NPS1",
) -> SimNode:
    """A simulated 8-GPU node of ``model`` ("MI355X" or "MI300X"), idle and fault-free, in
    the given partition modes (ValueError for an invalid combination)."""
    try:
        spec = SPECS[model]
    except KeyError:
        raise ValueError(f"unknown GPU model {model!r}; known: {', '.join(SPECS)}") from None
    node = SimNode(
        spec,
        seed=seed,
        clock=clock,
        gpu_count=gpu_count,
        root=root,
        reset_unavailable_s=reset_unavailable_s,
    )
    node.set_partition_modes(compute_partition, memory_partition)
    return node
