"""What the ``amdsmi`` module offers besides its functions — the wrapper and exception
modules, the enum classes and the exception classes — with the real package's names and values,
shared by every stand-in for the module (the simulator's face and the replay)."""

from __future__ import annotations

from fleetd.sim import enums, wrapper
from fleetd.sim import exceptions as exc


class AmdSmiModuleSurface:
    """The module-level names a caller of ``amdsmi`` reads (``amdsmi.AmdSmiGpuBlock.UMC``,
    ``except amdsmi.AmdSmiLibraryException``); a stand-in adds the functions."""

    amdsmi_wrapper = wrapper
    amdsmi_exception = exc

    MaxUIntegerTypes = enums.MaxUIntegerTypes
    AmdSmiInitFlags = enums.AmdSmiInitFlags
    AmdSmiProcessorType = enums.AmdSmiProcessorType
    AmdSmiClkType = enums.AmdSmiClkType
    AmdSmiTemperatureType = enums.AmdSmiTemperatureType
    AmdSmiTemperatureMetric = enums.AmdSmiTemperatureMetric
    AmdSmiMemoryType = enums.AmdSmiMemoryType
    AmdSmiGpuBlock = enums.AmdSmiGpuBlock
    AmdSmiRasErrState = enums.AmdSmiRasErrState
    AmdSmiXgmiStatus = enums.AmdSmiXgmiStatus
    AmdSmiMemoryPageStatus = enums.AmdSmiMemoryPageStatus
    AmdSmiLinkType = enums.AmdSmiLinkType
    AmdSmiEvtNotificationType = enums.AmdSmiEvtNotificationType
    AmdSmiVramType = enums.AmdSmiVramType
    AmdSmiVirtualizationMode = enums.AmdSmiVirtualizationMode
    AmdSmiComputePartitionType = enums.AmdSmiComputePartitionType
    AmdSmiMemoryPartitionType = enums.AmdSmiMemoryPartitionType
    AmdSmiCperNotifyType = enums.AmdSmiCperNotifyType
    AmdSmiFwBlock = enums.AmdSmiFwBlock

    AmdSmiException = exc.AmdSmiException
    AmdSmiLibraryException = exc.AmdSmiLibraryException
    AmdSmiRetryException = exc.AmdSmiRetryException
    AmdSmiTimeoutException = exc.AmdSmiTimeoutException
    AmdSmiParameterException = exc.AmdSmiParameterException
    AmdSmiKeyException = exc.AmdSmiKeyException
    AmdSmiBdfFormatException = exc.AmdSmiBdfFormatException
