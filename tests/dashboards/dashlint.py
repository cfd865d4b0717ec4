"""Checks for fleetd's Grafana dashboards: structure, catalog vocabulary and PromQL validity.

Why a checker of our own: Grafana accepts almost any JSON and Prometheus answers a misspelt
metric with an empty graph, so a dashboard can be wrong for months before anyone notices.
Every check returns a list of human-readable problems (empty when fine) naming the dashboard,
the panel or variable and the expression, so a failing test says exactly what to fix.

PromQL is analysed with a small scanner, not a full parser: it finds every series selector
(metric name, label matchers, range, the function around it), every grouping clause
(``by``/``without``/``on``/``ignoring``/``group_left``/``group_right``) and the labels that
``label_replace``/``label_join``/``count_values`` create. Syntax itself is left to
``promtool check rules`` (:func:`promtool_problems`), the reference parser.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fleetd.collect.catalog import MetricSpec

# ---------------------------------------------------------------------------------------------
# Grafana dashboard structure

MIN_SCHEMA_VERSION = 39  # Grafana 10.4 / 11.x
DATA_PANEL_TYPES = frozenset(
    {"timeseries", "stat", "table", "state-timeline", "status-history", "bargauge", "gauge"}
)
LAYOUT_PANEL_TYPES = frozenset({"row", "text"})
DEPRECATED_PANEL_TYPES = frozenset({"graph", "singlestat", "table-old", "grafana-piechart-panel"})
VARIABLE_TYPES = frozenset({"query", "custom", "datasource", "interval", "constant", "textbox"})
DATASOURCE_VARIABLE = "datasource"
DATASOURCE_REFS = (
    {"type": "prometheus", "uid": "${datasource}"},
    {"type": "prometheus", "uid": "$datasource"},
)
GRID_COLUMNS = 24
# Grafana unit ids (packages/grafana-data/src/valueFormats/categories.ts) a fleetd panel may
# use; custom units are written "suffix:<text>", "prefix:<text>", "si:<unit>" or "count:<unit>".
GRAFANA_UNITS = frozenset(
    {
        "none", "short", "percent", "percentunit", "celsius", "watt", "kwatt", "joule",
        "bytes", "decbytes", "Bps", "bps", "hertz", "s", "ms", "dtdurations", "cps", "cpm",
        "ops", "opm", "reqps", "locale", "string", "volt", "amp",
    }
)  # fmt: skip
CUSTOM_UNIT_RE = re.compile(r"^(suffix|prefix|si|count):.+")
UID_RE = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
VARIABLE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DASHBOARD_LINK_RE = re.compile(r"/d/([A-Za-z0-9_-]+)")


def load_dashboards(directory: Path) -> dict[str, dict[str, Any]]:
    """Every ``*.json`` in ``directory`` by file name; a file that is not JSON raises."""
    dashboards: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path.name}: not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"{path.name}: the top level is not a JSON object")
        dashboards[path.name] = data
    return dashboards


def all_panels(dashboard: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Top-level panels and those nested in collapsed rows, in order."""
    out: list[dict[str, Any]] = []
    for panel in dashboard.get("panels") or []:
        if not isinstance(panel, dict):
            continue
        out.append(panel)
        for nested in panel.get("panels") or []:
            if isinstance(nested, dict):
                out.append(nested)
    return out


def panel_label(panel: Mapping[str, Any]) -> str:
    return f"panel {panel.get('id')!r} ({panel.get('title', '')!r})"


def variables(dashboard: Mapping[str, Any]) -> list[dict[str, Any]]:
    templating = dashboard.get("templating")
    if not isinstance(templating, dict):
        return []
    listed = templating.get("list")
    return [v for v in listed if isinstance(v, dict)] if isinstance(listed, list) else []


def annotations(dashboard: Mapping[str, Any]) -> list[dict[str, Any]]:
    block = dashboard.get("annotations")
    listed = block.get("list") if isinstance(block, dict) else None
    return [a for a in listed if isinstance(a, dict)] if isinstance(listed, list) else []


