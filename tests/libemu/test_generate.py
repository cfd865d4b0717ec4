"""The generator: every symbol amdsmi binds is exported with its declared signature, and the
argument packing round-trips every C type class (checked on a synthetic wrapper)."""

from __future__ import annotations

import ctypes
import re
import struct
import textwrap
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fleetd.clock import FakeClock
from fleetd.sim import RawLibrary, build_node
from fleetd.sim.libemu import (
    CompilerMissing,
    EmulatedLibrary,
    GenerationError,
    SimProvider,
    build_library,
    decode_argument,
    find_compiler,
    find_wrapper,
    read_wrapper,
    render_c,
)
from fleetd.sim.libemu.generate import Aggregate, Scalar

BINDING = re.compile(r"^\w+ = _libraries\['libamd_smi\.so'\]\.(\w+)$", re.MULTILINE)


def test_every_bound_symbol_is_read_from_the_installed_wrapper(real_amdsmi: ModuleType) -> None:
    path = find_wrapper()
    symbols = BINDING.findall(path.read_text(encoding="utf-8"))
    spec = read_wrapper(path)
    assert [f.symbol for f in spec.functions] == list(dict.fromkeys(symbols))
    assert len(spec.functions) >= 180  # 184 in amdsmi 7.0.2
    for function in spec.functions:
        bound = getattr(real_amdsmi.amdsmi_wrapper, function.symbol)
        assert len(function.args) == len(bound.argtypes), function.symbol


def test_the_built_library_exports_exactly_those_symbols(
    emulated_library: EmulatedLibrary,
) -> None:
    spec = read_wrapper(find_wrapper())
    assert emulated_library.symbols == tuple(f.symbol for f in spec.functions)
    raw = ctypes.CDLL(str(emulated_library.path))
    for symbol in emulated_library.symbols:
        assert hasattr(raw, symbol), symbol
    assert not hasattr(raw, "fleetd_emu_call")  # internal helpers stay internal


def test_the_bdf_union_is_passed_by_value(emulated_library: EmulatedLibrary) -> None:
    spec = read_wrapper(find_wrapper())
    by_symbol = {f.symbol: f for f in spec.functions}
    bdf_arg = by_symbol["amdsmi_get_processor_handle_from_bdf"].args[0]
    assert bdf_arg == Aggregate("union_amdsmi_bdf_t", 8, 1)
    assert by_symbol["amdsmi_get_temp_metric"].args[3] == Scalar("void *", "pointer")


def test_every_c_call_the_simulator_models_has_a_handler(real_amdsmi: ModuleType) -> None:
    modelled = {name for name in dir(RawLibrary) if name.startswith("amdsmi_")}
    provider = SimProvider(real_amdsmi.amdsmi_wrapper, RawLibrary(build_node(clock=FakeClock())))
    assert modelled - provider.provided == set()
    assert provider.provided <= set(read_wrapper(find_wrapper()).symbols())


def test_calls_answer_not_supported_without_a_provider(
    emulated_library: EmulatedLibrary, real_amdsmi: ModuleType
) -> None:
    previous = emulated_library.install(None)
    try:
        with pytest.raises(real_amdsmi.AmdSmiLibraryException) as info:
            real_amdsmi.amdsmi_init()
        assert info.value.get_error_code() == 2
    finally:
        emulated_library.install(previous)


def test_a_provider_failure_is_never_a_success(
    emulated_library: EmulatedLibrary, real_amdsmi: ModuleType, clock: FakeClock
) -> None:
    node = build_node("MI300X", seed=1, clock=clock)
    lib = RawLibrary(node)
    provider = SimProvider(real_amdsmi.amdsmi_wrapper, lib)

    def broken(handle: int) -> None:
        raise ValueError("model exploded")

    lib.amdsmi_get_power_info = broken  # type: ignore[method-assign,assignment]
    with emulated_library.providing(provider):
        real_amdsmi.amdsmi_init()
        handle = real_amdsmi.amdsmi_get_processor_handles()[0]
        with pytest.raises(real_amdsmi.AmdSmiLibraryException) as info:
            real_amdsmi.amdsmi_get_power_info(handle)
        assert info.value.get_error_code() == 16  # INTERNAL_EXCEPTION
        with pytest.raises(real_amdsmi.AmdSmiLibraryException) as unmodelled:
            real_amdsmi.amdsmi_get_gpu_fan_rpms(handle, 0)
        assert unmodelled.value.get_error_code() == 2
    assert len(provider.errors) == 1 and "model exploded" in provider.errors[0]
    assert provider.unhandled["amdsmi_get_gpu_fan_rpms"] == 1


