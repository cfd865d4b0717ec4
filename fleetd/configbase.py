"""Strict YAML configuration: the loader that keeps line marks, base model, Secret and Duration.

Every config-like file (fleetd.yaml, rule packs, scenarios) goes through ``load_yaml`` and
``validate``: unknown keys and wrong types are errors naming file, line and key, and every
problem is reported at once. Subsystems define their own section models on ``StrictModel``.

The loader is bounded, so a hostile or broken file costs little time and memory and never
a traceback: at most ``MAX_FILE_BYTES`` of UTF-8 text, ``MAX_DEPTH`` levels of nesting,
``MAX_ALIASES`` alias uses nested at most ``MAX_ALIAS_DEPTH`` deep, and ``MAX_NODES`` values
once aliases are expanded (a "billion laughs" file stops there, at the alias that crosses
it). YAML merge keys (``<<: *defaults``) are supported: explicit keys win over merged ones,
and earlier sources of ``<<: [*a, *b]`` over later ones.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    GetCoreSchemaHandler,
    HttpUrl,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import core_schema

from fleetd.errors import ConfigError, Problem

Path_ = tuple[str | int, ...]
Marks = dict[Path_, tuple[int, int]]
"""Where each key (and each list item) of a YAML document starts: path → (line, col), 1-based."""

M = TypeVar("M", bound=BaseModel)
F = TypeVar("F", bound=Callable[..., Any])

MAX_FILE_BYTES = 1024 * 1024
"""Largest config or rule file read (the annotated example is ~20 KB, the largest pack ~13 KB)."""
MAX_DEPTH = 50
"""Deepest nesting of mappings and lists (a routing tree 20 routes deep needs ~45)."""
MAX_ALIASES = 1000
"""Alias uses (``*name``, ``<<: *name``) in one document."""
MAX_ALIAS_DEPTH = 5
"""How deep aliases may nest: an anchored value holding an alias of a value holding ... ."""
MAX_NODES = 20_000
"""Values (scalars, mappings, lists) in one document once aliases are expanded (the example
has ~700, the largest rule pack ~1500)."""

_MERGE_TAG = "tag:yaml.org,2002:merge"
_SCALAR_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}"
    for name in ("null", "bool", "int", "float", "str", "timestamp", "binary")
)
_BOOL_TAG = "tag:yaml.org,2002:bool"
_MAP_TAGS = frozenset({"!", "tag:yaml.org,2002:map"})
_SEQ_TAGS = frozenset({"!", "tag:yaml.org,2002:seq"})
_NON_PRINTABLE = re.compile("[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_UTF16_32_BOMS = (
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\xfe\xff", "UTF-16"),
    (b"\xff\xfe", "UTF-16"),
)
_Parser: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's events when built in
_RETELL_BYTES = 256 * 1024  # a syntax error in a file this small is told by the Python parser


# ---------------------------------------------------------------------------------- YAML with marks
def load_yaml(
    text: str, filename: str, *, words: frozenset[Path_] = frozenset()
) -> tuple[Any, Marks]:
    """Parse YAML into plain Python data plus line marks; every problem names file and line.

    Bounded in size, depth and alias expansion (see the module docstring); raises
    ``ConfigError`` listing every problem found. At the paths in ``words`` a YAML 1.1 boolean
    stays the word written (``on``, ``yes``, ``true``): a field whose values are words, such
    as ``remediation.mode``, must tell ``on`` from ``yes``.
    """
    problems: list[Problem] = []
    if len(text) > MAX_FILE_BYTES:
        raise ConfigError(
            [Problem(filename, None, None, "", f"larger than {MAX_FILE_BYTES // 1024} KiB")]
        )
    bad = _NON_PRINTABLE.search(text)
    if bad is not None:
        line, col = _position(text, bad.start())
        char = f"U+{ord(bad.group()):04X}"
        what = "a NUL byte" if bad.group() == "\0" else f"control character {char}"
        problems.append(Problem(filename, line, col, "", f"{what} is not allowed in YAML text"))
        raise ConfigError(problems)
    builder = _Builder(text, filename, words=words)
    data = builder.build(_Parser)
    if builder.syntax_error and _Parser is not yaml.SafeLoader and len(text) <= _RETELL_BYTES:
        # libyaml's events are fast; on a syntax error the pure Python parser tells it again,
        # in its own words, which say more and are the same on every machine
        builder = _Builder(text, filename, words=words)
        data = builder.build(yaml.SafeLoader)
    for path in words:  # a boolean that came by an alias, a ``!!bool`` tag or a merge
        if isinstance(_at_path(data, path), bool):
            at_line, at_col = mark_for(builder.marks, path)
            message = "a YAML boolean came here by an alias, tag or merge: write the word itself"
            builder.problems.append(Problem(filename, at_line, at_col, dotted(path), message))
    if builder.problems:
        raise ConfigError(builder.problems)
    return data, builder.marks


def _at_path(data: Any, path: Path_) -> Any:
    for part in path:
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def _position(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, col) of character ``offset`` of ``text``."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


class _Stop(Exception):
    """The document cannot be read further (a syntax error or a bound crossed)."""


@dataclass(slots=True)
class _Anchor:
    value: Any
    size: int
    alias_depth: int
    marks: list[tuple[Path_, tuple[int, int]]]  # relative to the anchored value


@dataclass
class _Builder:
    """Plain data and marks straight from the parser's events, within the bounds."""

    text: str
    filename: str
    words: frozenset[Path_] = frozenset()
    marks: Marks = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    _log: list[tuple[Path_, tuple[int, int]]] = field(default_factory=list)
    _anchors: dict[str, _Anchor] = field(default_factory=dict)
    _open_anchors: set[str] = field(default_factory=set)
    _nodes: int = 0
    _aliases: int = 0
    _depth: int = 0
    _merging: int = 0  # inside a ``<<`` value: marks never replace those already set
    syntax_error: bool = False
    _parser: Any = None

    def build(self, parser: Any) -> Any:
        self._resolver = yaml.resolver.Resolver()
        self._constructor = yaml.constructor.SafeConstructor()
        self._parser = parser(self.text)
        try:
            return self._document()
        except _Stop:
            return None
        except yaml.YAMLError as exc:  # a syntax error found by the parser
            if "maximum nesting depth" in str(exc):  # libyaml's own bound (1000), read ahead
                mark = getattr(exc, "problem_mark", None)
                line = mark.line + 1 if mark is not None else None
                col = mark.column + 1 if mark is not None else None
                message = f"nested deeper than {MAX_DEPTH} levels"
                self.problems.append(Problem(self.filename, line, col, "", message))
                return None
            self.syntax_error = True
            self._yaml_error(exc)
            return None
        finally:
            self._parser.dispose()

    # -- events
    def _next(self) -> Any:
        return self._parser.get_event()

    def _peek(self) -> Any:
        return self._parser.peek_event()

    def _is(self, kind: type) -> bool:
        return bool(self._parser.check_event(kind))

    def _yaml_error(self, exc: yaml.YAMLError) -> None:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        col = mark.column + 1 if mark is not None else None
        if isinstance(exc, yaml.reader.ReaderError):
            line, col = _position(self.text, exc.position)
        reason = getattr(exc, "problem", None) or str(exc)
        self.problems.append(Problem(self.filename, line, col, "", f"invalid YAML: {reason}"))

    def _problem(self, event: Any, path: Path_, message: str, *, stop: bool = False) -> None:
        line, col = _at(event)
        self.problems.append(Problem(self.filename, line, col, dotted(path), message))
        if stop:
            raise _Stop

    def _mark(self, path: Path_, where: tuple[int, int], *, replace: bool) -> None:
        if replace and not self._merging:
            self.marks[path] = where
        else:
            self.marks.setdefault(path, where)
        if self._open_anchors:  # only an anchored value's marks are copied to its aliases
            self._log.append((path, where))

    def _count(self, event: Any, path: Path_, size: int) -> None:
        self._nodes += size
        if self._nodes > MAX_NODES:
            self._problem(
                event,
                path,
                f"more than {MAX_NODES} values once aliases are expanded "
                "(an alias bomb, or a file far larger than a configuration needs)",
                stop=True,
            )

    # -- structure
    def _document(self) -> Any:
        self._next()  # StreamStart
        if self._is(yaml.StreamEndEvent):
            return None
        self._next()  # DocumentStart
        data, _size, _depth = self._node((), record=True)
        self._next()  # DocumentEnd
        if not self._is(yaml.StreamEndEvent):
            event = self._peek()
            self._problem(event, (), "a second YAML document (---): a file holds one")
        return data

    def _node(self, path: Path_, *, record: bool) -> tuple[Any, int, int]:
        """(value, expanded size, alias depth) of the next node, placed at ``path``."""
        event = self._next()
        if record:
            self._mark(path, _at(event), replace=False)
        if isinstance(event, yaml.AliasEvent):
            return self._alias(event, path, record=record)
        anchor = event.anchor
        start = len(self._log)
        if anchor is not None:
            self._open_anchors.add(anchor)
        if isinstance(event, yaml.ScalarEvent):
            self._count(event, path, 1)
            value, size, depth = self._scalar(event, path), 1, 0
        elif isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            self._count(event, path, 1)
            self._depth += 1
            if self._depth > MAX_DEPTH:
                self._problem(event, path, f"nested deeper than {MAX_DEPTH} levels", stop=True)
            if isinstance(event, yaml.SequenceStartEvent):
                value, size, depth = self._sequence(event, path, record=record)
            else:
                value, size, depth = self._mapping(event, path, record=record)
            self._depth -= 1
        else:  # pragma: no cover - the parser only yields the events above here
            self._problem(event, path, "unexpected YAML event", stop=True)
        if anchor is not None:
            self._open_anchors.discard(anchor)
            relative = [(p[len(path) :], w) for p, w in self._log[start:] if p[: len(path)] == path]
            self._anchors[anchor] = _Anchor(value, size, depth, relative)
        return value, size, depth

    def _alias(self, event: Any, path: Path_, *, record: bool) -> tuple[Any, int, int]:
        name = event.anchor
        target = self._anchors.get(name)
        if target is None:
            if name in self._open_anchors:
                message = f"alias *{name} is recursive: it is used inside its own anchor"
            else:
                message = f"alias *{name} has no anchor &{name} before it"
            self._problem(event, path, message, stop=True)
            raise _Stop  # pragma: no cover - _problem stopped
        self._aliases += 1
        if self._aliases > MAX_ALIASES:
            self._problem(event, path, f"more than {MAX_ALIASES} aliases", stop=True)
        depth = target.alias_depth + 1
        if depth > MAX_ALIAS_DEPTH:
            message = f"aliases nested more than {MAX_ALIAS_DEPTH} deep"
            self._problem(event, path, message, stop=True)
        self._count(event, path, target.size)
        if record:
            for relative, where in target.marks:
                if relative:
                    self._mark((*path, *relative), where, replace=True)
        return target.value, target.size, depth

    def _scalar(self, event: Any, path: Path_) -> Any:
        tag = event.tag
        if tag is None or tag == "!":
            tag = self._resolve(event)
        if tag not in _SCALAR_TAGS:
            self._problem(event, path, f"unsupported YAML tag {_short(tag)}")
            return event.value
        if tag == _BOOL_TAG and event.tag is None and path in self.words:
            return event.value
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        try:
            return self._constructor.yaml_constructors[tag](self._constructor, node)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
            reason = getattr(exc, "problem", None) or str(exc)
            self._problem(event, path, f"invalid {_short(tag)} value: {reason}")
            return None

    def _sequence(self, event: Any, path: Path_, *, record: bool) -> tuple[list[Any], int, int]:
        if event.tag is not None and event.tag not in _SEQ_TAGS:
            self._problem(event, path, f"unsupported YAML tag {_short(event.tag)}")
        items: list[Any] = []
        size, depth = 1, 0
        while not self._is(yaml.SequenceEndEvent):
            value, n, d = self._node((*path, len(items)), record=record)
            items.append(value)
            size, depth = size + n, max(depth, d)
        self._next()
        return items, size, depth

    def _mapping(self, event: Any, path: Path_, *, record: bool) -> tuple[dict[str, Any], int, int]:
        if event.tag is not None and event.tag not in _MAP_TAGS:
            self._problem(event, path, f"unsupported YAML tag {_short(event.tag)}")
        result: dict[str, Any] = {}
        merged: list[dict[str, Any]] = []
        merge_seen = False
        size, depth = 1, 0
        while not self._is(yaml.MappingEndEvent):
            key_event = self._peek()
            if self._is_merge_key(key_event):
                self._next()
                self._count(key_event, path, 1)
                if merge_seen:
                    self._problem(key_event, (*path, "<<"), "duplicate key")
                merge_seen = True
                sources, n, d = self._merge_value(path, record=record)
                merged.extend(sources)
                size, depth = size + 1 + n, max(depth, d)
                continue
            key, n, d = self._node((*path, "<key>"), record=False)
            size, depth = size + n, max(depth, d)
            text = self._key_text(key_event, key)
            if text is None:
                self._problem(key_event, path, "keys must be scalars")
                _, n, d = self._node((*path, "<value>"), record=False)
                size, depth = size + n, max(depth, d)
                continue
            child = (*path, text)
            if text in result:
                self._problem(key_event, child, "duplicate key")
            if record:
                self._mark(child, _at(key_event), replace=True)
            value, n, d = self._node(child, record=record)
            result[text] = value
            size, depth = size + n, max(depth, d)
        self._next()
        if merged:
            combined: dict[str, Any] = {}
            for source in merged:
                for key, value in source.items():
                    combined.setdefault(key, value)
            combined.update(result)
            result = combined
        return result, size, depth

    def _resolve(self, event: Any) -> str:
        """The tag YAML 1.1 gives an untagged scalar (``1`` an int, ``<<`` a merge key)."""
        tag: str = self._resolver.resolve(  # type: ignore[no-untyped-call]
            yaml.ScalarNode, event.value, event.implicit
        )
        return tag

    def _is_merge_key(self, event: Any) -> bool:
        return (
            isinstance(event, yaml.ScalarEvent)
            and event.tag is None
            and self._resolve(event) == _MERGE_TAG
        )

    @staticmethod
    def _key_text(event: Any, key: Any) -> str | None:
        """A mapping key as text: a plain scalar as written (so ``on:`` stays ``on``)."""
        if key is None or isinstance(key, list | dict):
            return None
        if isinstance(event, yaml.ScalarEvent) and not event.style and event.tag is None:
            return str(event.value)
        if isinstance(key, str | int | float | bool):
            return str(key)
        return None

    def _merge_value(self, path: Path_, *, record: bool) -> tuple[list[dict[str, Any]], int, int]:
        """The mappings a ``<<`` key merges: its keys land in the mapping at ``path``."""
        self._merging += 1
        try:
            event = self._peek()
            values: list[tuple[Any, Any]] = []
            size, depth = 0, 0
            if isinstance(event, yaml.SequenceStartEvent) and event.anchor is None:
                self._next()
                self._depth += 1
                if self._depth > MAX_DEPTH:
                    self._problem(event, path, f"nested deeper than {MAX_DEPTH} levels", stop=True)
                while not self._is(yaml.SequenceEndEvent):
                    item_event = self._peek()
                    value, n, d = self._node(path, record=record)
                    values.append((item_event, value))
                    size, depth = size + n, max(depth, d)
                self._next()
                self._depth -= 1
            else:
                value, size, depth = self._node(path, record=record)
                values.append((event, value))
            sources: list[dict[str, Any]] = []
            for where, value in values:
                aliased_list = isinstance(event, yaml.AliasEvent) and isinstance(value, list)
                items = value if aliased_list else [value]
                if all(isinstance(item, dict) for item in items):  # also <<: *list_of_maps
                    sources.extend(items)
                else:
                    self._problem(
                        where,
                        (*path, "<<"),
                        "a merge key (<<) takes a mapping, an alias of one, or a list of them",
                    )
            return sources, size, depth
        finally:
            self._merging -= 1


