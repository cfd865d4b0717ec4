"""Generate the C source of an emulated ``libamd_smi.so`` from the installed amdsmi package.

The installed ``amdsmi/amdsmi_wrapper.py`` is read as text and parsed with ``ast`` (never
imported: importing it needs the very library we are about to build). Every
``NAME = _libraries['libamd_smi.so'].SYMBOL`` it binds, with the ``argtypes``/``restype`` it
declares, becomes one exported C function with that signature. Each function packs its
arguments into a ``uint64_t`` array (pointers and integers as values, floating-point values
by their bits, structures passed by value by their address) and hands them to a provider
callback that the simulator registers at run time with ``fleetd_emu_set_provider``; the
callback's status code is returned. Without a provider every call answers
AMDSMI_STATUS_NOT_SUPPORTED.

Nothing of AMD's is copied: the output holds only symbol names and C types, derived afresh
from whatever amdsmi version is installed, so the emulation always matches it.

Run ``python -m fleetd.sim.libemu.generate -o amdsmi_emu.c`` to see the output.
"""

from __future__ import annotations

import argparse
import ast
import ctypes
import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetd.sim.pysource import PySourceError, parse_file

LIBRARY_KEY = "libamd_smi.so"
STATUS_NOT_SUPPORTED = 2
"""AMDSMI_STATUS_NOT_SUPPORTED: what every call answers while no provider is installed."""


class GenerationError(Exception):
    """The wrapper could not be read or holds a C type the generator cannot express."""


# ---------------------------------------------------------------------------------- C types
@dataclass(frozen=True, slots=True)
class Scalar:
    """An integer, floating-point or pointer value passed in a register."""

    c_type: str
    kind: str  # "int", "float", "double" or "pointer"


@dataclass(frozen=True, slots=True)
class Aggregate:
    """A structure or union passed by value (its layout computed from the wrapper)."""

    name: str
    size: int
    align: int


@dataclass(frozen=True, slots=True)
class Void:
    """The ``None`` restype."""


CType = Scalar | Aggregate | Void

_SCALARS: dict[str, Scalar] = {
    "c_bool": Scalar("_Bool", "int"),
    "c_char": Scalar("char", "int"),
    "c_byte": Scalar("int8_t", "int"),
    "c_int8": Scalar("int8_t", "int"),
    "c_ubyte": Scalar("uint8_t", "int"),
    "c_uint8": Scalar("uint8_t", "int"),
    "c_short": Scalar("int16_t", "int"),
    "c_int16": Scalar("int16_t", "int"),
    "c_ushort": Scalar("uint16_t", "int"),
    "c_uint16": Scalar("uint16_t", "int"),
    "c_int": Scalar("int32_t", "int"),
    "c_int32": Scalar("int32_t", "int"),
    "c_uint": Scalar("uint32_t", "int"),
    "c_uint32": Scalar("uint32_t", "int"),
    "c_long": Scalar("long", "int"),
    "c_ulong": Scalar("unsigned long", "int"),
    "c_longlong": Scalar("int64_t", "int"),
    "c_int64": Scalar("int64_t", "int"),
    "c_ulonglong": Scalar("uint64_t", "int"),
    "c_uint64": Scalar("uint64_t", "int"),
    "c_size_t": Scalar("size_t", "int"),
    "c_ssize_t": Scalar("ptrdiff_t", "int"),
    "c_float": Scalar("float", "float"),
    "c_double": Scalar("double", "double"),
    "c_void_p": Scalar("void *", "pointer"),
    "c_char_p": Scalar("char *", "pointer"),
    "c_wchar_p": Scalar("void *", "pointer"),
}
_POINTER = Scalar("void *", "pointer")


@dataclass(frozen=True, slots=True)
class Function:
    """One bound library function: its symbol, argument types and return type."""

    symbol: str
    args: tuple[CType, ...]
    result: CType


@dataclass(frozen=True, slots=True)
class WrapperSpec:
    """Everything the generator learned from one amdsmi_wrapper.py."""

    source: Path
    sha256: str
    functions: tuple[Function, ...]

    def symbols(self) -> tuple[str, ...]:
        return tuple(f.symbol for f in self.functions)