# ---------------------------------------------------------------------------------- synthetic
SYNTHETIC = textwrap.dedent(
    """
    import ctypes
    _libraries = {}
    class Structure(ctypes.Structure):
        pass
    class struct_pair_t(Structure):
        pass
    struct_pair_t._pack_ = 1
    struct_pair_t._fields_ = [
        ('lo', ctypes.c_uint32),
        ('hi', ctypes.c_uint16, 12),
        ('flag', ctypes.c_uint16, 4),
        ('tail', ctypes.c_ubyte * TAIL),
    ]
    TAIL = 2
    pair_t = struct_pair_t
    uint64_t = ctypes.c_uint64
    status_t = ctypes.c_uint32
    probe_scalars = _libraries['libamd_smi.so'].probe_scalars
    probe_scalars.restype = status_t
    probe_scalars.argtypes = [ctypes.c_float, ctypes.c_double, ctypes.c_int32, ctypes.c_uint8,
                              ctypes.c_bool, ctypes.c_int64, uint64_t,
                              ctypes.POINTER(ctypes.c_uint32), ctypes.c_double, ctypes.c_int16,
                              ctypes.c_float, ctypes.c_uint64]
    probe_struct = _libraries['libamd_smi.so'].probe_struct
    probe_struct.restype = status_t
    probe_struct.argtypes = [ctypes.c_int32, pair_t, ctypes.c_double]
    probe_void = _libraries['libamd_smi.so'].probe_void
    probe_void.restype = None
    probe_void.argtypes = []
    """
)


class Pair(ctypes.Structure):
    _pack_ = 1
    _fields_ = [
        ("lo", ctypes.c_uint32),
        ("hi", ctypes.c_uint16, 12),
        ("flag", ctypes.c_uint16, 4),
        ("tail", ctypes.c_ubyte * 2),
    ]


SCALARS = [
    ctypes.c_float, ctypes.c_double, ctypes.c_int32, ctypes.c_uint8, ctypes.c_bool,
    ctypes.c_int64, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint32), ctypes.c_double,
    ctypes.c_int16, ctypes.c_float, ctypes.c_uint64,
]  # fmt: skip


class Recorder:
    def __init__(self, argtypes: dict[str, list[Any]], status: int) -> None:
        self.argtypes = argtypes
        self.status = status
        self.seen: list[tuple[str, list[Any]]] = []

    def call(self, symbol: str, raw: Sequence[int]) -> int:
        kinds = self.argtypes[symbol]
        self.seen.append((symbol, [decode_argument(k, v) for k, v in zip(kinds, raw, strict=True)]))
        return self.status


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> EmulatedLibrary:
    try:
        find_compiler()
    except CompilerMissing as exc:
        pytest.skip(str(exc))
    root = tmp_path_factory.mktemp("synthetic")
    wrapper = root / "amdsmi_wrapper.py"
    wrapper.write_text(SYNTHETIC, encoding="utf-8")
    return EmulatedLibrary(build_library(root / "cache", wrapper))


def test_scalars_of_every_class_round_trip(synthetic: EmulatedLibrary) -> None:
    recorder = Recorder({"probe_scalars": SCALARS}, status=7)
    raw = ctypes.CDLL(str(synthetic.path))
    fn = raw.probe_scalars
    fn.argtypes, fn.restype = SCALARS, ctypes.c_uint32
    cell = ctypes.c_uint32(5)
    values = [1.5, -2.25e300, -7, 250, True, -(2**62), 2**64 - 1, None, 3.0, -300, -0.125, 42]
    with synthetic.providing(recorder):
        args = [ctypes.pointer(cell) if v is None else v for v in values]
        assert fn(*args) == 7
    symbol, got = recorder.seen[0]
    assert symbol == "probe_scalars"
    assert got[:7] == values[:7]
    assert ctypes.addressof(got[7].contents) == ctypes.addressof(cell)
    assert got[8:] == values[8:]
    assert struct.pack("<f", got[0]) == struct.pack("<f", 1.5)


