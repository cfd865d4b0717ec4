"""fleetd.sim.libemu — the REAL amdsmi package over an emulated libamd_smi.so, driven by a SimNode.

With no AMD GPU in CI, the Python stand-in (``SimulatedAmdSmi``) can only be as faithful as
its author. This package removes that doubt: it builds a C library exporting every symbol
the installed amdsmi binds (generate.py reads the signatures from the package itself), loads
it, imports the real ``amdsmi`` on top of it, and answers each C call from the same
simulated node that drives the stand-in (provider.py). Both faces then read one model, and
any disagreement between them is a fidelity bug in the stand-in.

Public API::

    from fleetd.sim.libemu import EmulatedLibrary, SimProvider, build_library

    library = EmulatedLibrary(build_library(cache_dir))  # CompilerMissing without gcc
    amdsmi = library.import_amdsmi()                     # the real package, once per process
    library.install(SimProvider(amdsmi.amdsmi_wrapper, RawLibrary(node)))
    AmdSmiBackend(amdsmi)                                # fleetd's real backend runs on it

Nothing here is imported by the daemon; it is test support (and a demo aid).
"""

from fleetd.sim.libemu.build import CompilerMissing, build_library, find_compiler
from fleetd.sim.libemu.generate import GenerationError, find_wrapper, read_wrapper, render_c
from fleetd.sim.libemu.library import EmulatedLibrary, EmulationError, Provider, bound_library
from fleetd.sim.libemu.provider import SimProvider, decode_argument, fill

__all__ = [
    "CompilerMissing",
    "EmulatedLibrary",
    "EmulationError",
    "GenerationError",
    "Provider",
    "SimProvider",
    "bound_library",
    "build_library",
    "decode_argument",
    "fill",
    "find_compiler",
    "find_wrapper",
    "read_wrapper",
    "render_c",
]
