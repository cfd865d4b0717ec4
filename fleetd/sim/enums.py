"""The amdsmi 7.0.2 enum classes the simulator offers, with the real names, members and values.

They are IntEnum subclasses like the real ones, so callers can compare, ``int()`` and take
``.name`` the same way; aliases behave the same too (``AmdSmiTemperatureType.JUNCTION`` is
``HOTSPOT``, ``AmdSmiClkType.GFX.name`` is ``"SYS"``, ``AmdSmiEvtNotificationType.PAGE_FAULT_START``
is 8 — the real wrapper's copy/paste bug). The face type-checks enum arguments against these
classes, so a plain int raises AmdSmiParameterException exactly as the real package does.
Only members that exist in the real enum are offered (the conformance test checks it).
"""

from __future__ import annotations

from enum import Enum, IntEnum

from fleetd.sim import wrapper as w


class MaxUIntegerTypes(IntEnum):
    UINT8_T = 0xFF
    UINT16_T = 0xFFFF
    UINT32_T = 0xFFFFFFFF
    UINT64_T = 0xFFFFFFFFFFFFFFFF


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2
    INIT_AMD_APUS = 3
    INIT_NON_AMD_CPUS = 4
    INIT_NON_AMD_GPUS = 8


class AmdSmiProcessorType(IntEnum):
    UNKNOWN = 0
    AMDSMI_PROCESSOR_TYPE_AMD_GPU = 1
    AMDSMI_PROCESSOR_TYPE_AMD_CPU = 2
    AMDSMI_PROCESSOR_TYPE_NON_AMD_GPU = 3
    AMDSMI_PROCESSOR_TYPE_NON_AMD_CPU = 4


class AmdSmiClkType(IntEnum):
    SYS = 0
    GFX = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4
    PCIE = 5
    VCLK0 = 6
    VCLK1 = 7
    DCLK0 = 8
    DCLK1 = 9


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2
    HBM_0 = 3
    HBM_1 = 4
    HBM_2 = 5
    HBM_3 = 6
    PLX = 7
    GPUBOARD_NODE_RETIMER_X = 100
    GPUBOARD_NODE_OAM_X_IBC = 101
    GPUBOARD_NODE_OAM_X_IBC_2 = 102
    GPUBOARD_NODE_OAM_X_VDD18_VR = 103
    GPUBOARD_NODE_OAM_X_04_HBM_B_VR = 104
    GPUBOARD_NODE_OAM_X_04_HBM_D_VR = 105
    GPUBOARD_NODE_LAST = 149
    GPUBOARD_VDDCR_VDD0 = 150
    GPUBOARD_VDDCR_VDD1 = 151
    GPUBOARD_VDDCR_VDD2 = 152
    GPUBOARD_VDDCR_VDD3 = 153
    GPUBOARD_VDDCR_SOC_A = 154
    GPUBOARD_VDDCR_SOC_C = 155
    GPUBOARD_VDDCR_SOCIO_A = 156
    GPUBOARD_VDDCR_SOCIO_C = 157
    GPUBOARD_VDD_085_HBM = 158
    GPUBOARD_VDDCR_11_HBM_B = 159
    GPUBOARD_VDDCR_11_HBM_D = 160
    GPUBOARD_VDD_USR = 161
    GPUBOARD_VDDIO_11_E32 = 162
    GPUBOARD_VR_LAST = 199
    BASEBOARD_UBB_FPGA = 200
    BASEBOARD_UBB_FRONT = 201
    BASEBOARD_UBB_BACK = 202
    BASEBOARD_UBB_OAM7 = 203
    BASEBOARD_UBB_IBC = 204
    BASEBOARD_UBB_UFPGA = 205
    BASEBOARD_UBB_OAM1 = 206
    BASEBOARD_OAM_0_1_HSC = 207
    BASEBOARD_OAM_2_3_HSC = 208
    BASEBOARD_OAM_4_5_HSC = 209
    BASEBOARD_OAM_6_7_HSC = 210
    BASEBOARD_UBB_FPGA_0V72_VR = 211
    BASEBOARD_UBB_FPGA_3V3_VR = 212
    BASEBOARD_RETIMER_0_1_2_3_1V2_VR = 213
    BASEBOARD_RETIMER_4_5_6_7_1V2_VR = 214
    BASEBOARD_RETIMER_0_1_0V9_VR = 215
    BASEBOARD_RETIMER_4_5_0V9_VR = 216
    BASEBOARD_RETIMER_2_3_0V9_VR = 217
    BASEBOARD_RETIMER_6_7_0V9_VR = 218
    BASEBOARD_OAM_0_1_2_3_3V3_VR = 219
    BASEBOARD_OAM_4_5_6_7_3V3_VR = 220
    BASEBOARD_IBC_HSC = 221
    BASEBOARD_IBC = 222
    BASEBOARD_LAST = 249
    BASEBOARD__MAX = 249


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1
    MIN = 2
    MAX_HYST = 3
    MIN_HYST = 4
    CRITICAL = 5
    CRITICAL_HYST = 6
    EMERGENCY = 7
    EMERGENCY_HYST = 8
    CRIT_MIN = 9
    CRIT_MIN_HYST = 10
    OFFSET = 11
    LOWEST = 12
    HIGHEST = 13