def test_a_structure_passed_by_value_arrives_intact(synthetic: EmulatedLibrary) -> None:
    kinds = [ctypes.c_int32, Pair, ctypes.c_double]
    recorder = Recorder({"probe_struct": kinds}, status=0)
    fn = ctypes.CDLL(str(synthetic.path)).probe_struct
    fn.argtypes, fn.restype = kinds, ctypes.c_uint32
    pair = Pair(lo=0xDEADBEEF, hi=0xABC, flag=0x9)
    pair.tail[:] = [1, 2]
    with synthetic.providing(recorder):
        assert fn(-1, pair, 6.5) == 0
    _, (first, got, last) = recorder.seen[0]
    assert (first, last) == (-1, 6.5)
    assert (got.lo, got.hi, got.flag, list(got.tail)) == (0xDEADBEEF, 0xABC, 0x9, [1, 2])


def test_void_functions_and_unknown_providers(synthetic: EmulatedLibrary) -> None:
    recorder = Recorder({"probe_void": []}, status=99)
    fn = ctypes.CDLL(str(synthetic.path)).probe_void
    fn.argtypes, fn.restype = [], None
    with synthetic.providing(recorder):
        assert fn() is None
    assert recorder.seen == [("probe_void", [])]


def test_the_cache_reuses_an_identical_build(tmp_path: Path, synthetic: EmulatedLibrary) -> None:
    wrapper = tmp_path / "amdsmi_wrapper.py"
    wrapper.write_text(SYNTHETIC, encoding="utf-8")
    first = build_library(tmp_path / "cache", wrapper)
    stamp = first.stat().st_mtime_ns
    assert build_library(tmp_path / "cache", wrapper) == first
    assert first.stat().st_mtime_ns == stamp


# ---------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x = 1\n", "binds no libamd_smi.so function"),
        (
            "f = _libraries['libamd_smi.so'].f\nf.restype = ctypes.c_uint32\n",
            "no argtypes list",
        ),
        (
            "f = _libraries['libamd_smi.so'].f\nf.restype = ctypes.c_uint32\n"
            "f.argtypes = [ctypes.c_mystery]\n",
            "unsupported ctypes type ctypes.c_mystery",
        ),
        (
            "f = _libraries['libamd_smi.so'].f\nf.restype = ctypes.c_uint32\n"
            "f.argtypes = [undefined_t]\n",
            "cannot resolve the C type of undefined_t",
        ),
        (
            "class s_t(Structure):\n    pass\ns_t._fields_ = [('x', ctypes.c_float)]\n"
            "f = _libraries['libamd_smi.so'].f\nf.restype = ctypes.c_uint32\n"
            "f.argtypes = [s_t]\n",
            "floating-point fields",
        ),
        (
            "f = _libraries['libamd_smi.so'].f\nf.restype = ctypes.c_double\nf.argtypes = []\n",
            "unsupported return type",
        ),
        ("def broken(:\n", "not valid Python"),
    ],
)
def test_what_cannot_be_generated_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    wrapper = tmp_path / "amdsmi_wrapper.py"
    wrapper.write_text(text, encoding="utf-8")
    with pytest.raises(GenerationError, match=re.escape(message)) as info:
        render_c(read_wrapper(wrapper))
    assert "amdsmi_wrapper.py" in str(info.value)


def test_a_missing_compiler_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CC", "fleetd-no-such-cc")
    with pytest.raises(CompilerMissing, match="fleetd-no-such-cc"):
        build_library(tmp_path)


def test_the_command_line_writes_the_source(tmp_path: Path) -> None:
    from fleetd.sim.libemu.generate import main

    wrapper = tmp_path / "amdsmi_wrapper.py"
    wrapper.write_text(SYNTHETIC, encoding="utf-8")
    out = tmp_path / "emu.c"
    assert main(["--wrapper", str(wrapper), "-o", str(out)]) == 0
    source = out.read_text()
    assert "uint32_t probe_scalars(float a0, double a1, int32_t a2" in source
    assert main(["--wrapper", str(tmp_path / "missing.py")]) == 2
