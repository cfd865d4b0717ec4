"""node.labels (cluster, rack, …) reach /metrics (fleetd_node_info), the status document and
the fleet registry row."""

from __future__ import annotations

from pathlib import Path

import requests

from fleetd.registry.reader import RegistryReader
from fleetd.registry.store import RegistryPublisher
from tests.api.agent import start_agent

LABELS = {"cluster": "inference-eu1", "rack": "r12"}


def test_node_labels_in_metrics_status_and_the_registry(tmp_path: Path) -> None:
    agent = start_agent(tmp_path / "agent", name="gpu-node-042", labels=LABELS)
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    publisher = RegistryPublisher(url, address=agent.url)
    reader = RegistryReader(url)
    try:
        agent.tick()
        metrics = requests.get(agent.url + "/metrics", timeout=10).text
        info = 'fleetd_node_info{cluster="inference-eu1",node="gpu-node-042",rack="r12"} 1.0'
        assert info in metrics
        status = requests.get(agent.url + "/api/v1/status", timeout=10).json()
        assert status["labels"] == LABELS
        publisher.publish(status, agent.clock.now())
        (node,) = reader.fleet(agent.clock.now(), stale_after=60)
        assert dict(node.summary.labels) == LABELS
        assert node.summary.to_dict()["labels"] == LABELS
    finally:
        reader.close()
        publisher.close()
        agent.stop()


def test_a_node_without_labels_has_node_info_with_its_name(tmp_path: Path) -> None:
    agent = start_agent(tmp_path / "agent", name="gpu-node-043")
    try:
        agent.tick()
        metrics = requests.get(agent.url + "/metrics", timeout=10).text
        assert 'fleetd_node_info{node="gpu-node-043"} 1.0' in metrics
        status = requests.get(agent.url + "/api/v1/status", timeout=10).json()
        assert status["labels"] == {}
    finally:
        agent.stop()