def structure_problems(name: str, dashboard: Mapping[str, Any]) -> list[str]:
    """What makes ``dashboard`` not a well-formed dashboard for current Grafana."""
    problems: list[str] = []

    def bad(message: str) -> None:
        problems.append(f"{name}: {message}")

    for key, kind in (
        ("title", str),
        ("uid", str),
        ("schemaVersion", int),
        ("version", int),
        ("panels", list),
        ("templating", dict),
        ("time", dict),
        ("tags", list),
        ("editable", bool),
    ):
        if not isinstance(dashboard.get(key), kind):
            bad(f"top-level {key!r} missing or not a {kind.__name__}")
    if problems:
        return problems
    if dashboard.get("id") is not None:
        bad("top-level 'id' must be null (Grafana assigns it on import)")
    if not UID_RE.match(dashboard["uid"]):
        bad(f"uid {dashboard['uid']!r} is not 1-40 characters of [A-Za-z0-9_-]")
    if dashboard["schemaVersion"] < MIN_SCHEMA_VERSION:
        bad(f"schemaVersion {dashboard['schemaVersion']} is older than {MIN_SCHEMA_VERSION}")
    time = dashboard["time"]
    if not (isinstance(time.get("from"), str) and isinstance(time.get("to"), str)):
        bad("'time' needs string 'from' and 'to'")
    if not isinstance(dashboard["templating"].get("list"), list):
        bad("'templating.list' missing or not a list")
    for annotation in annotations(dashboard):
        if "expr" in annotation and annotation.get("datasource") not in DATASOURCE_REFS:
            bad(f"annotation {annotation.get('name')!r}: datasource is not the datasource variable")
    problems.extend(f"{name}: {p}" for p in _panel_problems(dashboard))
    problems.extend(f"{name}: {p}" for p in _variable_problems(dashboard))
    return problems


