"""Strict YAML configuration: the loader that keeps line marks, base model, Secret and Duration.

Every config-like file (fleetd.yaml, rule packs, scenarios) goes through ``load_yaml`` and
``validate``: unknown keys and wrong types are errors naming file, line and key, and every
problem is reported at once. Subsystems define their own section models on ``StrictModel``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    GetCoreSchemaHandler,
    ValidationError,
    model_validator,
)
from pydantic_core import core_schema

from fleetd.errors import ConfigError, Problem

Path_ = tuple[str | int, ...]
Marks = dict[Path_, tuple[int, int]]
"""Where each key (and each list item) of a YAML document starts: path → (line, col), 1-based."""

M = TypeVar("M", bound=BaseModel)


# ---------------------------------------------------------------------------------- YAML with marks
def load_yaml(text: str, filename: str) -> tuple[Any, Marks]:
    """Parse YAML into plain Python data plus line marks; syntax errors name file and line."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        col = mark.column + 1 if mark is not None else None
        reason = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([Problem(filename, line, col, "", f"invalid YAML: {reason}")]) from None
    if node is None:
        return None, {}
    marks: Marks = {}
    problems: list[Problem] = []
    loader = yaml.SafeLoader("")
    data = _construct(node, (), marks, problems, loader, filename)
    if problems:
        raise ConfigError(problems)
    return data, marks


def _construct(
    node: yaml.Node,
    path: Path_,
    marks: Marks,
    problems: list[Problem],
    loader: yaml.SafeLoader,
    filename: str,
) -> Any:
    marks.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str | int | float | bool) or key is None:
                problems.append(_node_problem(filename, key_node, path, "keys must be scalars"))
                continue
            key = str(key)
            child = (*path, key)
            if key in result:
                problems.append(_node_problem(filename, key_node, child, "duplicate key"))
            marks[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            result[key] = _construct(value_node, child, marks, problems, loader, filename)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [
            _construct(item, (*path, i), marks, problems, loader, filename)
            for i, item in enumerate(node.value)
        ]
    return loader.construct_object(node, deep=True)


def _node_problem(filename: str, node: yaml.Node, path: Path_, message: str) -> Problem:
    return Problem(
        filename, node.start_mark.line + 1, node.start_mark.column + 1, dotted(path), message
    )


def dotted(path: Path_) -> str:
    """``("alerting", "receivers", 0, "url")`` → ``alerting.receivers[0].url``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def mark_for(marks: Marks, path: Path_) -> tuple[int | None, int | None]:
    """The mark of ``path`` or of its nearest ancestor that has one."""
    probe = tuple(path)
    while probe:
        if probe in marks:
            return marks[probe]
        probe = probe[:-1]
    return marks.get((), (None, None))


def validate(model: type[M], data: Any, marks: Marks, filename: str, base: Path_ = ()) -> M:
    """Validate ``data`` against ``model``; every pydantic error becomes a file:line Problem."""
    try:
        return model.model_validate({} if data is None else data)
    except ValidationError as exc:
        raise ConfigError(problems_from(exc, marks, filename, base)) from None


def problems_from(
    exc: ValidationError, marks: Marks, filename: str, base: Path_ = ()
) -> list[Problem]:
    """Turn pydantic errors into Problems that point at the offending key."""
    problems = []
    for err in exc.errors(include_url=False, include_input=False):
        loc: Path_ = tuple(p for p in err["loc"] if isinstance(p, str | int))
        # pydantic may append union-member or validator tags to loc: trim to a real key
        path = (*base, *loc)
        if err["type"] != "missing":
            while len(path) > len(base) and path not in marks:
                path = path[:-1]
        line, col = mark_for(marks, path)
        message = _message(err)
        problems.append(Problem(filename, line, col, dotted(path), message))
    return problems


def _message(err: Any) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def read_text(path: str | Path) -> str:
    """A config, rule or inventory file's text; ConfigError naming it when it cannot be
    read or is not UTF-8 (never a traceback)."""
    filename = str(path)
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            [Problem(filename, None, None, "", f"cannot read: {exc.strerror}")]
        ) from None
    except UnicodeDecodeError:
        raise ConfigError([Problem(filename, None, None, "", "not UTF-8 text")]) from None


def load_file(model: type[M], path: str | Path) -> M:
    """Read, parse and validate one YAML file against ``model``."""
    filename = str(path)
    text = read_text(path)
    data, marks = load_yaml(text, filename)
    return validate(model, data, marks, filename)


# ---------------------------------------------------------------------------------- value types
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: object) -> float:
    """``"90s"``, ``"5m"``, ``"1h30m"``, ``"250ms"`` or a number of seconds → seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or text like '30s', '5m', '1h'")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        pos = 0
        total = 0.0
        for match in _DURATION_PART.finditer(text):
            if match.start() != pos:
                break
            total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            pos = match.end()
        if text and pos == len(text):
            return total
    raise ValueError(f"invalid duration {value!r}: use seconds or text like '30s', '5m', '1h30m'")


def format_duration(seconds: float) -> str:
    """Seconds → the shortest duration text, e.g. 300 → ``5m``."""
    if seconds == 0:
        return "0s"
    out = ""
    rest = seconds
    for unit in ("d", "h", "m", "s"):
        size = _UNIT_SECONDS[unit]
        if rest >= size:
            count = int(rest // size)
            out += f"{count}{unit}"
            rest -= count * size
    if rest > 1e-9:
        out += f"{round(rest * 1000)}ms"
    return out


Duration = Annotated[float, BeforeValidator(parse_duration)]


class Secret:
    """A value that must never be shown: it prints as ``<secret>`` everywhere.

    Call ``reveal()`` only at the point of use (an HTTP header, a payload field).
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<secret>"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __bool__(self) -> bool:
        return bool(self._value)

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        def convert(value: Any) -> Secret:
            if isinstance(value, Secret):
                return value
            if isinstance(value, str):
                return Secret(value)
            raise ValueError("must be text")

        return core_schema.no_info_plain_validator_function(
            convert,
            serialization=core_schema.plain_serializer_function_ser_schema(lambda _: "<secret>"),
        )


def _secret_fields(model: type[BaseModel]) -> list[str]:
    names = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if annotation is Secret or (
            hasattr(annotation, "__args__") and Secret in getattr(annotation, "__args__", ())
        ):
            names.append(name)
    return names


class StrictModel(BaseModel):
    """Base of every config section: unknown keys are errors, values are frozen.

    A ``Secret`` field ``x`` may instead be given as ``x_file`` (path to a file holding it)
    or ``x_env`` (name of an environment variable), so secrets stay out of the YAML.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _resolve_secret_sources(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        names = _secret_fields(cls)
        if not names:
            return data
        data = dict(data)
        for name in names:
            sources = [k for k in (f"{name}_file", f"{name}_env") if k in data]
            if len(sources) + (name in data) > 1:
                raise ValueError(f"give only one of {name}, {name}_file, {name}_env")
            for key in sources:
                where = data.pop(key)
                data[name] = _read_secret_source(key, where)
        return data


def _read_secret_source(key: str, where: object) -> Secret:
    if not isinstance(where, str) or not where:
        raise ValueError(f"{key} must be a non-empty string")
    if key.endswith("_env"):
        value = os.environ.get(where)
        if value is None:
            raise ValueError(f"{key}: environment variable {where} is not set")
        return Secret(value)
    try:
        return Secret(Path(where).read_text(encoding="utf-8").strip())
    except OSError as exc:
        raise ValueError(f"{key}: cannot read {where}: {exc.strerror}") from None
