"""The package layering: ``fleetd.store`` knows no domain, and fleetd's packages form no
import cycle.

Every module under ``fleetd/`` is parsed with ``ast`` (nothing is imported) and each
``import fleetd.X…`` / ``from fleetd.X… import …`` — anywhere in the module, inside functions
and ``if TYPE_CHECKING:`` blocks included — becomes an arrow between the first package
components (``fleetd/alert/dispatch.py`` → ``fleetd.store.db`` is ``alert → store``; a
top-level module such as ``fleetd/config.py`` is its own component, ``config``). Relative
imports are resolved against the importing module.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path

import fleetd
from fleetd.sim.pysource import parse_files

ROOT = Path(fleetd.__file__).parent

DOMAINS = ("alert", "remedy", "rules", "api", "collect", "vllm")
"""Packages ``fleetd.store`` must never import: the store is a substrate they build on."""

KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()
"""Package-level cycles that exist today and are not fixed yet, each listed by its packages.
Empty: any cycle fails the test."""


def _component(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "fleetd" or len(parts) < 2:
        return None
    return parts[1]


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, int]]:
    """Every fleetd module ``path`` imports, with the line."""
    tree = _tree(path)
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "fleetd":  # from fleetd import X: a component if X is a module
                found += [
                    (f"fleetd.{alias.name}", node.lineno)
                    for alias in node.names
                    if (ROOT / f"{alias.name}.py").exists() or (ROOT / alias.name).is_dir()
                ]
            else:
                found.append((target, node.lineno))
    return [(m, line) for m, line in found if m == "fleetd" or m.startswith("fleetd.")]


def _modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


@cache
def _trees() -> dict[Path, ast.Module]:
    """Every module's AST, parsed once in a child interpreter (``fleetd.sim.pysource``)."""
    modules = _modules()
    return dict(zip(modules, parse_files(modules), strict=True))


def _tree(path: Path) -> ast.Module:
    return _trees()[path]


def package_graph() -> dict[str, dict[str, list[str]]]:
    """component → imported component → where (``path:line``)."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in _modules():
        source = _component(_module_name(path))
        if source is None:
            continue
        for target, line in _imports(path):
            dest = _component(target)
            if dest is not None and dest != source:
                graph[source][dest].append(f"{path.relative_to(ROOT.parent)}:{line}")
    return graph


def _cycles(graph: dict[str, dict[str, list[str]]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                members.add(top)
                if top == node:
                    break
            if len(members) > 1:
                out.append(frozenset(members))

    for node in sorted(set(graph) | {d for deps in graph.values() for d in deps}):
        if node not in index:
            visit(node)
    return out


def test_the_graph_sees_the_packages() -> None:
    graph = package_graph()
    assert "store" in graph["alert"], "the walk must find alert's imports of the store"
    assert "model" in graph["store"]


def test_store_imports_no_domain() -> None:
    graph = package_graph()
    bad = {d: where for d, where in graph.get("store", {}).items() if d in DOMAINS}
    assert not bad, f"fleetd.store imports domain packages: {dict(bad)}"


def test_no_package_import_cycles() -> None:
    graph = package_graph()
    found = set(_cycles(graph))
    new = found - KNOWN_CYCLES
    detail = {
        ", ".join(sorted(c)): {
            f"{a}->{b}": graph[a][b][:3] for a in sorted(c) for b in sorted(c) if b in graph[a]
        }
        for c in new
    }
    assert not new, f"package-level import cycles: {detail}"
    gone = KNOWN_CYCLES - found
    assert not gone, f"fixed cycles still allowed in KNOWN_CYCLES, remove them: {gone}"


def _declares_tables(path: Path) -> bool:
    """Whether the module declares a ``Table(name, METADATA, …)`` on the shared MetaData."""
    tree = _tree(path)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "Table"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Name)
            and node.args[1].id == "METADATA"
        ):
            return True
    return False


def test_every_table_module_is_registered() -> None:
    """Domains own their tables, and ``fleetd.store.schema.TABLE_MODULES`` names them all, so
    ``Database.upgrade`` always sees the whole schema."""
    from fleetd.store.schema import TABLE_MODULES

    declaring = {
        _module_name(path)
        for path in _modules()
        if path.name != "schema.py" and _declares_tables(path)
    }
    assert declaring == set(TABLE_MODULES) - {"fleetd.store.schema"}


def test_the_schema_keeps_its_tables() -> None:
    """Moving a table's module to its domain changes no table: schema version 4 has these
    (4 added columns to the fleet lease tables, no table)."""
    from fleetd.store.schema import SCHEMA_VERSION, load_table_modules

    assert SCHEMA_VERSION == 4
    assert set(load_table_modules().tables) == {
        "fleetd_schema_version",
        "fleetd_series",
        "fleetd_samples_head",
        "fleetd_sample_chunks",
        "fleetd_rollup_chunks",
        "fleetd_store_state",
        "fleetd_events",
        "alert_notify_alerts",
        "alert_notify_log",
        "alert_notify_alert_log",
        "alert_outbox",
        "alert_message_refs",
        "alert_thread_refs",
        "alert_silences",
        "alert_acks",
        "fleetd_alert_state",
        "fleetd_rule_engine",
        "remedy_runs",
        "remedy_events",
        "remedy_control",
        "remedy_fleet_leases",
        "remedy_fleet_failures",
        "remedy_fleet_breaker",
        "remedy_rma",  # a new table: created by Database.upgrade's create_all, no step needed
    }