def _at(event: Any) -> tuple[int, int]:
    mark = event.start_mark
    return mark.line + 1, mark.column + 1


def _short(tag: str) -> str:
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org") else tag


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


# ---------------------------------------------------------------------------------- validation
def validate(model: type[M], data: Any, marks: Marks, filename: str, base: Path_ = ()) -> M:
    """Validate ``data`` against ``model``; every pydantic error becomes a file:line Problem.

    Every problem comes out at once: pydantic skips a model's own checks (``model_validator``)
    when one of its fields is wrong, so after a failure the data is validated again without
    the wrong values, and the checks that then speak up are reported too. A check of a model
    whose own field was wrong is still left out (it may have read that field); checks across
    fields that should run anyway are field validators reading ``info.data``.
    """
    if data is None:
        data = {}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = _errors(exc)
    problems = [_problem_from(err, marks, filename, base) for err in errors]
    seen = {(p.key, p.message) for p in problems}
    for err in _hidden_checks(model, data, errors):
        problem = _problem_from(err, marks, filename, base)
        if (problem.key, problem.message) not in seen:
            seen.add((problem.key, problem.message))
            problems.append(problem)
    raise ConfigError(problems)


def _errors(exc: ValidationError) -> list[dict[str, Any]]:
    out = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = tuple(p for p in err["loc"] if isinstance(p, str | int))
        out.append({**err, "loc": loc})
    return out