# ---------------------------------------------------------------------------------- reading
def find_wrapper(package: str = "amdsmi") -> Path:
    """Path of the installed ``<package>/amdsmi_wrapper.py``, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise GenerationError(
            f"the {package!r} Python package is not installed (pip install amdsmi==7.0.2)"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "amdsmi_wrapper.py"
        if candidate.is_file():
            return candidate
    raise GenerationError(f"{package!r} has no amdsmi_wrapper.py")


class _Module:
    """Module-level names of the wrapper: aliases, classes, field lists and constants."""

    def __init__(self, tree: ast.Module) -> None:
        self.aliases: dict[str, ast.expr] = {}
        self.classes: dict[str, str] = {}  # name → "Structure" / "Union"
        self.fields: dict[str, ast.expr] = {}
        self.packs: dict[str, int] = {}
        self.constants: dict[str, int] = {}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                for kind in ("Structure", "Union"):
                    if kind in bases:
                        self.classes[node.name] = kind
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                self._assign(node.targets[0], node.value)

    def _assign(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Name):
            if isinstance(value, ast.Constant) and isinstance(value.value, int):
                self.constants[target.id] = value.value
            else:
                self.aliases[target.id] = value
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            owner = target.value.id
            if target.attr == "_fields_":
                self.fields[owner] = value
            elif (
                target.attr == "_pack_"
                and isinstance(value, ast.Constant)
                and isinstance(value.value, int)
            ):
                self.packs[owner] = value.value

    # --- argument and result types -------------------------------------------------------
    def c_type(self, expr: ast.expr, where: str, depth: int = 0) -> CType:
        if depth > 50:
            raise GenerationError(f"{where}: type alias loop at {ast.unparse(expr)}")
        if isinstance(expr, ast.Constant) and expr.value is None:
            return Void()
        if _is_ctypes_call(expr, "POINTER"):
            return _POINTER
        if isinstance(expr, ast.Attribute) and _is_ctypes(expr.value):
            scalar = _SCALARS.get(expr.attr)
            if scalar is None:
                raise GenerationError(f"{where}: unsupported ctypes type ctypes.{expr.attr}")
            return scalar
        if isinstance(expr, ast.Name):
            if expr.id in self.classes:
                return self._aggregate(expr.id, where)
            if expr.id in self.aliases:
                return self.c_type(self.aliases[expr.id], where, depth + 1)
        raise GenerationError(f"{where}: cannot resolve the C type of {ast.unparse(expr)}")

    def _aggregate(self, name: str, where: str) -> Aggregate:
        kind = self.ctypes_type(ast.Name(id=name), where)
        if _has_floating_point(kind):
            raise GenerationError(
                f"{where}: {name} holds floating-point fields and is passed by value; "
                "its register class cannot be expressed as an opaque aggregate"
            )
        return Aggregate(name, ctypes.sizeof(kind), ctypes.alignment(kind))

    # --- structure layouts (only for aggregates passed by value) ------------------------
    def ctypes_type(self, expr: ast.expr, where: str, depth: int = 0) -> Any:
        """Rebuild a ctypes type from its wrapper definition, to learn size and alignment."""
        if depth > 50:
            raise GenerationError(f"{where}: type alias loop at {ast.unparse(expr)}")
        if _is_ctypes_call(expr, "POINTER"):
            return ctypes.c_void_p
        if isinstance(expr, ast.Attribute) and _is_ctypes(expr.value):
            kind = getattr(ctypes, expr.attr, None)
            if kind is None:
                raise GenerationError(f"{where}: unknown ctypes type ctypes.{expr.attr}")
            return kind
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult):
            element = self.ctypes_type(expr.left, where, depth + 1)
            return element * self._length(expr.right, where)
        if isinstance(expr, ast.Name):
            if expr.id in self.classes:
                return self._build(expr.id, where, depth)
            if expr.id in self.aliases:
                return self.ctypes_type(self.aliases[expr.id], where, depth + 1)
        raise GenerationError(f"{where}: cannot lay out {ast.unparse(expr)}")

    def _length(self, expr: ast.expr, where: str) -> int:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, int):
            return expr.value
        if isinstance(expr, ast.Name) and expr.id in self.constants:
            return self.constants[expr.id]
        raise GenerationError(f"{where}: array length {ast.unparse(expr)} is not a constant")

    def _build(self, name: str, where: str, depth: int) -> Any:
        fields_expr = self.fields.get(name)
        if not isinstance(fields_expr, ast.List):
            raise GenerationError(f"{where}: {name} has no _fields_ list")
        fields: list[tuple[Any, ...]] = []
        for item in fields_expr.elts:
            if not isinstance(item, ast.Tuple) or not 2 <= len(item.elts) <= 3:
                raise GenerationError(f"{where}: malformed field in {name}")
            label = item.elts[0]
            if not isinstance(label, ast.Constant) or not isinstance(label.value, str):
                raise GenerationError(f"{where}: malformed field name in {name}")
            kind = self.ctypes_type(item.elts[1], where, depth + 1)
            if len(item.elts) == 3:
                bits = item.elts[2]
                if not isinstance(bits, ast.Constant) or not isinstance(bits.value, int):
                    raise GenerationError(f"{where}: malformed bit width in {name}")
                fields.append((label.value, kind, bits.value))
            else:
                fields.append((label.value, kind))
        base: type = ctypes.Union if self.classes[name] == "Union" else ctypes.Structure
        namespace: dict[str, Any] = {}
        if name in self.packs:
            namespace["_pack_"] = self.packs[name]
        namespace["_fields_"] = fields
        return type(name, (base,), namespace)


def _is_ctypes(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Name) and expr.id == "ctypes"


def _is_ctypes_call(expr: ast.expr, function: str) -> bool:
    return (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == function
        and _is_ctypes(expr.func.value)
    )


def _has_floating_point(kind: Any) -> bool:
    if kind in (ctypes.c_float, ctypes.c_double, ctypes.c_longdouble):
        return True
    if hasattr(kind, "_length_") and hasattr(kind, "_type_"):
        return _has_floating_point(kind._type_)
    return any(_has_floating_point(field[1]) for field in getattr(kind, "_fields_", ()))


def _bound_symbol(value: ast.expr) -> str | None:
    """``_libraries['libamd_smi.so'].NAME`` → NAME."""
    if not isinstance(value, ast.Attribute):
        return None
    inner = value.value
    if (
        isinstance(inner, ast.Subscript)
        and isinstance(inner.value, ast.Name)
        and inner.value.id == "_libraries"
        and isinstance(inner.slice, ast.Constant)
        and inner.slice.value == LIBRARY_KEY
    ):
        return value.attr
    return None


def read_wrapper(path: Path) -> WrapperSpec:
    """Every function the wrapper binds from libamd_smi.so, with its declared C signature."""
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        tree = parse_file(path)
    except OSError as exc:
        raise GenerationError(f"cannot read {path}: {exc}") from None
    except PySourceError as exc:
        if isinstance(exc.error, SyntaxError):
            error = exc.error
            raise GenerationError(
                f"{path}:{error.lineno}: not valid Python ({error.msg})"
            ) from None
        raise GenerationError(f"cannot read {path}: {exc.error}") from None
    module = _Module(tree)
    bound: dict[str, str] = {}  # Python name → symbol
    argtypes: dict[str, ast.expr] = {}
    restypes: dict[str, ast.expr] = {}
    lines: dict[str, int] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = node.targets[0]
        symbol = _bound_symbol(node.value)
        if symbol is not None and isinstance(target, ast.Name):
            bound[target.id] = symbol
            lines[target.id] = node.lineno
        elif (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.attr in ("argtypes", "restype")
        ):
            table = argtypes if target.attr == "argtypes" else restypes
            table[target.value.id] = node.value
    if not bound:
        raise GenerationError(f"{path}: binds no {LIBRARY_KEY} function")
    functions: list[Function] = []
    seen: set[str] = set()
    for name, symbol in bound.items():
        where = f"{path.name}:{lines[name]} ({symbol})"
        if symbol in seen:
            continue
        seen.add(symbol)
        arg_list = argtypes.get(name)
        if not isinstance(arg_list, ast.List):
            raise GenerationError(f"{where}: no argtypes list")
        result_expr = restypes.get(name)
        if result_expr is None:
            raise GenerationError(f"{where}: no restype")
        args = tuple(module.c_type(a, where) for a in arg_list.elts)
        if any(isinstance(a, Void) for a in args):
            raise GenerationError(f"{where}: an argument cannot be void")
        result = module.c_type(result_expr, where)
        if isinstance(result, Aggregate) or (isinstance(result, Scalar) and result.kind != "int"):
            raise GenerationError(f"{where}: unsupported return type {ast.unparse(result_expr)}")
        functions.append(Function(symbol, args, result))
    return WrapperSpec(path, digest, tuple(functions))


# ---------------------------------------------------------------------------------- writing
_PRELUDE = """\
/* Emulated libamd_smi.so, generated by fleetd.sim.libemu.generate.
 * Signatures derived from {source} (sha256 {sha256}).
 * Build output: never commit it. Every function forwards to the provider callback. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define FLEETD_EMU_EXPORT __attribute__((visibility("default")))

typedef uint32_t (*fleetd_emu_provider_fn)(uint32_t function_id, const uint64_t *args,
                                           uint32_t nargs);

static fleetd_emu_provider_fn fleetd_emu_provider;

static const char *const fleetd_emu_names[{count}] = {{
{names}
}};

FLEETD_EMU_EXPORT void fleetd_emu_set_provider(fleetd_emu_provider_fn provider) {{
    __atomic_store_n(&fleetd_emu_provider, provider, __ATOMIC_SEQ_CST);
}}

FLEETD_EMU_EXPORT uint32_t fleetd_emu_function_count(void) {{ return {count}u; }}

FLEETD_EMU_EXPORT const char *fleetd_emu_function_name(uint32_t function_id) {{
    return function_id < {count}u ? fleetd_emu_names[function_id] : NULL;
}}

static uint32_t fleetd_emu_call(uint32_t function_id, const uint64_t *args, uint32_t nargs) {{
    fleetd_emu_provider_fn provider = __atomic_load_n(&fleetd_emu_provider, __ATOMIC_SEQ_CST);
    if (provider == NULL) {{
        return {not_supported}u;
    }}
    return provider(function_id, args, nargs);
}}
"""


def _aggregate_type(agg: Aggregate) -> str:
    return f"fleetd_emu_byval_{agg.name}"


def _pack(index: int, arg: CType) -> str:
    name = f"a{index}"
    if isinstance(arg, Aggregate):
        return f"    args[{index}] = (uint64_t)(uintptr_t)&{name};"
    assert isinstance(arg, Scalar)
    if arg.kind == "pointer":
        return f"    args[{index}] = (uint64_t)(uintptr_t){name};"
    if arg.kind == "float":
        return (
            f"    {{ uint32_t bits; memcpy(&bits, &{name}, sizeof bits); args[{index}] = bits; }}"
        )
    if arg.kind == "double":
        return f"    memcpy(&args[{index}], &{name}, sizeof args[{index}]);"
    return f"    args[{index}] = (uint64_t)(int64_t){name};"


def _declare(arg: CType, index: int) -> str:
    if isinstance(arg, Aggregate):
        return f"{_aggregate_type(arg)} a{index}"
    assert isinstance(arg, Scalar)
    return f"{arg.c_type} a{index}"


def render_c(spec: WrapperSpec) -> str:
    """The complete C source for ``spec``."""
    parts = [
        _PRELUDE.format(
            source=spec.source.name,
            sha256=spec.sha256,
            count=len(spec.functions),
            names="\n".join(f'    "{f.symbol}",' for f in spec.functions),
            not_supported=STATUS_NOT_SUPPORTED,
        )
    ]
    aggregates = {a.name: a for f in spec.functions for a in f.args if isinstance(a, Aggregate)}
    for agg in aggregates.values():
        parts.append(
            f"typedef struct {{ _Alignas({agg.align}) unsigned char bytes[{agg.size}]; }} "
            f"{_aggregate_type(agg)};\n"
        )
    for function_id, function in enumerate(spec.functions):
        params = ", ".join(_declare(a, i) for i, a in enumerate(function.args)) or "void"
        result = function.result
        result_c = result.c_type if isinstance(result, Scalar) else "void"
        body = [f"    uint64_t args[{max(1, len(function.args))}] = {{0}};"]
        body += [_pack(i, a) for i, a in enumerate(function.args)]
        call = f"fleetd_emu_call({function_id}u, args, {len(function.args)}u)"
        body.append(
            f"    (void){call};" if isinstance(result, Void) else f"    return ({result_c}){call};"
        )
        parts.append(
            f"FLEETD_EMU_EXPORT {result_c} {function.symbol}({params}) {{\n"
            + "\n".join(body)
            + "\n}\n"
        )
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, help="write here (default: stdout)")
    parser.add_argument("--wrapper", type=Path, help="amdsmi_wrapper.py to read")
    options = parser.parse_args(argv)
    try:
        spec = read_wrapper(options.wrapper or find_wrapper())
    except GenerationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    source = render_c(spec)
    if options.output is None:
        sys.stdout.write(source)
    else:
        options.output.write_text(source, encoding="utf-8")
        print(f"{options.output}: {len(spec.functions)} functions", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
