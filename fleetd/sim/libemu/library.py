"""EmulatedLibrary: the built libamd_smi.so loaded in this process, and the real amdsmi on it.

The C library holds one provider pointer; ``EmulatedLibrary`` points it at its own dispatcher
once and routes each call to whichever provider is installed now, so tests can switch
simulated nodes while the real ``amdsmi`` package (imported once per process: its ctypes
bindings are made at import time) stays bound to the same library.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import io
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from fleetd.sim.libemu.generate import STATUS_NOT_SUPPORTED

ProviderFunction = ctypes.CFUNCTYPE(
    ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint32
)


class EmulationError(Exception):
    """The emulated library cannot be loaded, or amdsmi cannot be bound to it."""


class Provider(Protocol):
    """Answers one C call: the symbol and its arguments as raw uint64 values."""

    def call(self, symbol: str, raw: Sequence[int]) -> int: ...


class EmulatedLibrary:
    """One loaded emulated ``libamd_smi.so`` (``path`` = ``<rocm>/lib/libamd_smi.so``)."""

    def __init__(self, path: Path) -> None:
        self.path = path.resolve()
        try:
            self._cdll = ctypes.CDLL(str(self.path))
            count = int(self._cdll.fleetd_emu_function_count())
        except (OSError, AttributeError) as exc:
            raise EmulationError(f"{self.path} is not an emulated libamd_smi.so: {exc}") from None
        name_of = self._cdll.fleetd_emu_function_name
        name_of.restype = ctypes.c_char_p
        name_of.argtypes = [ctypes.c_uint32]
        self.symbols: tuple[str, ...] = tuple(name_of(i).decode() for i in range(count))
        self._provider: Provider | None = None
        self._lock = threading.Lock()
        self._callback = ProviderFunction(self._dispatch)  # kept alive as long as we are
        setter = self._cdll.fleetd_emu_set_provider
        setter.restype = None
        setter.argtypes = [ProviderFunction]
        setter(self._callback)

    @property
    def rocm_path(self) -> Path:
        """The directory to use as ROCM_PATH (it holds ``lib/libamd_smi.so``)."""
        return self.path.parent.parent

    def _dispatch(self, function_id: int, args: Any, nargs: int) -> int:
        provider = self._provider
        if provider is None or not 0 <= function_id < len(self.symbols):
            return STATUS_NOT_SUPPORTED
        return provider.call(self.symbols[function_id], [args[i] for i in range(nargs)])

    def install(self, provider: Provider | None) -> Provider | None:
        """Route every call to ``provider`` (None: every call answers NOT_SUPPORTED).

        Returns the provider that was installed before.
        """
        with self._lock:
            previous, self._provider = self._provider, provider
            return previous

    @contextlib.contextmanager
    def providing(self, provider: Provider) -> Iterator[Provider]:
        """Install ``provider`` for the duration of a ``with`` block."""
        previous = self.install(provider)
        try:
            yield provider
        finally:
            self.install(previous)

    def import_amdsmi(self) -> ModuleType:
        """Import the real amdsmi package bound to this library (once per process).

        ROCM_PATH points at this library for the import only (ROCM_HOME, which would win,
        is hidden meanwhile). If amdsmi is already imported and bound to another library,
        that cannot be undone in this process: EmulationError says so.
        """
        module = sys.modules.get("amdsmi")
        if module is None:
            saved = {key: os.environ.get(key) for key in ("ROCM_HOME", "ROCM_PATH")}
            os.environ.pop("ROCM_HOME", None)
            os.environ["ROCM_PATH"] = str(self.rocm_path)
            printed = io.StringIO()
            try:
                with contextlib.redirect_stdout(printed):
                    module = importlib.import_module("amdsmi")
            except (KeyError, OSError, AttributeError, ImportError) as exc:
                said = printed.getvalue().strip().replace("\n", "; ")
                raise EmulationError(
                    f"import amdsmi over {self.path} failed: {type(exc).__name__}: {exc}"
                    + (f" ({said})" if said else "")
                ) from None
            finally:
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
        bound = bound_library(module)
        if bound is None or bound.resolve() != self.path:
            raise EmulationError(
                f"amdsmi is bound to {bound} in this process, not to {self.path}; "
                "import it in a fresh process"
            )
        return module


def bound_library(amdsmi_module: ModuleType) -> Path | None:
    """The libamd_smi.so file an imported amdsmi package is bound to."""
    wrapper = getattr(amdsmi_module, "amdsmi_wrapper", None)
    libraries = getattr(wrapper, "_libraries", {})
    library = libraries.get("libamd_smi.so") if isinstance(libraries, dict) else None
    name = getattr(library, "_name", None)
    return Path(name) if isinstance(name, str) else None