def _panel_problems(dashboard: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    seen_ids: dict[int, str] = {}
    rectangles: list[tuple[str, int, int, int, int]] = []
    for panel in all_panels(dashboard):
        label = panel_label(panel)
        panel_id = panel.get("id")
        if not isinstance(panel_id, int) or isinstance(panel_id, bool):
            problems.append(f"{label}: 'id' missing or not an integer")
        elif panel_id in seen_ids:
            problems.append(f"{label}: id {panel_id} also used by {seen_ids[panel_id]}")
        else:
            seen_ids[panel_id] = label
        kind = panel.get("type")
        if kind in DEPRECATED_PANEL_TYPES:
            problems.append(f"{label}: panel type {kind!r} is deprecated")
        elif kind not in DATA_PANEL_TYPES | LAYOUT_PANEL_TYPES:
            problems.append(f"{label}: unexpected panel type {kind!r}")
        if not isinstance(panel.get("title"), str) or (kind != "row" and not panel["title"]):
            problems.append(f"{label}: 'title' missing")
        grid = _grid(panel)
        if grid is None:
            problems.append(f"{label}: gridPos needs integer h, w, x, y with x + w <= 24")
        else:
            rectangles.append((label, *grid))
        if kind in DATA_PANEL_TYPES:
            problems.extend(_data_panel_problems(panel, label))
            problems.extend(_unit_problems(panel, label))
    problems.extend(_overlaps(rectangles))
    return problems


def _grid(panel: Mapping[str, Any]) -> tuple[int, int, int, int] | None:
    grid = panel.get("gridPos")
    if not isinstance(grid, dict):
        return None
    values = [grid.get(k) for k in ("x", "y", "w", "h")]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    x, y, w, h = (int(v) for v in values)  # type: ignore[arg-type]
    if x < 0 or y < 0 or w < 1 or h < 1 or x + w > GRID_COLUMNS:
        return None
    return x, y, w, h


def _overlaps(rectangles: Sequence[tuple[str, int, int, int, int]]) -> list[str]:
    problems = []
    for i, (a, ax, ay, aw, ah) in enumerate(rectangles):
        for b, bx, by, bw, bh in rectangles[i + 1 :]:
            if ax < bx + bw and bx < ax + aw and ay < by + bh and by < ay + ah:
                problems.append(f"{a} overlaps {b}")
    return problems


def _unit_problems(panel: Mapping[str, Any], label: str) -> list[str]:
    """A misspelt unit id makes Grafana show bare numbers; catch it here."""
    field_config = panel.get("fieldConfig")
    if not isinstance(field_config, dict):
        return []
    units = []
    defaults = field_config.get("defaults")
    if isinstance(defaults, dict) and "unit" in defaults:
        units.append(defaults["unit"])
    for override in field_config.get("overrides") or []:
        for prop in override.get("properties") or [] if isinstance(override, dict) else []:
            if isinstance(prop, dict) and prop.get("id") == "unit":
                units.append(prop.get("value"))
    return [
        f"{label}: unit {unit!r} is not a Grafana unit id"
        for unit in units
        if not (isinstance(unit, str) and (unit in GRAFANA_UNITS or CUSTOM_UNIT_RE.match(unit)))
    ]


def _data_panel_problems(panel: Mapping[str, Any], label: str) -> list[str]:
    problems = []
    if panel.get("datasource") not in DATASOURCE_REFS:
        problems.append(
            f"{label}: datasource {panel.get('datasource')!r} is not the "
            f"${DATASOURCE_VARIABLE} variable"
        )
    targets = panel.get("targets")
    if not isinstance(targets, list) or not targets:
        return [*problems, f"{label}: no targets"]
    ref_ids: set[str] = set()
    for target in targets:
        if not isinstance(target, dict):
            problems.append(f"{label}: a target is not an object")
            continue
        ref = target.get("refId")
        if not isinstance(ref, str) or not ref or ref in ref_ids:
            problems.append(f"{label}: refId {ref!r} missing or repeated")
        ref_ids.add(str(ref))
        if "datasource" in target and target["datasource"] not in DATASOURCE_REFS:
            problems.append(f"{label} target {ref}: datasource is not the datasource variable")
        if not isinstance(target.get("expr"), str) or not target["expr"].strip():
            problems.append(f"{label} target {ref}: 'expr' missing or empty")
    return problems


def _variable_problems(dashboard: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    defined: set[str] = set()
    variable_list = variables(dashboard)
    datasource_vars = [v for v in variable_list if v.get("type") == "datasource"]
    if [v.get("name") for v in datasource_vars] != [DATASOURCE_VARIABLE]:
        problems.append(
            f"templating needs exactly one datasource variable named {DATASOURCE_VARIABLE!r}"
        )
    for var in variable_list:
        name = var.get("name")
        label = f"variable {name!r}"
        if not isinstance(name, str) or not VARIABLE_NAME_RE.match(name):
            problems.append(f"{label}: name is not an identifier")
            continue
        if name in defined:
            problems.append(f"{label}: defined twice")
        kind = var.get("type")
        if kind not in VARIABLE_TYPES:
            problems.append(f"{label}: unexpected type {kind!r}")
        if kind == "datasource" and var.get("query") != "prometheus":
            problems.append(f"{label}: a datasource variable must have query 'prometheus'")
        if kind == "query":
            if var.get("datasource") not in DATASOURCE_REFS:
                problems.append(f"{label}: datasource is not the datasource variable")
            if not variable_query(var):
                problems.append(f"{label}: no query")
            definition = var.get("definition")
            if definition is not None and definition != variable_query(var):
                problems.append(f"{label}: 'definition' differs from the query Grafana runs")
            if var.get("refresh") not in (1, 2):
                problems.append(f"{label}: refresh must be 1 (on load) or 2 (on time change)")
            for used in referenced_variables(variable_query(var)):
                if used not in defined and not used.startswith("__"):
                    problems.append(f"{label}: uses ${used}, which is not defined before it")
        if kind in ("query", "custom"):
            for key in ("multi", "includeAll"):
                if not isinstance(var.get(key), bool):
                    problems.append(f"{label}: {key!r} missing or not a boolean")
            if var.get("includeAll") and not var.get("allValue"):
                problems.append(f"{label}: includeAll without an allValue (use '.*')")
        defined.add(name)
    return problems


def dashboard_link_problems(dashboards: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Links of the form ``/d/<uid>`` must lead to one of our dashboards."""
    uids = {d.get("uid") for d in dashboards.values()}
    problems = []
    for name, dashboard in dashboards.items():
        text = json.dumps(dashboard)
        for uid in DASHBOARD_LINK_RE.findall(text):
            if uid not in uids:
                problems.append(f"{name}: links to unknown dashboard uid {uid!r}")
    return problems


# ---------------------------------------------------------------------------------------------
# Expressions and Grafana variables


@dataclass(frozen=True, slots=True)
class Expression:
    """One PromQL expression of a dashboard, as written and with variables filled in."""

    dashboard: str
    where: str
    raw: str
    promql: str
    legend: str = ""
    metric_label: tuple[str, str] | None = None  # label_values(metric, label): the pair

    def __str__(self) -> str:
        return f"{self.dashboard}: {self.where}: {self.raw!r}"


DURATION_BUILTINS = ("__rate_interval", "__interval", "__range")
BUILTIN_VALUES = {
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range": "6h",
    "__range_s": "21600",
    "__range_ms": "21600000",
    "__interval_ms": "60000",
}
_VAR_RE = re.compile(
    r"\$\{(?P<braced>\w+)(?::(?P<fmt>[\w]+))?\}|\[\[(?P<old>\w+)(?::\w+)?\]\]|\$(?P<plain>[A-Za-z_]\w*)"
)
_LEGEND_RE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_LABEL_VALUES_RE = re.compile(r"^\s*label_values\((?P<args>.*)\)\s*$", re.S)
_QUERY_RESULT_RE = re.compile(r"^\s*query_result\((?P<expr>.*)\)\s*$", re.S)


def referenced_variables(text: str) -> list[str]:
    return [m.group("braced") or m.group("old") or m.group("plain") for m in _VAR_RE.finditer(text)]


def variable_query(var: Mapping[str, Any]) -> str:
    query = var.get("query")
    if isinstance(query, dict):
        query = query.get("query")
    return query if isinstance(query, str) else ""


def sample_values(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """A concrete value for every dashboard variable, as Grafana would interpolate one."""
    values: dict[str, str] = dict(BUILTIN_VALUES)
    for var in variables(dashboard):
        name = var.get("name")
        if not isinstance(name, str):
            continue
        kind = var.get("type")
        if kind == "datasource":
            continue  # never valid inside an expression
        if kind == "interval":
            values[name] = str(var.get("query", "5m")).split(",")[0].strip() or "5m"
        elif kind in ("custom", "constant"):
            values[name] = str(var.get("query", "")).split(",")[0].strip()
        else:
            values[name] = f"sample-{name}"
    return values


def substitute(text: str, values: Mapping[str, str]) -> tuple[str, list[str]]:
    """``text`` with Grafana variables replaced; the names that have no value are returned."""
    unknown: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("old") or match.group("plain")
        if name not in values:
            unknown.append(name)
            return match.group(0)
        return values[name]

    return _VAR_RE.sub(replace, text), unknown


def expressions(name: str, dashboard: Mapping[str, Any]) -> tuple[list[Expression], list[str]]:
    """Every PromQL expression of panels and variable queries, and problems found on the way."""
    values = sample_values(dashboard)
    found: list[Expression] = []
    problems: list[str] = []

    def add(where: str, raw: str, legend: str = "") -> None:
        promql, unknown = substitute(raw, values)
        for var in unknown:
            problems.append(f"{name}: {where}: ${var} is not a dashboard variable")
        found.append(Expression(name, where, raw, promql, legend))

    for panel in all_panels(dashboard):
        for target in panel.get("targets") or []:
            if isinstance(target, dict) and isinstance(target.get("expr"), str):
                where = f"{panel_label(panel)} target {target.get('refId')}"
                legend = target.get("legendFormat")
                add(where, target["expr"], legend if isinstance(legend, str) else "")
    for annotation in annotations(dashboard):
        if isinstance(annotation.get("expr"), str):
            add(f"annotation {annotation.get('name')!r}", annotation["expr"])
    for var in variables(dashboard):
        if var.get("type") != "query":
            continue
        where = f"variable {var.get('name')!r}"
        query = variable_query(var)
        parsed = _variable_expression(query)
        if parsed is None:
            problems.append(
                f"{name}: {where}: query {query!r} is not label_values(metric, label) "
                "or query_result(expr)"
            )
            continue
        expr, label = parsed
        promql, unknown = substitute(expr, values)
        for unknown_var in unknown:
            problems.append(f"{name}: {where}: ${unknown_var} is not a dashboard variable")
        found.append(Expression(name, where, expr, promql, metric_label=(promql, label)))
    return found, problems


def _variable_expression(query: str) -> tuple[str, str] | None:
    """(PromQL selector or expression, label) of a Prometheus variable query."""
    match = _LABEL_VALUES_RE.match(query)
    if match:
        args = match.group("args")
        selector, comma, label = args.rpartition(",")
        if not comma or not selector.strip() or not VARIABLE_NAME_RE.match(label.strip()):
            return None  # label_values(label) alone would list values across every metric
        return selector.strip(), label.strip()
    match = _QUERY_RESULT_RE.match(query)
    if match:
        return match.group("expr").strip(), ""
    return None


# ---------------------------------------------------------------------------------------------
# PromQL scanning

AGGREGATORS = frozenset(
    {
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    }
)
GROUPING_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
OTHER_KEYWORDS = frozenset({"bool", "and", "or", "unless", "atan2", "offset"})
NUMBER_WORDS = frozenset({"inf", "nan"})
COUNTER_FUNCTIONS = frozenset({"rate", "irate", "increase"})
PROMETHEUS_LABELS = frozenset({"instance", "job"})  # added by the scrape, not by fleetd

_TOKEN_RE = re.compile(
    r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+(?![A-Za-z0-9_]))
  | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_:]*)
  | (?P<op>==|!=|<=|>=|=~|!~|[-+*/%^<>=@])
  | (?P<punct>[(){}\[\],:])
    """,
    re.X,
)


class PromQLScanError(ValueError):
    """The text cannot even be split into PromQL tokens."""


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    text: str
    pos: int


def tokenize(text: str) -> list[Token]:
    tokens = []
    pos = 0
    while pos < len(text):
        match = _TOKEN_RE.match(text, pos)
        if match is None:
            raise PromQLScanError(f"unexpected character {text[pos]!r} at {pos}")
        kind = match.lastgroup or ""
        if kind != "space":
            tokens.append(Token(kind, match.group(0), pos))
        pos = match.end()
    return tokens


@dataclass(frozen=True, slots=True)
class Selector:
    """One series selector: ``name{matchers}[range]`` and the function it is an argument of."""

    name: str | None
    matchers: tuple[tuple[str, str, str], ...]  # (label, op, value)
    has_range: bool
    function: str | None  # innermost call or aggregation around it


@dataclass(frozen=True, slots=True)
class Grouping:
    """A grouping clause and the selectors it can see (for ``by``/``without``: its argument)."""

    keyword: str
    labels: tuple[str, ...]
    scope: tuple[Selector, ...] | None  # None: the whole expression


@dataclass
class Scan:
    selectors: list[Selector] = field(default_factory=list)
    groupings: list[Grouping] = field(default_factory=list)
    created_labels: set[str] = field(default_factory=set)
    read_labels: list[tuple[str, tuple[Selector, ...]]] = field(default_factory=list)


@dataclass
class _Frame:
    kind: str  # "call", "agg" or "paren"
    name: str
    selectors: list[Selector] = field(default_factory=list)
    strings: list[tuple[int, str]] = field(default_factory=list)  # (argument index, value)
    arg: int = 0
    grouping: tuple[str, tuple[str, ...]] | None = None


def _unquote(token: Token) -> str:
    body = token.text[1:-1]
    if token.text[0] == "`":
        return body
    return re.sub(r"\\(.)", r"\1", body)


def scan(text: str) -> Scan:
    """Selectors, grouping clauses and created labels of a PromQL expression."""
    tokens = tokenize(text)
    result = Scan()
    stack: list[_Frame] = []
    i = 0

    def peek(offset: int = 0) -> Token | None:
        j = i + offset
        return tokens[j] if j < len(tokens) else None

    def read_label_list(start: int) -> tuple[tuple[str, ...], int]:
        """Labels in ``( a, b )`` starting at tokens[start] == '('; returns the index after."""
        labels = []
        j = start + 1
        while j < len(tokens) and tokens[j].text != ")":
            if tokens[j].kind in ("ident", "string"):
                tok = tokens[j]
                labels.append(_unquote(tok) if tok.kind == "string" else tok.text)
            j += 1
        return tuple(labels), j + 1

    def read_matchers(start: int) -> tuple[tuple[tuple[str, str, str], ...], int]:
        """Matchers in ``{...}`` starting at tokens[start] == '{'; returns the index after."""
        matchers = []
        j = start + 1
        while j < len(tokens) and tokens[j].text != "}":
            if (
                tokens[j].kind in ("ident", "string")
                and j + 2 < len(tokens)
                and tokens[j + 1].kind == "op"
                and tokens[j + 2].kind == "string"
            ):
                name = tokens[j].text if tokens[j].kind == "ident" else _unquote(tokens[j])
                matchers.append((name, tokens[j + 1].text, _unquote(tokens[j + 2])))
                j += 3
            else:
                j += 1
        return tuple(matchers), j + 1

    def skip_brackets(start: int) -> int:
        j = start
        while j < len(tokens) and tokens[j].text != "]":
            j += 1
        return j + 1

    def record(selector: Selector) -> None:
        result.selectors.append(selector)
        for frame in stack:
            frame.selectors.append(selector)

    def innermost_function() -> str | None:
        return stack[-1].name if stack and stack[-1].kind in ("call", "agg") else None

    while i < len(tokens):
        tok = tokens[i]
        nxt = peek(1)
        if tok.kind == "ident":
            low = tok.text.lower()
            if low in GROUPING_KEYWORDS:
                labels: tuple[str, ...] = ()
                end = i + 1
                if nxt is not None and nxt.text == "(":
                    labels, end = read_label_list(i + 1)
                if low in ("by", "without"):
                    after = tokens[end] if end < len(tokens) else None
                    if after is not None and after.text == "(":
                        # `sum by (x) (arg)`: the clause belongs to the aggregation that opens
                        stack.append(_Frame("agg", tokens[i - 1].text.lower()))
                        stack[-1].grouping = (low, labels)
                        i = end + 1
                        continue
                    # `sum (arg) by (x)` was handled when the aggregation closed
                result.groupings.append(Grouping(low, labels, None))
                i = end
                continue
            if low in NUMBER_WORDS or low in OTHER_KEYWORDS:
                i += 1
                if low == "offset" and nxt is not None and nxt.text == "-":
                    i += 1
                if low == "offset":
                    i += 1
                continue
            if nxt is not None and nxt.text == "(":
                kind = "agg" if low in AGGREGATORS else "call"
                stack.append(_Frame(kind, low if kind == "agg" else tok.text))
                i += 2
                continue
            if low in AGGREGATORS and nxt is not None and nxt.text.lower() in ("by", "without"):
                i += 1  # the grouping keyword opens the frame
                continue
            # a metric name
            j = i + 1
            matchers: tuple[tuple[str, str, str], ...] = ()
            if nxt is not None and nxt.text == "{":
                matchers, j = read_matchers(i + 1)
            has_range = j < len(tokens) and tokens[j].text == "["
            if has_range:
                j = skip_brackets(j)
            record(Selector(tok.text, matchers, has_range, innermost_function()))
            i = j
            continue
        if tok.text == "{":
            matchers, j = read_matchers(i)
            has_range = j < len(tokens) and tokens[j].text == "["
            if has_range:
                j = skip_brackets(j)
            record(Selector(None, matchers, has_range, innermost_function()))
            i = j
            continue
        if tok.text == "(":
            stack.append(_Frame("paren", ""))
        elif tok.text == ")":
            if stack:
                frame = stack.pop()
                _close(frame, result)
                if frame.kind == "agg" and frame.grouping is None:
                    after = peek(1)
                    if after is not None and after.text.lower() in ("by", "without"):
                        follow = peek(2)
                        labels = ()
                        end = i + 2
                        if follow is not None and follow.text == "(":
                            labels, end = read_label_list(i + 2)
                        result.groupings.append(
                            Grouping(after.text.lower(), labels, tuple(frame.selectors))
                        )
                        i = end
                        continue
        elif tok.text == ",":
            if stack:
                stack[-1].arg += 1
        elif tok.text == "[":
            i = skip_brackets(i)  # a subquery range
            continue
        elif tok.kind == "string" and stack:
            stack[-1].strings.append((stack[-1].arg, _unquote(tok)))
        i += 1
    return result


def _close(frame: _Frame, result: Scan) -> None:
    scope = tuple(frame.selectors)
    if frame.grouping is not None:
        keyword, labels = frame.grouping
        result.groupings.append(Grouping(keyword, labels, scope))
    args = dict(frame.strings)
    if frame.kind == "call" and frame.name == "label_replace":
        if 1 in args:
            result.created_labels.add(args[1])
        if args.get(3):
            result.read_labels.append((args[3], scope))
    elif frame.kind == "call" and frame.name == "label_join":
        if 1 in args:
            result.created_labels.add(args[1])
        for index, value in frame.strings:
            if index >= 3:
                result.read_labels.append((value, scope))
    elif frame.kind == "agg" and frame.name == "count_values" and 0 in args:
        result.created_labels.add(args[0])


# ---------------------------------------------------------------------------------------------
# The catalog check

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
SUMMARY_SUFFIXES = ("_sum", "_count")


@dataclass(frozen=True, slots=True)
class Resolved:
    spec: MetricSpec
    suffix: str  # "", "_bucket", "_sum" or "_count"

    @property
    def labels(self) -> frozenset[str]:
        extra = {"le"} if self.suffix == "_bucket" else set()
        if self.spec.type == "summary" and not self.suffix:
            extra.add("quantile")
        return frozenset(self.spec.labels) | PROMETHEUS_LABELS | extra

    @property
    def is_cumulative(self) -> bool:
        """A counter, or a histogram/summary series that only grows: read with rate()."""
        return self.spec.type == "counter" or self.suffix != ""


def resolve(name: str, catalog: Mapping[str, MetricSpec]) -> Resolved | str:
    """The catalog entry behind ``name``, or why there is none."""
    spec = catalog.get(name)
    if spec is not None:
        if spec.type == "histogram":
            return f"{name} is a histogram: query {name}_bucket, _sum or _count"
        return Resolved(spec, "")
    for suffix in HISTOGRAM_SUFFIXES:
        base = catalog.get(name.removesuffix(suffix)) if name.endswith(suffix) else None
        if base is not None and (
            base.type == "histogram" or (base.type == "summary" and suffix in SUMMARY_SUFFIXES)
        ):
            return Resolved(base, suffix)
    if f"{name}_total" in catalog:
        return f"unknown metric {name} (the counter is exported as {name}_total)"
    return f"unknown metric {name} (not in fleetd/collect/catalog.py)"


def catalog_problems(expression: Expression, catalog: Mapping[str, MetricSpec]) -> list[str]:
    """Metric names, labels and counter use of ``expression`` held against the catalog."""
    try:
        result = scan(expression.promql)
    except PromQLScanError as exc:
        return [f"{expression}: {exc}"]
    problems: list[str] = []

    def bad(message: str) -> None:
        problems.append(f"{expression}: {message}")

    resolved: dict[Selector, Resolved] = {}
    for selector in result.selectors:
        if selector.name is None:
            bad("a selector without a metric name")
            continue
        found = resolve(selector.name, catalog)
        if isinstance(found, str):
            bad(found)
            continue
        resolved[selector] = found
        for label, _, _ in selector.matchers:
            if label == "__name__":
                bad("__name__ matchers hide metric names from this check")
            elif label not in found.labels:
                bad(f"{selector.name} has no label {label!r} (it has {_names(found.labels)})")
        if found.is_cumulative and not (
            selector.has_range and selector.function in COUNTER_FUNCTIONS
        ):
            bad(
                f"{selector.name} only ever grows: read it with rate(), irate() or increase() "
                "over a range, never raw"
            )
    if not result.selectors:
        bad("no metric selector")

    def visible(scope: Iterable[Selector] | None) -> frozenset[str]:
        chosen = result.selectors if scope is None else scope
        labels: set[str] = set(PROMETHEUS_LABELS) | result.created_labels
        for selector in chosen:
            if selector in resolved:
                labels |= resolved[selector].labels
        return frozenset(labels)

    for grouping in result.groupings:
        known = visible(grouping.scope)
        for label in grouping.labels:
            if label not in known:
                bad(f"{grouping.keyword} ({label}): no metric here has the label {label!r}")
    for label, scope in result.read_labels:
        if label not in visible(scope):
            bad(f"label_replace/label_join reads {label!r}, which no metric there has")
    everything = visible(None)
    for label in _LEGEND_RE.findall(expression.legend):
        if label not in everything:
            bad(f"legend uses {{{{{label}}}}}, which no metric of the expression has")
    if expression.metric_label is not None and expression.metric_label[1]:
        label = expression.metric_label[1]
        if label not in everything:
            bad(f"label_values of {label!r}, which no metric of the selector has")
    return problems


def _names(labels: Iterable[str]) -> str:
    return ", ".join(sorted(labels))


# ---------------------------------------------------------------------------------------------
# promtool


def promtool_problems(
    expressions_: Sequence[Expression], promtool: str, workdir: Path
) -> list[str]:
    """Problems ``promtool check rules`` reports, one recording rule per expression.

    promtool names each failing rule by its record name, which carries the expression's index,
    so each problem names the dashboard, panel and expression it belongs to.
    """
    if not expressions_:
        return []
    path = workdir / "dashboard-expressions.rules.yaml"
    path.write_text(rules_file(expressions_), encoding="utf-8")
    result = subprocess.run(
        [promtool, "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = (result.stdout + result.stderr).strip()
    if result.returncode == 0:
        return []
    problems = [
        f"{expressions_[int(m.group('index'))]}: promtool: {m.group('error').strip()}"
        for m in _PROMTOOL_ERROR_RE.finditer(output)
    ]
    return problems or [f"promtool rejected the rule file: {output}"]


_PROMTOOL_ERROR_RE = re.compile(
    r'"fleetd_dashboard:expression_(?P<index>\d+):check": (?P<error>[^\n]*)'
)


def rules_file(expressions_: Sequence[Expression]) -> str:
    rules = [
        {"record": f"fleetd_dashboard:expression_{index}:check", "expr": expression.promql}
        for index, expression in enumerate(expressions_)
    ]
    return yaml.safe_dump({"groups": [{"name": "fleetd-dashboards", "rules": rules}]})


# ---------------------------------------------------------------------------------------------


def lint(
    name: str, dashboard: Mapping[str, Any], catalog: Mapping[str, MetricSpec]
) -> tuple[list[Expression], list[str]]:
    """Structure and catalog problems of one dashboard, and its expressions for promtool."""
    problems = structure_problems(name, dashboard)
    found, expression_problems = expressions(name, dashboard)
    problems.extend(expression_problems)
    for expression in found:
        problems.extend(catalog_problems(expression, catalog))
    return found, problems


def metrics_used(found: Iterable[Expression], catalog: Mapping[str, MetricSpec]) -> set[str]:
    """Catalog names the expressions read (histogram series count as the histogram)."""
    used = set()
    for expression in found:
        for selector in scan(expression.promql).selectors:
            resolved = resolve(selector.name, catalog) if selector.name else None
            if isinstance(resolved, Resolved):
                used.add(resolved.spec.name)
    return used
