"""Static facts about the simulated GPU models and the identities of the GPUs in a node.

Numbers come from ../shared/reference/amdsmi.md §17 (CUs, HBM, TBP, links) and are kept in
the C library's raw units: MB of VRAM, MHz, MT/s, µW power caps, °C limits. Identities
(BDFs, UUIDs, serials, KFD/DRM/HIP ids, hive id) are derived from the seed so a node built
twice with the same seed is the same node.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from fleetd.sim import wrapper as w

BDF_BUSES: tuple[int, ...] = (0x05, 0x26, 0x46, 0x65, 0x85, 0xA6, 0xC6, 0xE5)
"""PCI bus numbers of the eight OAM slots, in GPU index order (domain 0, device 0, fn 0)."""


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model, in raw library units."""

    model: str
    market_name: str
    gfx_target: int  # 0x942 → "gfx942"
    device_id: int
    subsystem_id: int
    rev_id: int
    num_cu: int
    num_xcc: int
    vram_type: int  # raw amdsmi_vram_type_t value (5 = HBM3E, not in the 7.0.2 enum)
    vram_vendor: str
    vram_mb: int
    vram_bit_width: int
    vram_max_bandwidth_gbs: int
    power_cap_w: int
    min_power_cap_w: int
    idle_power_w: float
    has_edge_sensor: bool
    gfx_clk_mhz: tuple[int, int]  # (min, max)
    mem_clk_mhz: int
    soc_clk_mhz: tuple[int, int]
    fclk_mhz: tuple[int, int]
    vclk_mhz: tuple[int, int]
    dclk_mhz: tuple[int, int]
    hotspot_limits_c: tuple[int, int]  # (critical = throttle, emergency = shutdown)
    hbm_limits_c: tuple[int, int]
    edge_limits_c: tuple[int, int]
    vr_throttle_c: int
    ambient_c: float
    hotspot_c_per_w: float
    hbm_c_per_w: float
    vr_c_per_w: float
    xgmi_lanes: int
    xgmi_bit_rate_gbps: int
    xgmi_max_bandwidth_gbps: int
    xgmi_link_kb_per_s: float  # traffic per link at full load
    pcie_max_width: int
    pcie_max_speed_mts: int
    pcie_gen: int
    metrics_content_revision: int  # gpu_metrics v1.x: 7 on MI300X, 8 on MI355X
    metrics_structure_size: int
    bad_page_threshold: int
    vbios_name: str
    vbios_part_number: str
    vbios_version: str
    vbios_build_date: str
    board_model_number: str
    board_product_name: str
    driver_version: str
    xgmi_error_status_readable: bool = False
    """Whether sysfs ``xgmi_error`` answers. amdgpu's reader needs the DF FICA hooks, which
    DF 4.x (gfx942 MI300X/MI325X, gfx950 MI350X/MI355X) lacks: the read fails EINVAL, which
    rocm_smi maps to INVALID_ARGS and amdsmi to AMDSMI_STATUS_INVAL (ROCm/rocm-systems#11468;
    rocm-smi-lib ``ErrnoToRsmiStatus``). True only for DF 3.6 parts (MI2xx), not modelled."""
    firmware: tuple[tuple[int, int], ...] = ()
    """``amdsmi_get_fw_info``: (amdsmi_fw_block_t value, raw uint64 version) per block, in the
    library's order. Raw as the C struct holds them: the Python wrapper formats PSP_SOSDRV,
    TA_RAS, TA_XGMI, UVD, VCE, VCN as dotted hex bytes and PM, PLDM_BUNDLE as dotted decimal
    bytes. The blocks are those ``amd-smi firmware`` lists on MI300-class boards; the numbers
    are plausible, not copied from a board."""


MI355X = GpuSpec(
    model="MI355X",
    market_name="AMD Instinct MI355X",
    gfx_target=0x950,
    device_id=0x75A3,
    subsystem_id=0x75A3,
    rev_id=0x00,
    num_cu=256,
    num_xcc=8,
    vram_type=5,
    vram_vendor="SAMSUNG",
    vram_mb=288 * 1024,
    vram_bit_width=8192,
    vram_max_bandwidth_gbs=8000,
    power_cap_w=1400,
    min_power_cap_w=500,
    idle_power_w=190.0,
    has_edge_sensor=True,
    gfx_clk_mhz=(500, 2400),
    mem_clk_mhz=2000,
    soc_clk_mhz=(28, 1143),
    fclk_mhz=(1200, 2000),
    vclk_mhz=(914, 1333),
    dclk_mhz=(711, 1143),
    hotspot_limits_c=(110, 115),
    hbm_limits_c=(100, 105),
    edge_limits_c=(100, 105),
    vr_throttle_c=115,
    ambient_c=32.0,
    hotspot_c_per_w=0.043,
    hbm_c_per_w=0.030,
    vr_c_per_w=0.040,
    xgmi_lanes=16,
    xgmi_bit_rate_gbps=38,
    xgmi_max_bandwidth_gbps=1229,
    xgmi_link_kb_per_s=60_000_000.0,
    pcie_max_width=16,
    pcie_max_speed_mts=32000,
    pcie_gen=5,
    metrics_content_revision=8,
    metrics_structure_size=2504,
    bad_page_threshold=612,
    vbios_name="AMD MI355X_HW_SRIOV_CVS_1VF",
    vbios_part_number="113-M3550100-100",
    vbios_version="022.050.000.011.000001",
    vbios_build_date="2025/05/14 09:31",
    board_model_number="102-G42002-0A",
    board_product_name="AMD Instinct MI355X OAM",
    driver_version="6.14.14",
    firmware=(
        (3, 40),  # CP_PFP
        (4, 40),  # CP_ME
        (7, 30),  # CP_MEC1
        (9, 15),  # RLC
        (10, 17),  # SDMA0
        (18, 0x0110001D),  # VCN → 01.10.00.1D
        (30, 0x00400143),  # PSP_SOSDRV → 00.40.01.43
        (73, 0x1B400017),  # TA_RAS → 1B.40.00.17
        (74, 0x20000017),  # TA_XGMI → 20.00.00.17
        (77, 0x00556400),  # PM → 00.85.100.00
    ),
)

