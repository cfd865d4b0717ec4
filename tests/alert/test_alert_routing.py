"""The routing tree: first match wins unless ``continue``, inheritance, group keys."""

from __future__ import annotations

from typing import Any

from fleetd.alert.config import AlertingConfig
from fleetd.alert.routing import Route, build_routes
from fleetd.model import make_labels


def tree(route: dict[str, Any]) -> Route:
    cfg = AlertingConfig.model_validate(
        {
            "receivers": [{"name": n, "console": [{}]} for n in ("default", "pager", "chat", "am")],
            "route": route,
        }
    )
    return build_routes(cfg.root_route())


def receivers(root: Route, **labels: str) -> list[str]:
    return [r.receiver for r in root.match(make_labels(labels))]


ROUTE = {
    "receiver": "default",
    "group_by": ["alertname", "node"],
    "group_wait": "10s",
    "routes": [
        {
            "matchers": ['severity="critical"'],
            "receiver": "pager",
            "continue": True,
            "repeat_interval": "1h",
        },
        {
            "matchers": ['severity=~"critical|warning"'],
            "receiver": "chat",
            "group_by": ["..."],
            "routes": [{"matchers": ['alertname="VllmWorkerDown"'], "group_wait": "0s"}],
        },
        {"matchers": ['severity="info"'], "receiver": "am"},
    ],
}


def test_first_match_wins_unless_continue() -> None:
    root = tree(ROUTE)
    assert receivers(root, severity="critical", alertname="GpuHot") == ["pager", "chat"]
    assert receivers(root, severity="warning", alertname="GpuHot") == ["chat"]
    assert receivers(root, severity="info") == ["am"]
    assert receivers(root, severity="debug") == ["default"]


def test_children_inherit_unset_values() -> None:
    root = tree(ROUTE)
    pager, chat, _ = root.routes
    assert (pager.group_wait, pager.group_interval, pager.repeat_interval) == (10, 300, 3600)
    assert pager.group_by == ("alertname", "node")
    (worker,) = chat.routes
    assert worker.receiver == "chat" and worker.group_wait == 0 and worker.group_by_all
    assert root.repeat_interval == 4 * 3600


def test_group_labels_and_keys() -> None:
    root = tree(ROUTE)
    labels = make_labels({"alertname": "GpuHot", "node": "n1", "gpu": "3", "severity": "warning"})
    assert root.group_labels(labels) == make_labels({"alertname": "GpuHot", "node": "n1"})
    chat = root.routes[1]
    assert chat.group_labels(labels) == labels
    assert root.group_key(root.group_labels(labels)) == '{}:{alertname="GpuHot",node="n1"}'
    assert chat.id != root.routes[0].id


def test_defaults_are_alertmanagers() -> None:
    root = build_routes(AlertingConfig().root_route())
    assert (root.group_wait, root.group_interval, root.repeat_interval) == (30, 300, 14400)
    assert root.group_by == () and root.receiver == "console"
