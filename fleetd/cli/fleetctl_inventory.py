"""The inventory file: which agents make up the fleet.

A YAML list. Each item is an address — ``host``, ``host:port`` or ``https://host:port`` —
where the host may hold ranges in brackets, expanded like pdsh/Slurm host lists:
``gpu-node-[001-128]:9477`` is 128 nodes, ``rack[1-2]-gpu[01-08]`` is 16, ``node[1,3,7-9]``
is 5; a zero-padded lower bound keeps its width. An item may instead be a mapping
``{name: gpu-node-001, address: 10.0.0.5:9477}`` when the name is not the host. The node's
name is its host unless given; without a port the agent's default port is used.

Mistakes are reported with file and line, and every one at once.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

from fleetd.cli.fleetctl_http import Target
from fleetd.errors import ConfigError, Problem

DEFAULT_AGENT_PORT = 9477  # fleetd.config.DEFAULT_HTTP_PORT, without importing the daemon's config
MAX_EXPANSION = 100_000
_RANGE = re.compile(r"\[([^\]]*)\]")
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
_ADDRESS = re.compile(r"^(?:(?P<scheme>https?)://)?(?P<host>[^:/\s]+)(?::(?P<port>\d{1,5}))?/?$")


def expand_hosts(pattern: str) -> list[str]:
    """``gpu-node-[001-003]`` → ``gpu-node-001, gpu-node-002, gpu-node-003``; ValueError if bad."""
    pieces: list[list[str]] = []
    pos = 0
    for match in _RANGE.finditer(pattern):
        pieces.append([pattern[pos : match.start()]])
        pieces.append(_expand_range(match.group(1), pattern))
        pos = match.end()
    pieces.append([pattern[pos:]])
    if "[" in pieces[-1][0] or "]" in pieces[-1][0]:
        raise ValueError(f"unbalanced bracket in {pattern!r}")
    total = 1
    for options in pieces:
        total *= len(options)
    if total > MAX_EXPANSION:
        raise ValueError(f"{pattern!r} expands to {total} hosts (limit {MAX_EXPANSION})")
    return ["".join(parts) for parts in itertools.product(*pieces)]


def _expand_range(body: str, pattern: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(
                f"bad range [{body}] in {pattern!r}: use [1-8], [001-128] or [1,3,5-7]"
            )
        if not sep:
            out.append(lo)
            continue
        start, end = int(lo), int(hi)
        if end < start:
            raise ValueError(f"bad range [{body}] in {pattern!r}: {hi} is below {lo}")
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        out.extend(str(n).zfill(width) for n in range(start, end + 1))
    return out


def targets_from_address(address: str, name: str | None = None) -> list[Target]:
    """Targets of one inventory address (which may hold ranges)."""
    match = _ADDRESS.match(address.strip())
    if match is None:
        raise ValueError(f"{address!r} is not host, host:port or http(s)://host:port")
    scheme = match.group("scheme") or "http"
    port = int(match.group("port") or DEFAULT_AGENT_PORT)
    if not 0 < port < 65536:
        raise ValueError(f"port {port} out of range in {address!r}")
    hosts = expand_hosts(match.group("host"))
    if name is not None and len(hosts) != 1:
        raise ValueError("a named entry must be a single address, not a range")
    out = []
    for host in hosts:
        if not _HOST.match(host):
            raise ValueError(f"{host!r} is not a valid host name")
        out.append(Target(name or host, f"{scheme}://{host}:{port}"))
    return out


def parse_inventory(data: Any, marks: dict[Any, tuple[int, int]], filename: str) -> list[Target]:
    """Targets from parsed YAML; ConfigError listing every problem with its line."""
    from fleetd.configbase import mark_for

    problems: list[Problem] = []
    if not isinstance(data, list):
        line, col = mark_for(marks, ())
        raise ConfigError([Problem(filename, line, col, "", "the inventory must be a YAML list")])
    targets: list[Target] = []
    for index, item in enumerate(data):
        line, col = mark_for(marks, (index,))
        try:
            if isinstance(item, str):
                targets.extend(targets_from_address(item))
            elif isinstance(item, dict) and set(item) == {"name", "address"}:
                name, address = item["name"], item["address"]
                if not isinstance(name, str) or not name.strip():
                    raise ValueError("name must be a non-empty string")
                if not isinstance(address, str):
                    raise ValueError("address must be a string")
                targets.extend(targets_from_address(address, name.strip()))
            else:
                raise ValueError("an entry is an address string or {name: ..., address: ...}")
        except ValueError as exc:
            problems.append(Problem(filename, line, col, f"[{index}]", str(exc)))
    seen: dict[str, int] = {}
    for target in targets:
        seen[target.name] = seen.get(target.name, 0) + 1
    duplicates = sorted(name for name, count in seen.items() if count > 1)
    if duplicates:
        shown = ", ".join(duplicates[:5]) + (" …" if len(duplicates) > 5 else "")
        problems.append(
            Problem(
                filename,
                None,
                None,
                "",
                f"duplicate node names: {shown} (give such entries as {{name:, address:}})",
            )
        )
    if problems:
        raise ConfigError(problems)
    return targets


def load_inventory(path: str | Path) -> list[Target]:
    from fleetd.configbase import load_yaml, read_text  # pydantic, YAML: only for a file

    filename = str(path)
    data, marks = load_yaml(read_text(path), filename)
    return parse_inventory(data, marks, filename)
