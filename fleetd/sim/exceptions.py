"""Exception classes that behave like ``amdsmi.amdsmi_exception`` in 7.0.2.

Same class names, bases, constructor arguments, attributes and ``str()`` text, so a backend
that catches ``AmdSmiRetryException`` / ``AmdSmiTimeoutException`` before
``AmdSmiLibraryException`` and reads ``get_error_code()`` behaves the same on the simulator.
The message table is the status → text mapping the real package prints (checked against the
real source by the conformance test).
"""

from __future__ import annotations

from fleetd.sim import wrapper as w

_UNKNOWN = "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred"

ERROR_TEXT: dict[int, str] = {
    w.AMDSMI_STATUS_INVAL: "AMDSMI_STATUS_INVAL - Invalid parameters",
    w.AMDSMI_STATUS_NOT_SUPPORTED: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
    w.AMDSMI_STATUS_NOT_YET_IMPLEMENTED: (
        "AMDSMI_STATUS_NOT_YET_IMPLEMENTED - Feature not yet implemented"
    ),
    w.AMDSMI_STATUS_FAIL_LOAD_MODULE: "AMDSMI_STATUS_FAIL_LOAD_MODULE - Fail to load lib",
    w.AMDSMI_STATUS_FAIL_LOAD_SYMBOL: "AMDSMI_STATUS_FAIL_LOAD_SYMBOL - Fail to load symbol",
    w.AMDSMI_STATUS_DRM_ERROR: "AMDSMI_STATUS_DRM_ERROR - Error when called libdrm",
    w.AMDSMI_STATUS_API_FAILED: "AMDSMI_STATUS_API_FAILED - API call failed",
    w.AMDSMI_STATUS_TIMEOUT: "AMDSMI_STATUS_TIMEOUT - Timeout in API call",
    w.AMDSMI_STATUS_RETRY: "AMDSMI_STATUS_RETRY - Retry operation",
    w.AMDSMI_STATUS_NO_PERM: "AMDSMI_STATUS_NO_PERM - Permission Denied",
    w.AMDSMI_STATUS_INTERRUPT: "AMDSMI_STATUS_INTERRUPT - Interrupt ocurred during execution",
    w.AMDSMI_STATUS_IO: "AMDSMI_STATUS_IO - I/O Error",
    w.AMDSMI_STATUS_ADDRESS_FAULT: "AMDSMI_STATUS_ADDRESS_FAULT - Bad address",
    w.AMDSMI_STATUS_FILE_ERROR: "AMDSMI_STATUS_FILE_ERROR - Error opening file",
    w.AMDSMI_STATUS_OUT_OF_RESOURCES: "AMDSMI_STATUS_OUT_OF_RESOURCES - Not enough memory",
    w.AMDSMI_STATUS_INTERNAL_EXCEPTION: "AMDSMI_STATUS_INTERNAL_EXCEPTION -  Internal error",
    w.AMDSMI_STATUS_INPUT_OUT_OF_BOUNDS: "AMDSMI_STATUS_INPUT_OUT_OF_BOUNDS - Out of bounds",
    w.AMDSMI_STATUS_INIT_ERROR: "AMDSMI_STATUS_INIT_ERROR - Initialization error",
    w.AMDSMI_STATUS_REFCOUNT_OVERFLOW: (
        "AMDSMI_STATUS_REFCOUNT_OVERFLOW - Internal reference counter exceeded INT32_MAX"
    ),
    w.AMDSMI_STATUS_DIRECTORY_NOT_FOUND: (
        "AMDSMI_STATUS_DIRECTORY_NOT_FOUND - Error when a directory is not found, maps to ENOTDIR"
    ),
    w.AMDSMI_STATUS_BUSY: "AMDSMI_STATUS_BUSY - Device busy",
    w.AMDSMI_STATUS_NOT_FOUND: "AMDSMI_STATUS_NOT_FOUND - Device Not found",
    w.AMDSMI_STATUS_NOT_INIT: "AMDSMI_STATUS_NOT_INIT - Device not initialized",
    w.AMDSMI_STATUS_NO_SLOT: "AMDSMI_STATUS_NO_SLOT - No more free slot",
    w.AMDSMI_STATUS_DRIVER_NOT_LOADED: "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded",
    w.AMDSMI_STATUS_NO_DATA: "AMDSMI_STATUS_NO_DATA - No data was found for given input",
    w.AMDSMI_STATUS_INSUFFICIENT_SIZE: (
        "AMDSMI_STATUS_INSUFFICIENT_SIZE - Insufficient size for operation"
    ),
    w.AMDSMI_STATUS_UNEXPECTED_SIZE: (
        "AMDSMI_STATUS_UNEXPECTED_SIZE - unexpected size of data was read"
    ),
    w.AMDSMI_STATUS_UNEXPECTED_DATA: (
        "AMDSMI_STATUS_UNEXPECTED_DATA - The data read or provided was unexpected"
    ),
    w.AMDSMI_STATUS_NON_AMD_CPU: "AMDSMI_STATUS_NON_AMD_CPU - System has non-AMD CPU",
    w.AMDSMI_STATUS_NO_ENERGY_DRV: "AMD_SMI_NO_ENERGY_DRV - Energy driver not found",
    w.AMDSMI_STATUS_NO_MSR_DRV: "AMDSMI_STATUS_NO_MSR_DRV - MSR driver not found",
    w.AMDSMI_STATUS_NO_HSMP_DRV: "AMD_SMI_NO_HSMP_DRV - HSMP driver not found",
    w.AMDSMI_STATUS_NO_HSMP_SUP: "AMD_SMI_NO_HSMP_SUP - HSMP not supported",
    w.AMDSMI_STATUS_NO_HSMP_MSG_SUP: (
        "AMD_SMI_NO_HSMP_MSG_SUP - HSMP message/feature not supported"
    ),
    w.AMDSMI_STATUS_HSMP_TIMEOUT: "AMD_SMI_HSMP_TIMEOUT - HSMP message timeout",
    w.AMDSMI_STATUS_NO_DRV: "AMDSMI_STATUS_NO_DRV - No Energy and HSMP driver present",
    w.AMDSMI_STATUS_FILE_NOT_FOUND: "AMDSMI_STATUS_FILE_NOT_FOUND - File or directory not found",
    w.AMDSMI_STATUS_ARG_PTR_NULL: "AMDSMI_STATUS_ARG_PTR_NULL - Parsed argument is invalid",
    w.AMDSMI_STATUS_MAP_ERROR: (
        "AMDSMI_STATUS_MAP_ERROR - The internal library error did not map to a status code"
    ),
    w.AMDSMI_STATUS_AMDGPU_RESTART_ERR: (
        "AMDSMI_STATUS_AMDGPU_RESTART_ERR - AMDGPU restart failed, please check dmsg for errors"
    ),
    w.AMDSMI_STATUS_SETTING_UNAVAILABLE: (
        "AMDSMI_STATUS_SETTING_UNAVAILABLE - Setting is not available"
    ),
    w.AMDSMI_STATUS_CORRUPTED_EEPROM: "AMDSMI_STATUS_CORRUPTED_EEPROM - Setting is not available",
    w.AMDSMI_STATUS_UNKNOWN_ERROR: _UNKNOWN,
}
"""Status code → the text the real package attaches (codes missing here print as unknown)."""