MI300X = replace(  # the same platform (OAM, XGMI, PCIe, clocks) but for these
    MI355X,
    model="MI300X",
    market_name="AMD Instinct MI300X",
    gfx_target=0x942,
    device_id=0x74A1,
    subsystem_id=0x74A1,
    num_cu=304,
    vram_type=w.AMDSMI_VRAM_TYPE_HBM3,
    vram_vendor="HYNIX",
    vram_mb=192 * 1024,
    vram_max_bandwidth_gbs=5300,
    power_cap_w=750,
    min_power_cap_w=200,
    idle_power_w=140.0,
    has_edge_sensor=False,
    gfx_clk_mhz=(500, 2100),
    mem_clk_mhz=1300,
    hotspot_limits_c=(105, 110),
    hbm_limits_c=(95, 100),
    ambient_c=30.0,
    hotspot_c_per_w=0.070,
    hbm_c_per_w=0.050,
    vr_c_per_w=0.065,
    xgmi_bit_rate_gbps=32,
    xgmi_max_bandwidth_gbps=1024,
    xgmi_link_kb_per_s=50_000_000.0,
    metrics_content_revision=7,
    metrics_structure_size=1784,
    bad_page_threshold=408,
    vbios_name="AMD MI300X_HW_SRIOV_CVS_1VF",
    vbios_part_number="113-M3000100-102",
    vbios_version="022.040.003.043.000001",
    vbios_build_date="2024/03/26 16:14",
    board_model_number="102-G30211-0C",
    board_product_name="AMD Instinct MI300X OAM",
    firmware=(
        (3, 24),  # CP_PFP
        (4, 24),  # CP_ME
        (7, 177),  # CP_MEC1
        (9, 90),  # RLC
        (10, 21),  # SDMA0
        (18, 0x0110101B),  # VCN → 01.10.10.1B
        (30, 0x00360259),  # PSP_SOSDRV → 00.36.02.59
        (73, 0x1B360214),  # TA_RAS → 1B.36.02.14
        (74, 0x20000014),  # TA_XGMI → 20.00.00.14
        (77, 0x00557200),  # PM → 00.85.114.00
    ),
)

SPECS: dict[str, GpuSpec] = {"MI355X": MI355X, "MI300X": MI300X}


@dataclass(frozen=True, slots=True)
class BoardIdentity:
    """Everything that names one GPU, as the library would report it (raw)."""

    index: int
    handle: int  # the pointer value behind the processor handle
    domain: int
    bus: int
    device: int
    function: int
    uuid: str
    asic_serial: str  # 16 hex digits, as the C library hands it to Python
    product_serial: str
    fru_id: str
    oam_id: int
    kfd_id: int
    node_id: int
    drm_render: int
    drm_card: int
    hip_id: int
    hip_uuid: str
    xgmi_node_id: int

    @property
    def bdf(self) -> str:
        """``dddd:bb:dd.f`` in lower-case hex, as amdsmi formats it."""
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}.{self.function:x}"


def make_identities(spec: GpuSpec, seed: int, count: int = 8) -> list[BoardIdentity]:
    """Deterministic, realistic identities for ``count`` GPUs of ``spec``."""
    rng = random.Random(f"identity:{spec.model}:{seed}")
    handle_base = 0x5555_0000_0000 + (rng.getrandbits(20) << 12)
    serial_base = rng.randrange(692_000_000_000, 699_000_000_000)
    out: list[BoardIdentity] = []
    for i in range(count):
        asic = rng.getrandbits(64) | (1 << 63)
        uid = rng.getrandbits(48)
        out.append(
            BoardIdentity(
                index=i,
                handle=handle_base + (i + 1) * 0x2B0,
                domain=0,
                bus=BDF_BUSES[i % len(BDF_BUSES)],
                device=0,
                function=0,
                uuid=(
                    f"{rng.getrandbits(8):02x}ff{spec.device_id:04x}-0000-1000-80"
                    f"{rng.getrandbits(8):02x}-{uid:012x}"
                ),
                asic_serial=f"{asic:016X}",
                product_serial=str(serial_base + 7 * i),
                fru_id=f"FRU{spec.model}{i:02d}",
                oam_id=i,
                kfd_id=rng.randrange(1000, 65000),
                node_id=i + 2,
                drm_render=128 + i,
                drm_card=1 + i,
                hip_id=i,
                hip_uuid=f"GPU-{asic:016x}",
                xgmi_node_id=rng.getrandbits(63) | 1,
            )
        )
    return out


def make_hive_id(spec: GpuSpec, seed: int) -> int:
    """A non-zero 64-bit XGMI hive id shared by every GPU of the node."""
    return random.Random(f"hive:{spec.model}:{seed}").getrandbits(63) | 1
