"""Rule files → a ``RuleSet``: shipped packs, then local rules that override or disable them.

One loader for the daemon, ``fleetd rules check`` and reload. It reports every problem in
every file at once as ``file:line:col: key: message``; positions point inside an expression
or template where the problem is. Nothing is half-loaded: any problem raises ``ConfigError``
and the caller keeps whatever rules it had.

A selector on a metric fleetd never writes (``fleetd.collect.catalog.SERIES_NAMES``: a
misspelled name, a metric of another exporter) is a warning, not a problem: the rule loads
and can never fire. ``RuleSet.unknown`` lists each such selector with where it is written
and the closest name fleetd does write; the check commands print them and exit 1, the daemon
logs them, ``fleetd doctor`` lists the rules. Not an error because a rule pack that loads
today must not stop the daemon from starting, nor a reload from applying, after an upgrade.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fleetd.collect.catalog import METRICS_ONLY, SERIES_NAMES
from fleetd.configbase import (
    Marks,
    Path_,
    dotted,
    load_yaml,
    mark_for,
    read_whole,
    validate,
)
from fleetd.errors import ConfigError, Problem
from fleetd.model import make_labels
from fleetd.rules.ast import Selector, walk
from fleetd.rules.evaluate import Interner
from fleetd.rules.lexer import ExprError
from fleetd.rules.parser import parse_rule_expr
from fleetd.rules.spec import Rule, RuleFileModel, RuleModel, Threshold
from fleetd.rules.templates import Template, TemplateError, compile_template
from fleetd.rules.yamlpos import locate

RULE_FILE_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True, slots=True)
class UnknownMetric:
    """A selector of a rule on a metric name fleetd never writes: the rule can never fire."""

    rule: str
    metric: str
    suggestion: str | None  # the closest name fleetd writes, if one is close
    where: Problem  # file:line:col of the selector, and the warning's text
    source: str = ""  # the rule's file:line (which definition, when a local one replaces it)

    def describe(self) -> str:
        hint = f" (did you mean {self.suggestion}?)" if self.suggestion else ""
        return f"{self.rule} can never fire: {_unreadable(self.metric)} {self.metric}{hint}"


def _unreadable(metric: str) -> str:
    """Why a rule cannot read ``metric``, as the warnings word it."""
    return "only /metrics shows" if metric in METRICS_ONLY else "fleetd never writes"


@dataclass(frozen=True, slots=True)
class RuleFile:
    """One file's rules and the names it disables, each with where it was written."""

    path: str
    rules: tuple[Rule, ...]
    disable: tuple[tuple[str, Problem], ...] = ()  # name, and a Problem stub for its position
    unknown: tuple[UnknownMetric, ...] = ()  # selectors on metrics fleetd never writes
    named: frozenset[str] = frozenset()  # every rule name written, compiled or not


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The rules the engine runs, in evaluation order, and the files they came from."""

    rules: tuple[Rule, ...] = ()
    files: tuple[str, ...] = ()
    disabled: tuple[str, ...] = ()
    unknown: tuple[UnknownMetric, ...] = ()  # warnings: selectors fleetd can never satisfy
    _by_name: dict[str, Rule] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update({rule.name: rule for rule in self.rules})

    def get(self, name: str) -> Rule | None:
        return self._by_name.get(name)

    def __len__(self) -> int:
        return len(self.rules)

    @property
    def warnings(self) -> tuple[Problem, ...]:
        """The warnings of loading (file:line:col: key: message), in file order."""
        return tuple(u.where for u in self.unknown)


@dataclass(frozen=True, slots=True)
class RuleCheck:
    """Everything checking rule files found: the rule set (None when any file has a
    problem, as nothing is half-loaded), every problem, and every warning."""

    rules: RuleSet | None
    problems: tuple[Problem, ...]
    warnings: tuple[UnknownMetric, ...]


def rule_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files named directly, plus every ``*.yaml``/``*.yml`` directly inside named directories."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out.extend(sorted(p for p in path.iterdir() if p.suffix in RULE_FILE_SUFFIXES))
        else:
            out.append(path)
    return out


def load_rule_set(
    packs: Sequence[str | Path],
    local: Sequence[str | Path] = (),
    *,
    runbook_base_url: str = "",
    known_metrics: Collection[str] | None = SERIES_NAMES,
) -> RuleSet:
    """Load shipped ``packs`` then ``local`` rules (files or directories); all problems at once.

    A local rule with a shipped rule's name replaces it in place; ``disable: [Name]`` in any
    file switches a rule off. Names must be unique within the packs and within the local
    rules, and every disabled name must exist. Selectors on a metric not in
    ``known_metrics`` (None: not checked) are warnings, in ``RuleSet.unknown``.
    """
    found = check_rule_set(
        packs, local, runbook_base_url=runbook_base_url, known_metrics=known_metrics
    )
    if found.rules is None:
        raise ConfigError(list(found.problems))
    return found.rules


def check_rule_set(
    packs: Sequence[str | Path],
    local: Sequence[str | Path] = (),
    *,
    runbook_base_url: str = "",
    known_metrics: Collection[str] | None = SERIES_NAMES,
) -> RuleCheck:
    """``load_rule_set`` that returns its problems instead of raising, with the warnings of
    every rule that compiled (for ``fleetd rules check``/``config check`` and reload)."""
    problems: list[Problem] = []
    known = _Known(known_metrics)
    pack_files = [_load_or_collect(p, problems, runbook_base_url, known) for p in rule_files(packs)]
    local_paths = rule_files(local)
    local_files = [_load_or_collect(p, problems, runbook_base_url, known) for p in local_paths]
    ordered: dict[str, Rule] = {}
    for group in (pack_files, local_files):
        seen: dict[str, str] = {}
        for loaded in group:
            if loaded is None:
                continue
            for rule in loaded.rules:
                if rule.name in seen:
                    problems.append(_duplicate(rule, seen[rule.name]))
                    continue
                seen[rule.name] = rule.source
                ordered[rule.name] = rule
    loaded_files = [f for f in (*pack_files, *local_files) if f is not None]
    written = set(ordered).union(*(f.named for f in loaded_files))  # a broken rule is named too
    disabled: list[str] = []
    for loaded in loaded_files:
        for name, where in loaded.disable:
            if name not in written:
                problems.append(
                    Problem(
                        where.file,
                        where.line,
                        where.col,
                        where.key,
                        f"no rule named {name!r} to disable{_did_you_mean(name, written)}",
                    )
                )
            disabled.append(name)
    off = set(disabled)
    running = {rule.source for name, rule in ordered.items() if name not in off}
    unknown = tuple(u for f in loaded_files for u in f.unknown if u.source in running)
    if problems:
        return RuleCheck(None, tuple(problems), unknown)
    interner = Interner()
    rules = tuple(_intern(rule, interner) for name, rule in ordered.items() if name not in off)
    files = tuple(str(p) for p in (*rule_files(packs), *local_paths))
    return RuleCheck(RuleSet(rules, files, tuple(sorted(off)), unknown), (), unknown)


class _Known:
    """The metric names a rule may read, and the close ones to suggest for a name that is
    not one of them (sorted once, so a suggestion does not depend on set order)."""

    def __init__(self, names: Collection[str] | None) -> None:
        self.names = None if names is None else frozenset(names)
        self._sorted: list[str] | None = None

    def suggest(self, name: str) -> str | None:
        if self._sorted is None:
            self._sorted = sorted(self.names or ())
        return _closest(name, self._sorted)


def _closest(name: str, choices: Sequence[str]) -> str | None:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.8)
    return close[0] if close else None


def _did_you_mean(name: str, choices: Iterable[str]) -> str:
    close = _closest(name, sorted(choices))
    return f"; did you mean {close!r}?" if close else ""


def _load_or_collect(
    path: Path, problems: list[Problem], runbook_base_url: str, known: _Known
) -> RuleFile | None:
    """The file's rules that compiled and all its ``disable`` names, its problems added to
    ``problems`` (a duplicate name must not hide a misspelled ``disable`` entry); None when
    the file cannot be read or parsed at all."""
    filename = str(path)
    text, read_problems = read_whole(path)
    problems.extend(read_problems)
    try:
        loaded, found = _parse(text, filename, runbook_base_url, known)
    except ConfigError as exc:
        problems.extend(exc.problems)
        return None
    problems.extend(found)
    problems.extend(_empty(loaded, text, filename))
    return loaded


def _intern(rule: Rule, interner: Interner) -> Rule:
    return replace(rule, expr=interner.intern(rule.expr))


def _duplicate(rule: Rule, first: str) -> Problem:
    file, _, line = rule.source.rpartition(":")
    return Problem(
        file,
        int(line) if line.isdigit() else None,
        None,
        "name",
        f"rule {rule.name!r} is already defined at {first}",
    )


def load_rule_file(
    path: str | Path,
    *,
    runbook_base_url: str = "",
    known_metrics: Collection[str] | None = SERIES_NAMES,
) -> RuleFile:
    """Read and compile one rule file; ``ConfigError`` lists every problem in it.

    Read as fleetd.yaml is (bounded, UTF-8, see ``fleetd.configbase``); a file is also wrong
    when it is empty (a site file cut to nothing would silently bring back the shipped rules
    it replaced or disabled) or cut short (its last line has no line break).
    """
    problems: list[Problem] = []
    loaded = _load_or_collect(Path(path), problems, runbook_base_url, _Known(known_metrics))
    if loaded is None or problems:
        raise ConfigError(problems)
    return loaded


def _empty(loaded: RuleFile, text: str, filename: str) -> list[Problem]:
    if not loaded.rules and not loaded.disable and not loaded.named and not text.strip(" \t\r\n"):
        return [
            Problem(filename, 1, 1, "", "the file is empty: a rule file holds rules: or disable:")
        ]
    return []


def parse_rule_text(
    text: str,
    filename: str,
    *,
    runbook_base_url: str = "",
    known_metrics: Collection[str] | None = SERIES_NAMES,
) -> RuleFile:
    """Compile rule-file ``text`` (named ``filename`` in messages)."""
    loaded, problems = _parse(text, filename, runbook_base_url, _Known(known_metrics))
    if problems:
        raise ConfigError(problems)
    return loaded


def _parse(
    text: str, filename: str, runbook_base_url: str, known: _Known
) -> tuple[RuleFile, list[Problem]]:
    """The rules of ``text`` that compiled, every ``disable`` name, and every problem; raises
    ``ConfigError`` only when the file is not YAML or not a rule file at all."""
    data, marks = load_yaml(text, filename)
    top = validate(RuleFileModel, data, marks, filename)
    problems: list[Problem] = []
    rules: list[Rule] = []
    unknown: list[UnknownMetric] = []
    named = frozenset(_raw_name(item) for item in top.rules) - {""}
    names: dict[str, int] = {}
    for index, item in enumerate(top.rules):
        base: Path_ = ("rules", index)
        try:
            model = validate(RuleModel, item, marks, filename, base)
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        rule = _compile(model, text, filename, marks, base, problems, runbook_base_url)
        if rule is None:
            continue
        if rule.name in names:
            line, col = mark_for(marks, (*base, "name"))
            problems.append(
                Problem(
                    filename,
                    line,
                    col,
                    dotted((*base, "name")),
                    f"rule {rule.name!r} is already defined in rules[{names[rule.name]}]",
                )
            )
            continue
        names[rule.name] = index
        rules.append(rule)
        unknown += _unknown_metrics(rule, text, filename, marks, (*base, "expr"), known)
    disable = []
    for index, name in enumerate(top.disable):
        line, col = mark_for(marks, ("disable", index))
        disable.append((name, Problem(filename, line, col, dotted(("disable", index)), "")))
    return RuleFile(filename, tuple(rules), tuple(disable), tuple(unknown), named), problems


def _raw_name(item: Any) -> str:
    name = item.get("name") if isinstance(item, dict) else None
    return name if isinstance(name, str) else ""


def _unknown_metrics(
    rule: Rule, text: str, filename: str, marks: Marks, path: Path_, known: _Known
) -> list[UnknownMetric]:
    """A warning for each selector of ``rule`` on a metric name fleetd never writes."""
    if known.names is None:
        return []
    out = []
    for node in walk(rule.expr):
        if not isinstance(node, Selector) or node.metric in known.names:
            continue
        suggestion = known.suggest(node.metric)
        hint = f"; did you mean {suggestion!r}?" if suggestion else ""
        what = _unreadable(node.metric)
        if node.metric in METRICS_ONLY:
            what += " (rules cannot read it)"
        message = (
            f"rule {rule.name!r} reads {node.metric!r}, a metric {what}: "
            f"the rule can never fire{hint}"
        )
        where = _at(text, filename, marks, path, node.pos, message)
        out.append(UnknownMetric(rule.name, node.metric, suggestion, where, rule.source))
    return out


def _compile(
    model: RuleModel,
    text: str,
    filename: str,
    marks: Marks,
    base: Path_,
    problems: list[Problem],
    runbook_base_url: str,
) -> Rule | None:
    before = len(problems)
    expr = None
    try:
        expr = parse_rule_expr(model.expr)
    except ExprError as exc:
        problems.append(_at(text, filename, marks, (*base, "expr"), exc.offset, exc.message))
    annotations: list[tuple[str, Template]] = []
    for name, source in sorted(model.annotations.items()):
        try:
            annotations.append((name, compile_template(source)))
        except TemplateError as exc:
            path = (*base, "annotations", name)
            problems.append(_at(text, filename, marks, path, exc.offset, exc.message))
    if model.runbook is not None and "runbook_url" not in model.annotations:
        url = model.runbook
        if runbook_base_url and "://" not in url:
            url = runbook_base_url.rstrip("/") + "/" + url.lstrip("/")
        annotations.append(("runbook_url", Template(url, (url,))))
        annotations.sort(key=lambda pair: pair[0])
    if len(problems) > before or expr is None:
        return None
    line, _col = mark_for(marks, base)
    return Rule(
        name=model.name,
        expr=expr,
        expr_text=model.expr.strip(),
        severity=model.severity,
        op=model.op,
        threshold=None if model.threshold is None else Threshold.of(model.threshold),
        clear=None if model.clear is None else Threshold.of(model.clear),
        threshold_by=model.threshold_by,
        for_s=model.for_,
        keep_firing_for_s=model.keep_firing_for,
        labels=make_labels(model.labels),
        annotations=tuple(annotations),
        runbook=model.runbook,
        remediation_plan=None if model.remediation is None else model.remediation.plan,
        mode=model.mode or ("alert" if model.remediation is None else "remediate"),
        health=model.health,
        rationale=model.rationale,
        source=f"{filename}:{line}",
    )


def _at(text: str, filename: str, marks: Marks, path: Path_, offset: int, message: str) -> Problem:
    where = locate(text, path, offset)
    line, col = where if where is not None else mark_for(marks, path)
    return Problem(filename, line, col, dotted(path), message)