class AmdSmiException(Exception):
    """Base smi exception class"""


class AmdSmiLibraryException(AmdSmiException):
    """A non-zero status from the C library."""

    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.set_err_info()

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_info(self, detailed: bool = True) -> str:
        if detailed:
            return self.err_info
        return str(self.err_info).split(" - ")[0]

    def get_error_code(self) -> int:
        return self.err_code

    def set_err_info(self) -> None:
        self.err_info = ERROR_TEXT.get(self.err_code, _UNKNOWN)


class AmdSmiRetryException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(w.AMDSMI_STATUS_RETRY)


class AmdSmiTimeoutException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(w.AMDSMI_STATUS_TIMEOUT)


class AmdSmiParameterException(AmdSmiException):
    """A Python-side argument type check failed (``err_code`` is None)."""

    def __init__(self, receivedValue: object, expectedType: object, msg: str | None = None) -> None:
        super().__init__(msg)
        self.err_code = None
        self.actualType = type(receivedValue)
        self.expectedType = expectedType
        self.set_err_msg()
        if msg is not None:
            self.err_msg = msg

    def set_err_msg(self) -> None:
        self.err_msg = (
            "Invalid parameter:\n"
            f"Actual type: {self.actualType}\n"
            f"Expected type: {self.expectedType}"
        )

    def __str__(self) -> str:
        return self.err_msg


class AmdSmiKeyException(AmdSmiException):
    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key
        self.set_err_msg()

    def set_err_msg(self) -> None:
        self.err_msg = "Key " + self.key + " is missing from dictionary"

    def __str__(self) -> str:
        return self.err_msg


class AmdSmiBdfFormatException(AmdSmiException):
    def __init__(self, bdf: object) -> None:
        super().__init__()
        self.bdf = bdf

    def __str__(self) -> str:
        return (
            f"Wrong BDF format: {self.bdf}. \n"
            "BDF string should be: <domain>:<bus>:<device>.<function>\n"
            " or <bus>:<device>.<function> in hexcode format.\n"
            "Where:\n\t<domain> is 4 hex digits long from 0000-FFFF interval\n"
            "\t<bus> is 2 hex digits long from 00-FF interval\n"
            "\t<device> is 2 hex digits long from 00-1F interval\n"
            "\t<function> is 1 hex digit long from 0-7 interval"
        )


def check_status(status: int) -> None:
    """Raise what the real package's result check raises for ``status`` (nothing for 0)."""
    if status == w.AMDSMI_STATUS_RETRY:
        raise AmdSmiRetryException()
    if status == w.AMDSMI_STATUS_TIMEOUT:
        raise AmdSmiTimeoutException()
    if status != w.AMDSMI_STATUS_SUCCESS:
        raise AmdSmiLibraryException(status)


EXCEPTION_CLASSES: tuple[type[Exception], ...] = (
    AmdSmiException,
    AmdSmiLibraryException,
    AmdSmiRetryException,
    AmdSmiTimeoutException,
    AmdSmiParameterException,
    AmdSmiKeyException,
    AmdSmiBdfFormatException,
)
