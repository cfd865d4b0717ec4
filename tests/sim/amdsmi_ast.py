"""Read the installed amdsmi 7.0.2 package's source with ``ast`` — never import it.

The package cannot be imported here (no libamd_smi.so), and we must not rely on it running;
its source still tells us everything the simulator must match: function signatures, enum
members and values, exception classes, status constants, and the keys each function puts in
the dicts it returns. ``surface_problems`` and ``shape_problems`` compare a candidate
(the simulator, or a deliberately wrong fake in the self-check) against that truth.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import ModuleType
from typing import Any

from fleetd.sim.pysource import parse_files

ListShape = tuple[str, Any]  # ("list", element shape)


def find_package_dir() -> Path | None:
    """Where amdsmi is installed, found without importing it (None when absent)."""
    spec = importlib.util.find_spec("amdsmi")
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin).parent if spec.origin else None


@dataclass
class RealApi:
    """What the real package defines, as read from its source."""

    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    helpers: dict[str, ast.FunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    enums: dict[str, dict[str, int]] = field(default_factory=dict)
    exceptions: dict[str, ast.ClassDef] = field(default_factory=dict)
    constants: dict[str, int] = field(default_factory=dict)
    error_text: dict[int, str] = field(default_factory=dict)
    exported: set[str] = field(default_factory=set)


def load_real_api(package: Path) -> RealApi:
    api = RealApi()
    names = ("amdsmi_wrapper.py", "amdsmi_interface.py", "amdsmi_exception.py", "__init__.py")
    wrapper, interface, exceptions, init = parse_files([package / name for name in names])
    for node in wrapper.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, int)
            and not isinstance(node.value.value, bool)
        ):
            api.constants[node.targets[0].id] = node.value.value
    for node in interface.body:
        if isinstance(node, ast.FunctionDef):
            (api.helpers if node.name.startswith("_") else api.functions)[node.name] = node
        elif isinstance(node, ast.ClassDef):
            api.classes[node.name] = node
            bases = {_name(b) for b in node.bases}
            if bases & {"IntEnum", "Enum"}:
                api.enums[node.name] = _enum_members(node, api.constants)
    for node in exceptions.body:
        if isinstance(node, ast.ClassDef):
            api.exceptions[node.name] = node
            if node.name == "AmdSmiLibraryException":
                api.error_text = _error_text(node, api.constants)
    for node in ast.walk(init):
        if isinstance(node, ast.ImportFrom):
            api.exported.update(alias.asname or alias.name for alias in node.names)
    return api


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ast.unparse(node)


def _enum_members(node: ast.ClassDef, constants: dict[str, int]) -> dict[str, int]:
    members: dict[str, int] = {}
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
            value = _resolve(stmt.value, constants)
            if value is not None:
                members[stmt.targets[0].id] = value
    return members


def _resolve(node: ast.expr, constants: dict[str, int]) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Attribute):
        return constants.get(node.attr)
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _error_text(node: ast.ClassDef, constants: dict[str, int]) -> dict[int, str]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Dict) and sub.keys:
            out: dict[int, str] = {}
            for key, value in zip(sub.keys, sub.values, strict=True):
                code = _resolve(key, constants) if key is not None else None
                if code is not None and isinstance(value, ast.Constant):
                    out[code] = value.value
            if out:
                return out
    return {}


# ---------------------------------------------------------------------------------- signatures
def real_params(func: ast.FunctionDef, api: RealApi) -> list[tuple[str, Any]]:
    """[(name, default)] with ``inspect.Parameter.empty`` when there is no default."""
    args = func.args.args
    names = [a.arg for a in args]
    if names and names[0] == "self":
        names = names[1:]
        args = args[1:]
    defaults: list[Any] = [inspect.Parameter.empty] * (len(args) - len(func.args.defaults))
    defaults += [_default(d, api) for d in func.args.defaults]
    return list(zip(names, defaults, strict=True))


def _default(node: ast.expr, api: RealApi) -> Any:
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in api.enums
    ):
        return (node.value.id, node.attr)
    return eval(compile(ast.Expression(node), "<default>", "eval"), {"__builtins__": {}}, {})


def sim_params(func: Any) -> list[tuple[str, Any]]:
    out = []
    for p in inspect.signature(func).parameters.values():
        default = p.default
        if isinstance(default, Enum):
            default = (type(default).__name__, default.name)
        out.append((p.name, default))
    return out


# ---------------------------------------------------------------------------------- surface
def offered_functions(face: Any) -> dict[str, Any]:
    """The amdsmi_* functions a face offers (module-valued attributes excluded)."""
    out = {}
    for name in dir(face):
        if not name.startswith("amdsmi_") or name in (
            "amdsmi_wrapper",
            "amdsmi_exception",
            "amdsmi_interface",
        ):
            continue
        value = getattr(face, name)
        if callable(value):
            out[name] = value
    return out


def offered_classes(face: Any, base: type) -> dict[str, type]:
    out = {}
    for name in dir(face):
        value = getattr(face, name, None)
        if isinstance(value, type) and issubclass(value, base):
            out[name] = value
    return out


def surface_problems(face: Any, api: RealApi) -> list[str]:
    """Every way ``face``'s offered surface differs from the real package (empty = none)."""
    problems: list[str] = []
    for name, func in sorted(offered_functions(face).items()):
        real = api.functions.get(name)
        if real is None:
            problems.append(f"function {name}: not in amdsmi_interface")
            continue
        if name not in api.exported:
            problems.append(f"function {name}: not exported by amdsmi/__init__.py")
        want, got = real_params(real, api), sim_params(func)
        if want != got:
            problems.append(f"function {name}: parameters {got} != real {want}")
    for name, kind in sorted(offered_classes(face, Enum).items()):
        real_members = api.enums.get(name)
        if real_members is None:
            problems.append(f"enum {name}: not in amdsmi_interface")
            continue
        sim_members = {m: int(v.value) for m, v in kind.__members__.items()}
        for member, value in sorted(sim_members.items()):
            if member not in real_members:
                problems.append(f"enum {name}.{member}: no such member in the real enum")
            elif real_members[member] != value:
                problems.append(
                    f"enum {name}.{member}: value {value} != real {real_members[member]}"
                )
        for member in sorted(set(real_members) - set(sim_members)):
            problems.append(f"enum {name}.{member}: missing from the simulator")
    for name, kind in sorted(offered_classes(face, BaseException).items()):
        real_cls = api.exceptions.get(name)
        if real_cls is None:
            problems.append(f"exception {name}: not in amdsmi_exception")
            continue
        real_bases = [_name(b) for b in real_cls.bases]
        sim_bases = [b.__name__ for b in kind.__bases__]
        if real_bases != sim_bases:
            problems.append(f"exception {name}: bases {sim_bases} != real {real_bases}")
        init = next(
            (f for f in real_cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"),
            None,
        )
        if init is not None:
            want, got = real_params(init, api), sim_params(kind.__init__)[1:]
            if want != got:
                problems.append(f"exception {name}: __init__ {got} != real {want}")
    for name in sorted(set(api.exceptions) - set(offered_classes(face, BaseException))):
        problems.append(f"exception {name}: missing from the simulator")
    wrapper = getattr(face, "amdsmi_wrapper", None)
    if not isinstance(wrapper, ModuleType):
        problems.append("amdsmi_wrapper: not offered")
    else:
        for name in sorted(dir(wrapper)):
            value = getattr(wrapper, name)
            if not name.startswith("AMDSMI_") or not isinstance(value, int):
                continue
            if name not in api.constants:
                problems.append(f"constant {name}: not in amdsmi_wrapper")
            elif api.constants[name] != value:
                problems.append(f"constant {name}: {value} != real {api.constants[name]}")
    return problems


# ---------------------------------------------------------------------------------- result keys
def expected_shape(func: ast.FunctionDef, api: RealApi) -> Any:
    """The dict shape a real function returns: {key: nested shape or None}, ("list", shape),
    or None when it returns no dict at all."""
    for ret in _returns(func):
        shape = _shape_of_expr(ret, func, api)
        if shape is not None:
            return shape
    return None


def _returns(func: ast.FunctionDef) -> list[ast.expr]:
    out = []
    for node in ast.walk(func):
        if isinstance(node, ast.Return) and node.value is not None:
            out.append(node.value)
    return out


def _shape_of_expr(node: ast.expr, func: ast.FunctionDef, api: RealApi) -> Any:
    if isinstance(node, ast.Dict):
        return _dict_shape(node, func, api)
    if isinstance(node, ast.ListComp) and isinstance(node.elt, ast.Dict):
        return ("list", _dict_shape(node.elt, func, api))
    if isinstance(node, ast.Name):
        return name_shape(node.id, func, api)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        helper = api.helpers.get(node.func.id)
        if helper is not None:
            return expected_shape(helper, api)
    return None


def _dict_shape(node: ast.Dict, func: ast.FunctionDef, api: RealApi) -> dict[str, Any] | None:
    if not node.keys or not all(
        isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys
    ):
        return None
    shape: dict[str, Any] = {}
    for key, value in zip(node.keys, node.values, strict=True):
        assert isinstance(key, ast.Constant)
        shape[key.value] = _shape_of_expr(value, func, api) if not _is_call(value) else None
    return shape


def _is_call(node: ast.expr) -> bool:
    return isinstance(node, ast.Call)


def name_shape(name: str, func: ast.FunctionDef, api: RealApi) -> Any:
    shape: Any = None
    appended: Any = None
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == name:
                    if isinstance(node.value, ast.Dict):
                        shape = _dict_shape(node.value, func, api)
                elif (
                    isinstance(target, ast.Subscript)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == name
                    and isinstance(target.slice, ast.Constant)
                    and isinstance(target.slice.value, str)
                    and isinstance(shape, dict)
                ):
                    shape.setdefault(target.slice.value, None)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "append"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == name
            and node.args
            and isinstance(node.args[0], ast.Dict)
        ):
            appended = _dict_shape(node.args[0], func, api)
    if shape is not None:
        return shape
    if appended is not None:
        return ("list", appended)
    return None


def shape_problems(where: str, value: Any, expected: Any) -> list[str]:
    """How ``value`` differs from the real shape (keys only; nested dicts and lists too)."""
    if expected is None:
        return []
    if isinstance(expected, tuple):
        if not isinstance(value, list):
            return [f"{where}: expected a list of dicts, got {type(value).__name__}"]
        if not value:
            return [f"{where}: empty list — cannot check its items' keys"]
        out = []
        for i, item in enumerate(value):
            out += shape_problems(f"{where}[{i}]", item, expected[1])
        return out
    if not isinstance(value, dict):
        return [f"{where}: expected a dict, got {type(value).__name__}"]
    out = []
    missing = sorted(set(expected) - set(value))
    extra = sorted(set(value) - set(expected))
    if missing:
        out.append(f"{where}: missing keys {missing}")
    if extra:
        out.append(f"{where}: keys the real function never builds {extra}")
    if list(value) != [k for k in expected if k in value] and not missing and not extra:
        out.append(f"{where}: key order differs from the real function")
    for key, sub in expected.items():
        if key in value:
            out += shape_problems(f"{where}[{key!r}]", value[key], sub)
    return out