class AmdSmiMemoryType(IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


class AmdSmiGpuBlock(IntEnum):
    INVALID = 0
    UMC = 1
    SDMA = 2
    GFX = 4
    MMHUB = 8
    ATHUB = 16
    PCIE_BIF = 32
    HDP = 64
    XGMI_WAFL = 128
    DF = 256
    SMN = 512
    SEM = 1024
    MP0 = 2048
    MP1 = 4096
    FUSE = 8192
    MCA = 16384
    VCN = 32768
    JPEG = 65536
    IH = 131072
    MPIO = 262144
    RESERVED = 1 << 63


class AmdSmiRasErrState(IntEnum):
    NONE = 0
    DISABLED = 1
    PARITY = 2
    SING_C = 3
    MULT_UC = 4
    POISON = 5
    ENABLED = 6
    INVALID = 0xFFFFFFFF


class AmdSmiXgmiStatus(IntEnum):
    NO_ERRORS = 0
    ERROR = 1
    MULTIPLE_ERRORS = 2


class AmdSmiMemoryPageStatus(IntEnum):
    RESERVED = 0
    PENDING = 1
    UNRESERVABLE = 2


class AmdSmiLinkType(IntEnum):
    AMDSMI_LINK_TYPE_INTERNAL = 0
    AMDSMI_LINK_TYPE_XGMI = 2
    AMDSMI_LINK_TYPE_PCIE = 1
    AMDSMI_LINK_TYPE_NOT_APPLICABLE = 3
    AMDSMI_LINK_TYPE_UNKNOWN = 4


class AmdSmiEvtNotificationType(IntEnum):
    NONE = 0
    VMFAULT = 1
    THERMAL_THROTTLE = 2
    GPU_PRE_RESET = 3
    GPU_POST_RESET = 4
    MIGRATE_START = 5
    MIGRATE_END = 6
    PAGE_FAULT_START = 8
    PAGE_FAULT_END = 8
    QUEUE_EVICTION = 9
    QUEUE_RESTORE = 10
    UNMAP_FROM_GPU = 11
    PROCESS_START = 12
    PROCESS_END = 13


class AmdSmiCperNotifyType(Enum):
    """A plain Enum in the real package too (values are the notify GUIDs' first 8 bytes)."""

    CMC = w.AMDSMI_CPER_NOTIFY_TYPE_CMC
    CPE = w.AMDSMI_CPER_NOTIFY_TYPE_CPE
    MCE = w.AMDSMI_CPER_NOTIFY_TYPE_MCE
    PCIE = w.AMDSMI_CPER_NOTIFY_TYPE_PCIE
    INIT = w.AMDSMI_CPER_NOTIFY_TYPE_INIT
    NMI = w.AMDSMI_CPER_NOTIFY_TYPE_NMI
    BOOT = w.AMDSMI_CPER_NOTIFY_TYPE_BOOT
    DMAr = w.AMDSMI_CPER_NOTIFY_TYPE_DMAR
    SEA = w.AMDSMI_CPER_NOTIFY_TYPE_SEA
    SEI = w.AMDSMI_CPER_NOTIFY_TYPE_SEI
    PEI = w.AMDSMI_CPER_NOTIFY_TYPE_PEI
    CXL_COMPONENT = w.AMDSMI_CPER_NOTIFY_TYPE_CXL_COMPONENT


class AmdSmiVramType(IntEnum):
    UNKNOWN = 0
    HBM = 1
    HBM2 = 2
    HBM2E = 3
    HBM3 = 4
    DDR2 = 10
    DDR3 = 11
    DDR4 = 12
    GDDR1 = 17
    GDDR2 = 18
    GDDR3 = 19
    GDDR4 = 20
    GDDR5 = 21
    GDDR6 = 22
    GDDR7 = 23
    MAX = 23


class AmdSmiVirtualizationMode(IntEnum):
    UNKNOWN = 0
    BAREMETAL = 1
    HOST = 2
    GUEST = 3
    PASSTHROUGH = 4


class AmdSmiComputePartitionType(IntEnum):
    SPX = w.AMDSMI_COMPUTE_PARTITION_SPX
    DPX = w.AMDSMI_COMPUTE_PARTITION_DPX
    TPX = w.AMDSMI_COMPUTE_PARTITION_TPX
    QPX = w.AMDSMI_COMPUTE_PARTITION_QPX
    CPX = w.AMDSMI_COMPUTE_PARTITION_CPX
    INVALID = w.AMDSMI_COMPUTE_PARTITION_INVALID


class AmdSmiMemoryPartitionType(IntEnum):
    NPS1 = w.AMDSMI_MEMORY_PARTITION_NPS1
    NPS2 = w.AMDSMI_MEMORY_PARTITION_NPS2
    NPS4 = w.AMDSMI_MEMORY_PARTITION_NPS4
    NPS8 = w.AMDSMI_MEMORY_PARTITION_NPS8
    UNKNOWN = w.AMDSMI_MEMORY_PARTITION_UNKNOWN


# amdsmi_fw_block_t (amdsmi_get_fw_info's fw_name), every member with its C value
class AmdSmiFwBlock(IntEnum):
    AMDSMI_FW_ID_SMU = 1
    AMDSMI_FW_ID_CP_CE = 2
    AMDSMI_FW_ID_CP_PFP = 3
    AMDSMI_FW_ID_CP_ME = 4
    AMDSMI_FW_ID_CP_MEC_JT1 = 5
    AMDSMI_FW_ID_CP_MEC_JT2 = 6
    AMDSMI_FW_ID_CP_MEC1 = 7
    AMDSMI_FW_ID_CP_MEC2 = 8
    AMDSMI_FW_ID_RLC = 9
    AMDSMI_FW_ID_SDMA0 = 10
    AMDSMI_FW_ID_SDMA1 = 11
    AMDSMI_FW_ID_SDMA2 = 12
    AMDSMI_FW_ID_SDMA3 = 13
    AMDSMI_FW_ID_SDMA4 = 14
    AMDSMI_FW_ID_SDMA5 = 15
    AMDSMI_FW_ID_SDMA6 = 16
    AMDSMI_FW_ID_SDMA7 = 17
    AMDSMI_FW_ID_VCN = 18
    AMDSMI_FW_ID_UVD = 19
    AMDSMI_FW_ID_VCE = 20
    AMDSMI_FW_ID_ISP = 21
    AMDSMI_FW_ID_DMCU_ERAM = 22
    AMDSMI_FW_ID_DMCU_ISR = 23
    AMDSMI_FW_ID_RLC_RESTORE_LIST_GPM_MEM = 24
    AMDSMI_FW_ID_RLC_RESTORE_LIST_SRM_MEM = 25
    AMDSMI_FW_ID_RLC_RESTORE_LIST_CNTL = 26
    AMDSMI_FW_ID_RLC_V = 27
    AMDSMI_FW_ID_MMSCH = 28
    AMDSMI_FW_ID_PSP_SYSDRV = 29
    AMDSMI_FW_ID_PSP_SOSDRV = 30
    AMDSMI_FW_ID_PSP_TOC = 31
    AMDSMI_FW_ID_PSP_KEYDB = 32
    AMDSMI_FW_ID_DFC = 33
    AMDSMI_FW_ID_PSP_SPL = 34
    AMDSMI_FW_ID_DRV_CAP = 35
    AMDSMI_FW_ID_MC = 36
    AMDSMI_FW_ID_PSP_BL = 37
    AMDSMI_FW_ID_CP_PM4 = 38
    AMDSMI_FW_ID_RLC_P = 39
    AMDSMI_FW_ID_SEC_POLICY_STAGE2 = 40
    AMDSMI_FW_ID_REG_ACCESS_WHITELIST = 41
    AMDSMI_FW_ID_IMU_DRAM = 42
    AMDSMI_FW_ID_IMU_IRAM = 43
    AMDSMI_FW_ID_SDMA_TH0 = 44
    AMDSMI_FW_ID_SDMA_TH1 = 45
    AMDSMI_FW_ID_CP_MES = 46
    AMDSMI_FW_ID_MES_STACK = 48
    AMDSMI_FW_ID_MES_THREAD1 = 49
    AMDSMI_FW_ID_MES_THREAD1_STACK = 50
    AMDSMI_FW_ID_RLX6 = 51
    AMDSMI_FW_ID_RLX6_DRAM_BOOT = 52
    AMDSMI_FW_ID_RS64_ME = 53
    AMDSMI_FW_ID_RS64_ME_P0_DATA = 54
    AMDSMI_FW_ID_RS64_ME_P1_DATA = 55
    AMDSMI_FW_ID_RS64_PFP = 56
    AMDSMI_FW_ID_RS64_PFP_P0_DATA = 57
    AMDSMI_FW_ID_RS64_PFP_P1_DATA = 58
    AMDSMI_FW_ID_RS64_MEC = 59
    AMDSMI_FW_ID_RS64_MEC_P0_DATA = 60
    AMDSMI_FW_ID_RS64_MEC_P1_DATA = 61
    AMDSMI_FW_ID_RS64_MEC_P2_DATA = 62
    AMDSMI_FW_ID_RS64_MEC_P3_DATA = 63
    AMDSMI_FW_ID_PPTABLE = 64
    AMDSMI_FW_ID_PSP_SOC = 65
    AMDSMI_FW_ID_PSP_DBG = 66
    AMDSMI_FW_ID_PSP_INTF = 67
    AMDSMI_FW_ID_RLX6_CORE1 = 68
    AMDSMI_FW_ID_RLX6_DRAM_BOOT_CORE1 = 69
    AMDSMI_FW_ID_RLCV_LX7 = 70
    AMDSMI_FW_ID_RLC_SAVE_RESTORE_LIST = 71
    AMDSMI_FW_ID_ASD = 72
    AMDSMI_FW_ID_TA_RAS = 73
    AMDSMI_FW_ID_TA_XGMI = 74
    AMDSMI_FW_ID_RLC_SRLG = 75
    AMDSMI_FW_ID_RLC_SRLS = 76
    AMDSMI_FW_ID_PM = 77
    AMDSMI_FW_ID_DMCU = 78
    AMDSMI_FW_ID_PLDM_BUNDLE = 79


ENUM_CLASSES: tuple[type[Enum], ...] = (
    MaxUIntegerTypes,
    AmdSmiInitFlags,
    AmdSmiProcessorType,
    AmdSmiClkType,
    AmdSmiTemperatureType,
    AmdSmiTemperatureMetric,
    AmdSmiMemoryType,
    AmdSmiGpuBlock,
    AmdSmiRasErrState,
    AmdSmiXgmiStatus,
    AmdSmiMemoryPageStatus,
    AmdSmiLinkType,
    AmdSmiEvtNotificationType,
    AmdSmiVramType,
    AmdSmiVirtualizationMode,
    AmdSmiCperNotifyType,
    AmdSmiComputePartitionType,
    AmdSmiMemoryPartitionType,
    AmdSmiFwBlock,
)
"""Every enum class the face offers (the conformance test walks this tuple)."""
