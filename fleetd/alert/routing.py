"""The routing tree: which receivers an alert goes to, and how it is grouped there.

Alertmanager's semantics (docs/configuration.md, ``route``): the root matches everything;
children are tried in order and the first that matches wins unless it has ``continue: true``;
an alert that matches a node but none of its children stays at that node. Children inherit
``receiver``, ``group_by``, ``group_wait``, ``group_interval`` and ``repeat_interval``.
``group_by: ['...']`` groups by every label, i.e. one group per alert.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fleetd.alert.config import RouteConfig
from fleetd.alert.matchers import format_matcher, parse_matcher
from fleetd.model import Labels
from fleetd.query import Matcher, matches_all


@dataclass(frozen=True, slots=True)
class Route:
    """One node of the tree with every inherited value resolved."""

    id: str
    receiver: str
    matchers: tuple[Matcher, ...]
    continue_: bool
    group_by: tuple[str, ...]
    group_by_all: bool
    group_wait: float
    group_interval: float
    repeat_interval: float
    routes: tuple[Route, ...] = ()

    def match(self, labels: Labels) -> list[Route]:
        """The routes (leaves of the matching path) that take an alert with ``labels``."""
        if not matches_all(labels, self.matchers):
            return []
        found: list[Route] = []
        for child in self.routes:
            hits = child.match(labels)
            found.extend(hits)
            if hits and not child.continue_:
                break
        return found or [self]

    def group_labels(self, labels: Labels) -> Labels:
        """The labels that identify the alert's group at this route."""
        if self.group_by_all:
            return labels
        wanted = set(self.group_by)
        return tuple((k, v) for k, v in labels if k in wanted)

    def group_key(self, group_labels: Labels) -> str:
        inner = ",".join(f'{k}="{v}"' for k, v in group_labels)
        return f"{self.id}:{{{inner}}}"

    def walk(self) -> list[Route]:
        out = [self]
        for child in self.routes:
            out.extend(child.walk())
        return out


def build_routes(root: RouteConfig) -> Route:
    """Resolve inheritance; ``root`` must carry every default (``AlertingConfig.root_route``)."""
    assert root.receiver is not None
    assert root.group_wait is not None and root.group_interval is not None
    assert root.repeat_interval is not None and root.group_by is not None
    parent = Route(
        id="{}",
        receiver=root.receiver,
        matchers=(),
        continue_=False,
        group_by=tuple(root.group_by),
        group_by_all="..." in root.group_by,
        group_wait=root.group_wait,
        group_interval=root.group_interval,
        repeat_interval=root.repeat_interval,
    )
    children = tuple(_child(c, parent, i) for i, c in enumerate(root.routes))
    return replace(parent, routes=children)


def _child(config: RouteConfig, parent: Route, index: int) -> Route:
    matchers = tuple(parse_matcher(m) for m in config.matchers)
    inner = ",".join(format_matcher(m) for m in matchers)
    group_by = parent.group_by if config.group_by is None else tuple(config.group_by)
    node = Route(
        id=f"{parent.id}/{index}{{{inner}}}",
        receiver=config.receiver or parent.receiver,
        matchers=matchers,
        continue_=config.continue_,
        group_by=group_by,
        group_by_all="..." in group_by,
        group_wait=_pick(config.group_wait, parent.group_wait),
        group_interval=_pick(config.group_interval, parent.group_interval),
        repeat_interval=_pick(config.repeat_interval, parent.repeat_interval),
    )
    children = tuple(_child(c, node, i) for i, c in enumerate(config.routes))
    return replace(node, routes=children)


def _pick(value: float | None, inherited: float) -> float:
    return inherited if value is None else float(value)