_MAX_RETRIES = 3


def _hidden_checks(
    model: type[BaseModel], data: Any, errors: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Errors of checks that pydantic skipped because of ``errors``.

    The wrong values (never a whole section, never a missing key) are left out and the data
    validated again. What fails then is reported unless a default may have stood in for a
    left-out value it read: a check of a mapping that lost a key, or of a key beside one
    (a field check reads the fields before it). A list that lost an item has no stand-in,
    so its own check (unique GPU indexes) is reported.
    """
    found: list[dict[str, Any]] = []
    dropped: list[Path_] = []
    for _ in range(_MAX_RETRIES):
        fresh = [p for p in (_droppable(data, err) for err in errors) if p and p not in dropped]
        if not fresh:
            break
        dropped.extend(fresh)
        repaired, remap = _without(data, dropped)
        try:
            model.model_validate(repaired)
        except ValidationError as exc:
            stand_ins = {p[:-1] for p in dropped if isinstance(p[-1], str)}
            errors = []
            for err in _errors(exc):
                err = {**err, "loc": remap(err["loc"])}
                errors.append(err)
                loc = err["loc"]
                checked = err["type"] in ("value_error", "assertion_error")
                quiet = loc in stand_ins or loc[:-1] in stand_ins or loc in dropped
                if checked and not quiet:
                    found.append(err)
            continue
        break
    return found


def _droppable(data: Any, err: dict[str, Any]) -> Path_:
    """Where the wrong value of ``err`` is in ``data``; () for a missing key or a section."""
    if err["type"] == "missing":
        return ()
    at = _existing(data, err["loc"])
    if isinstance(_value_at(data, at), dict) and err["type"] in ("value_error", "assertion_error"):
        return ()  # a section's own check: its fields are what is wrong
    return at


def _value_at(data: Any, path: Path_) -> Any:
    node = data
    for part in path:
        node = node[part]
    return node


def _existing(data: Any, loc: Path_) -> Path_:
    """The longest prefix of ``loc`` that names a value in ``data`` (the wrong value)."""
    node = data
    out: list[str | int] = []
    for part in loc:
        in_map = isinstance(node, dict) and isinstance(part, str) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if not (in_map or in_list):
            break
        node = node[part]
        out.append(part)
    return tuple(out)


def _without(data: Any, paths: Sequence[Path_]) -> tuple[Any, Callable[[Path_], Path_]]:
    """``data`` without the values at ``paths``, and the map of new locations to old ones
    (a list that lost an item has its later items' indexes shifted)."""
    kept_indexes: dict[Path_, list[int]] = {}
    drop = set(paths)

    def copy(node: Any, where: Path_) -> Any:
        if isinstance(node, dict):
            return {k: copy(v, (*where, k)) for k, v in node.items() if (*where, k) not in drop}
        if isinstance(node, list):
            keep = [i for i in range(len(node)) if (*where, i) not in drop]
            kept_indexes[where] = keep
            return [copy(node[i], (*where, i)) for i in keep]
        return node

    repaired = copy(data, ())

    def remap(loc: Path_) -> Path_:
        old: list[str | int] = []
        for part in loc:
            keep = kept_indexes.get(tuple(old))
            if keep is not None and isinstance(part, int) and 0 <= part < len(keep):
                part = keep[part]
            old.append(part)
        return tuple(old)

    return ({} if repaired is None else repaired), remap


def problems_from(
    exc: ValidationError, marks: Marks, filename: str, base: Path_ = ()
) -> list[Problem]:
    """Turn pydantic errors into Problems that point at the offending key."""
    return [_problem_from(err, marks, filename, base) for err in _errors(exc)]


class KeyProblem(ValueError):
    """A model's own check that faults one of the keys it was given (``token_file``): the
    problem is put at that key's line, not at the model's."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def _problem_from(err: dict[str, Any], marks: Marks, filename: str, base: Path_) -> Problem:
    # pydantic may append union-member or validator tags to loc: trim to a real key
    path: Path_ = (*base, *err["loc"])
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, KeyProblem):
        path = (*path, cause.key)
    if err["type"] != "missing":
        while len(path) > len(base) and path not in marks:
            path = path[:-1]
    line, col = mark_for(marks, path)
    return Problem(filename, line, col, dotted(path), _message(err))


def _message(err: Any) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")


# ---------------------------------------------------------------------------------- files
def read_text(path: str | Path) -> str:
    """A config, rule or inventory file's text; ConfigError naming it (with the line where
    it can) when it cannot be read, is too large or is not UTF-8 (never a traceback).

    A UTF-8 byte order mark at the start is allowed (YAML allows it); UTF-16 and UTF-32 are not.
    """
    filename = str(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(
            [Problem(filename, None, None, "", f"cannot read: {exc.strerror}")]
        ) from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(
            [Problem(filename, None, None, "", f"larger than {MAX_FILE_BYTES // 1024} KiB")]
        )
    for bom, encoding in _UTF16_32_BOMS:
        if raw.startswith(bom):
            message = f"{encoding} text (byte order mark): save the file as UTF-8"
            raise ConfigError([Problem(filename, 1, 1, "", message)])
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        good = raw[: exc.start].decode("utf-8", errors="replace")
        line, col = _position(good, len(good))
        byte = raw[exc.start]
        message = f"not UTF-8 text (byte 0x{byte:02x}): save the file as UTF-8"
        raise ConfigError([Problem(filename, line, col, "", message)]) from None


def end_problem(text: str, filename: str) -> Problem | None:
    """A file whose last line has no line break looks cut short (a partial write or copy):
    every editor and ``echo`` end a file with one, and a value cut mid-line can still be
    valid (``15s`` cut to ``1``), so it is an error, at the end of the file."""
    if not text or text.endswith(("\n", "\r")):
        return None
    line, col = _position(text, len(text))
    return Problem(
        filename,
        line,
        col,
        "",
        "the file ends without a line break, as if cut short; if it is complete, end the "
        "last line with a newline",
    )


def read_whole(path: str | Path) -> tuple[str, list[Problem]]:
    """``read_text``, and the problem of a file cut short (``end_problem``) if it is: the
    caller reports it with every problem it finds in the text."""
    text = read_text(path)
    end = end_problem(text, str(path))
    return text, [] if end is None else [end]


def load_file(
    model: type[M],
    path: str | Path,
    *,
    required: Sequence[Path_] = (),
    top: str = "",
    words: frozenset[Path_] = frozenset(),
) -> M:
    """Read, parse and validate one YAML file against ``model``, every problem at once.

    ``required`` names keys that a file must have even where the model has defaults (its
    built-in use stays lenient). An empty file is an error when anything is required, so is
    a file cut short (see ``end_problem``). With ``top`` (e.g. "a mapping of sections"), a
    document that is not a mapping says so in those words. ``words``: see ``load_yaml``.
    """
    filename = str(path)
    text, problems = read_whole(path)
    try:
        data, marks = load_yaml(text, filename, words=words)
    except ConfigError as exc:
        raise ConfigError([*problems, *exc.problems]) from None
    if data is None and required:
        wanted = ", ".join(f"{dotted(p)}:" for p in required if len(p) == 1)
        problems.append(
            Problem(filename, 1, 1, "", f"the file is empty: it needs at least {wanted}")
        )
        raise ConfigError(problems)
    if top and data is not None and not isinstance(data, dict):
        line, col = mark_for(marks, ())
        kind = "a list" if isinstance(data, list) else f"the single value {str(data)[:40]!r}"
        problems.append(Problem(filename, line, col, "", f"the file must be {top}, not {kind}"))
        raise ConfigError(problems)
    missing = _missing(data, marks, filename, required) if isinstance(data, dict) else []
    try:
        result = validate(model, data, marks, filename)
    except ConfigError as exc:
        raise ConfigError([*problems, *exc.problems, *missing]) from None
    if problems or missing:
        raise ConfigError([*problems, *missing])
    return result


def _missing(
    data: dict[str, Any], marks: Marks, filename: str, required: Sequence[Path_]
) -> list[Problem]:
    out = []
    for path in required:
        parent: Any = data
        for part in path[:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and path[-1] not in parent:
            line, col = mark_for(marks, path[:-1])
            message = "required in a config file" + (" (a section)" if len(path) == 1 else "")
            out.append(Problem(filename, line, col, dotted(path), message))
    return out


# ---------------------------------------------------------------------------------- value types
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_DURATION = 3650 * 86400.0
"""No duration anywhere is longer than ten years (per-field limits are ``Span``)."""


def parse_duration(value: object) -> float:
    """``"90s"``, ``"5m"``, ``"1h30m"``, ``"250ms"`` or a number of seconds → seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or text like '30s', '5m', '1h'")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError("a duration must be a finite number of seconds")
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return _capped(float(value))
    if isinstance(value, str):
        text = value.strip()
        pos = 0
        total = 0.0
        for match in _DURATION_PART.finditer(text):
            if match.start() != pos or len(match.group(1)) > 12:
                break
            total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            pos = match.end()
        if text and pos == len(text):
            return _capped(total)
    raise ValueError(f"invalid duration {value!r}: use seconds or text like '30s', '5m', '1h30m'")


def _capped(seconds: float) -> float:
    if seconds > MAX_DURATION:
        raise ValueError(f"a duration cannot be longer than {format_duration(MAX_DURATION)}")
    return seconds


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


@dataclass(frozen=True, slots=True)
class Span:
    """The range of a duration field: ``timeout: Annotated[Duration, Span(0, "5m")]``.

    ``low`` is excluded when ``above`` is set ("greater than 0s"); both ends are seconds or
    duration text. The reference shows it as the field's allowed values.
    """

    low: float | str = 0.0
    high: float | str = MAX_DURATION
    above: bool = False

    @property
    def text(self) -> str:
        low = format_duration(parse_duration(self.low))
        high = format_duration(parse_duration(self.high))
        if self.above:
            return f"more than {low}, at most {high}"
        if parse_duration(self.low) == 0:
            return f"at most {high}"
        return f"{low} to {high}"

    def check(self, value: float) -> float:
        low, high = parse_duration(self.low), parse_duration(self.high)
        if value > high or value < low or (self.above and value == low):
            raise ValueError(f"must be {self.text}")
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))


