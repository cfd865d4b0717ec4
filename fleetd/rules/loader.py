"""Rule files → a ``RuleSet``: shipped packs, then local rules that override or disable them.

One loader for the daemon, ``fleetd rules check`` and reload. It reports every problem in
every file at once as ``file:line:col: key: message``; positions point inside an expression
or template where the problem is. Nothing is half-loaded: any problem raises ``ConfigError``
and the caller keeps whatever rules it had.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

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
from fleetd.rules.evaluate import Interner
from fleetd.rules.lexer import ExprError
from fleetd.rules.parser import parse_rule_expr
from fleetd.rules.spec import Rule, RuleFileModel, RuleModel, Threshold
from fleetd.rules.templates import Template, TemplateError, compile_template
from fleetd.rules.yamlpos import locate

RULE_FILE_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True, slots=True)
class RuleFile:
    """One file's rules and the names it disables, each with where it was written."""

    path: str
    rules: tuple[Rule, ...]
    disable: tuple[tuple[str, Problem], ...] = ()  # name, and a Problem stub for its position


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The rules the engine runs, in evaluation order, and the files they came from."""

    rules: tuple[Rule, ...] = ()
    files: tuple[str, ...] = ()
    disabled: tuple[str, ...] = ()
    _by_name: dict[str, Rule] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update({rule.name: rule for rule in self.rules})

    def get(self, name: str) -> Rule | None:
        return self._by_name.get(name)

    def __len__(self) -> int:
        return len(self.rules)


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
) -> RuleSet:
    """Load shipped ``packs`` then ``local`` rules (files or directories); all problems at once.

    A local rule with a shipped rule's name replaces it in place; ``disable: [Name]`` in any
    file switches a rule off. Names must be unique within the packs and within the local
    rules, and every disabled name must exist.
    """
    problems: list[Problem] = []
    pack_files = [_load_or_collect(p, problems, runbook_base_url) for p in rule_files(packs)]
    local_paths = rule_files(local)
    local_files = [_load_or_collect(p, problems, runbook_base_url) for p in local_paths]
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
    disabled: list[str] = []
    for loaded in (*pack_files, *local_files):
        if loaded is None:
            continue
        for name, where in loaded.disable:
            if name not in ordered:
                problems.append(
                    Problem(
                        where.file,
                        where.line,
                        where.col,
                        where.key,
                        f"no rule named {name!r} to disable",
                    )
                )
            disabled.append(name)
    if problems:
        raise ConfigError(problems)
    interner = Interner()
    rules = tuple(
        _intern(rule, interner) for name, rule in ordered.items() if name not in set(disabled)
    )
    files = tuple(str(p) for p in (*rule_files(packs), *local_paths))
    return RuleSet(rules, files, tuple(sorted(set(disabled))))


def _load_or_collect(path: Path, problems: list[Problem], runbook_base_url: str) -> RuleFile | None:
    try:
        return load_rule_file(path, runbook_base_url=runbook_base_url)
    except ConfigError as exc:
        problems.extend(exc.problems)
        return None


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


def load_rule_file(path: str | Path, *, runbook_base_url: str = "") -> RuleFile:
    """Read and compile one rule file; ``ConfigError`` lists every problem in it.

    Read as fleetd.yaml is (bounded, UTF-8, see ``fleetd.configbase``); a file is also wrong
    when it is empty (a site file cut to nothing would silently bring back the shipped rules
    it replaced or disabled) or cut short (its last line has no line break).
    """
    filename = str(path)
    text, problems = read_whole(path)
    try:
        loaded = parse_rule_text(text, filename, runbook_base_url=runbook_base_url)
    except ConfigError as exc:
        raise ConfigError([*problems, *exc.problems]) from None
    if not loaded.rules and not loaded.disable and not text.strip(" \t\r\n"):
        problems.append(
            Problem(filename, 1, 1, "", "the file is empty: a rule file holds rules: or disable:")
        )
    if problems:
        raise ConfigError(problems)
    return loaded


def parse_rule_text(text: str, filename: str, *, runbook_base_url: str = "") -> RuleFile:
    """Compile rule-file ``text`` (named ``filename`` in messages)."""
    data, marks = load_yaml(text, filename)
    top = validate(RuleFileModel, data, marks, filename)
    problems: list[Problem] = []
    rules: list[Rule] = []
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
    disable = []
    for index, name in enumerate(top.disable):
        line, col = mark_for(marks, ("disable", index))
        disable.append((name, Problem(filename, line, col, dotted(("disable", index)), "")))
    if problems:
        raise ConfigError(problems)
    return RuleFile(filename, tuple(rules), tuple(disable))


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
