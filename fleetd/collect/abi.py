"""Does the amdsmi Python package match the libamd_smi.so it drives?

The package binds whatever library the loader finds, and its ctypes structures are sized for
the library it was built with: a mismatch does not fail, it misreads or corrupts memory
(shared/reference/hardware-behaviour.md §2.3, sizes probed against AMD's shipped headers):

* the PyPI wheel 7.0.2 over ROCm 7.1/7.2's library (26.2.x) reads XGMI per-link records of
  48 bytes as 56: every link after the first is garbage;
* over ROCm 7.12's (26.3.x) the library writes 8 bytes past the wheel's ASIC-info buffer;
* over ROCm 7.13/7.14's (26.4.x, 26.5.x) it writes 176 bytes past the gpu_metrics buffer on
  every poll (and 4 past enumeration info): heap corruption inside the daemon;
* ROCm 10.0's library (27.x) removed a symbol the wheel binds, so the import itself fails.

So a known-unsafe pair is refused at start (one line, exit 2, ``backend.allow_unsafe_library``
overrides), an unknown one is a warning, and only the pair fleetd's CI runs is *validated*.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from fleetd.model import Reading, make_labels

AbiVerdict = Literal["validated", "unvalidated", "unsafe"]

LIBRARY_OF_ROCM: dict[tuple[int, int], tuple[int, int]] = {
    (7, 0): (26, 1),
    (7, 1): (26, 2),
    (7, 2): (26, 2),
    (7, 12): (26, 3),
    (7, 13): (26, 4),
    (7, 14): (26, 5),
    (10, 0): (27, 0),
}
"""The libamd_smi.so version each ROCm release ships (amdsmi.h of each release)."""

_LAYOUT: dict[tuple[int, int], str] = {
    (26, 1): "7.0",
    (26, 2): "7.1",  # link_metrics per-link record 56 → 48 bytes
    (26, 3): "7.12",  # asic_info +8 bytes, link records back to 56
    (26, 4): "7.13",  # gpu_metrics +176 bytes, enumeration_info +4
    (26, 5): "7.13",
    (27, 0): "10.0",  # the SONAME and the symbol set change
}
"""Libraries whose structures have the same sizes share a layout."""

_HARM: dict[str, str] = {
    "7.1": "XGMI per-link counters after the first link are read from the wrong offsets",
    "7.12": "the library writes 8 bytes past the package's ASIC-info buffer",
    "7.13": "the library writes 176 bytes past the gpu_metrics buffer on every poll",
    "10.0": "the library lacks symbols the package binds",
    "7.0": "the library's structures are smaller than the package expects",
}

VALIDATED: frozenset[tuple[tuple[int, int], tuple[int, int]]] = frozenset({((7, 0), (26, 1))})
"""(package ROCm release, library version) pairs fleetd's CI runs: the PyPI wheel 7.0.2 over
ROCm 7.0's library (tests/libemu drives the real wheel over an emulated 26.1 library)."""

INSTALL_HINT = (
    "use the amdsmi Python package of the node's ROCm (e.g. "
    "`pip install $ROCM_PATH/share/amd_smi`), not the PyPI wheel, unless ROCm is 7.0.x"
)


@dataclass(frozen=True, slots=True)
class AbiCheck:
    """The pair found and what it means."""

    verdict: AbiVerdict
    package: str | None  # amdsmi.__version__, e.g. "7.0.2"
    library: str | None  # amdsmi_get_lib_version(), e.g. "26.1.0"
    message: str


def parse_release(text: str | None) -> tuple[int, int] | None:
    """``"7.0.2"`` → (7, 0); anything else → None."""
    match = re.match(r"^\s*(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_pair(package: str | None, library: tuple[int, int, int] | None) -> AbiCheck:
    """The verdict on a package version and a library version (either may be unknown)."""
    lib_text = ".".join(str(p) for p in library) if library is not None else None
    release = parse_release(package)
    if release is None or library is None:
        what = "package" if release is None else "library"
        return AbiCheck(
            "unvalidated",
            package,
            lib_text,
            f"cannot read the amdsmi {what} version (package {package or '?'}, library "
            f"{lib_text or '?'}); their structures may not match",
        )
    lib = (library[0], library[1])
    pair = f"amdsmi package {package} over libamd_smi {lib_text}"
    if (release, lib) in VALIDATED:
        return AbiCheck("validated", package, lib_text, f"{pair}: validated")
    expected = LIBRARY_OF_ROCM.get(release)
    wanted = _LAYOUT.get(expected) if expected is not None else None
    found = _LAYOUT.get(lib)
    if expected is not None and wanted is not None and found is not None and wanted != found:
        harm = _HARM[found]
        return AbiCheck(
            "unsafe",
            package,
            lib_text,
            f"{pair} is unsafe: the package is built for libamd_smi "
            f"{expected[0]}.{expected[1]} (ROCm {release[0]}.{release[1]}) and {harm}; "
            f"{INSTALL_HINT}",
        )
    return AbiCheck(
        "unvalidated",
        package,
        lib_text,
        f"{pair}: not a pair fleetd has validated (validated: 7.0.x over 26.1.x)",
    )


def amdsmi_info(check: AbiCheck, now: float) -> Reading:
    """``fleetd_amdsmi_info``: which amdsmi package drives which library, and the verdict."""
    labels = {"package": check.package or "", "library": check.library or ""}
    return Reading(
        "fleetd_amdsmi_info", make_labels({**labels, "verdict": check.verdict}), 1.0, now
    )