_HTTP_URL: TypeAdapter[HttpUrl] = TypeAdapter(HttpUrl)
_URL_START = re.compile(r"^https?://[^\s/?#]", re.IGNORECASE)


def check_http_url(value: str) -> str:
    """``value`` if it is an ``http://`` or ``https://`` URL with a host (and a port 1–65535);
    the message never repeats it (it may be a secret)."""
    if not isinstance(value, str) or not _URL_START.match(value) or any(c.isspace() for c in value):
        raise ValueError("must be an http:// or https:// URL with a host")
    try:
        parsed = _HTTP_URL.validate_python(value)
    except ValidationError as exc:
        reason = str(exc.errors(include_url=False, include_input=False)[0]["msg"])
        reason = reason.removeprefix("Input should be a valid URL, ")
        raise ValueError(f"must be an http:// or https:// URL with a host ({reason})") from None
    if parsed.port == 0:
        raise ValueError("must be an http:// or https:// URL with a port from 1 to 65535")
    return value


def check_secret_http_url(value: Secret | None) -> Secret | None:
    """``check_http_url`` for a URL kept as a Secret (a webhook URL holds its token)."""
    if value is not None:
        check_http_url(value.reveal())
    return value


HttpUrlText = Annotated[str, AfterValidator(check_http_url)]
"""An ``http://`` or ``https://`` URL with a host (kept as the text given)."""

_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def check_host(value: str) -> str:
    """An IPv4 or IPv6 address, or a host name (RFC 1123): what a server may bind to."""
    if not isinstance(value, str) or not value:
        raise ValueError("must be an IP address or a host name")
    if re.fullmatch(r"[0-9.]+", value) or ":" in value:
        try:
            ipaddress.ip_address(value.removeprefix("[").removesuffix("]"))
        except ValueError:
            raise ValueError(f"{value[:64]!r} is not a valid IP address") from None
        return value
    labels = value.removesuffix(".").split(".")
    if len(value) > 253 or not all(_HOST_LABEL.match(label) for label in labels):
        raise ValueError(f"{value[:64]!r} is not a valid host name or IP address")
    return value


Host = Annotated[str, AfterValidator(check_host)]


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


CHECKS_ATTRIBUTE = "__fleetd_checks__"


def documents(*checks: str) -> Callable[[F], F]:
    """What a validator enforces, in the words the configuration reference prints (``fleetd
    config reference``, docs/configuration.md). Put it under ``@classmethod``. Every
    validator of a config model carries one (``documents()`` when there is nothing a reader
    needs to know); a test holds that."""

    def mark(func: F) -> F:
        setattr(func, CHECKS_ATTRIBUTE, checks)
        return func

    return mark


class StrictModel(BaseModel):
    """Base of every config section: unknown keys are errors, values are frozen.

    A ``Secret`` field ``x`` may instead be given as ``x_file`` (path to a file holding it)
    or ``x_env`` (name of an environment variable), so secrets stay out of the YAML.
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, use_attribute_docstrings=True
    )

    @model_validator(mode="before")
    @classmethod
    @documents()  # its rule is printed once, in the reference's introduction
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
        raise KeyProblem(key, "must be a non-empty string")
    if key.endswith("_env"):
        value = os.environ.get(where)
        if value is None:
            raise KeyProblem(key, f"environment variable {where} is not set")
        return Secret(value)
    try:
        with open(where, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise KeyProblem(key, f"cannot read {where}: {exc.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise KeyProblem(key, f"{where} is larger than {MAX_FILE_BYTES // 1024} KiB")
    try:
        return Secret(raw.decode("utf-8").strip())
    except UnicodeDecodeError:
        raise KeyProblem(key, f"{where} is not UTF-8 text") from None
