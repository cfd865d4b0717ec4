"""Inventory files: host lists with ranges, addresses, names, and errors with their line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetd.cli.fleetctl_http import Target
from fleetd.cli.fleetctl_inventory import (
    DEFAULT_AGENT_PORT,
    expand_hosts,
    load_inventory,
    targets_from_address,
)
from fleetd.config import DEFAULT_HTTP_PORT
from fleetd.errors import ConfigError


def test_ranges_expand_with_padding_lists_and_products() -> None:
    assert expand_hosts("gpu-node-[001-003]") == ["gpu-node-001", "gpu-node-002", "gpu-node-003"]
    assert expand_hosts("n[1,3,7-9]") == ["n1", "n3", "n7", "n8", "n9"]
    assert expand_hosts("r[1-2]-g[08-10]") == [
        "r1-g08", "r1-g09", "r1-g10", "r2-g08", "r2-g09", "r2-g10",
    ]  # fmt: skip
    assert expand_hosts("plain") == ["plain"]
    assert len(expand_hosts("gpu-node-[001-128]")) == 128


@pytest.mark.parametrize(
    "bad", ["n[3-1]", "n[a-b]", "n[1-", "n]1[", "n[]", "n[1-2-3]", "n[0-999999]"]
)
def test_bad_ranges_are_errors(bad: str) -> None:
    with pytest.raises(ValueError):
        expand_hosts(bad)


def test_addresses_become_targets_with_the_default_port() -> None:
    assert targets_from_address("gpu-node-[1-2]:9000") == [
        Target("gpu-node-1", "http://gpu-node-1:9000"),
        Target("gpu-node-2", "http://gpu-node-2:9000"),
    ]
    assert targets_from_address("node7") == [Target("node7", "http://node7:9477")]
    assert targets_from_address("https://node7.example:9443") == [
        Target("node7.example", "https://node7.example:9443")
    ]
    assert targets_from_address("10.0.0.5:9477", "gpu-node-001") == [
        Target("gpu-node-001", "http://10.0.0.5:9477")
    ]
    for bad in ("ftp://x:1", "host:99999", "a b", "-bad-:1"):
        with pytest.raises(ValueError):
            targets_from_address(bad)


def test_the_default_port_is_the_agents() -> None:
    assert DEFAULT_AGENT_PORT == DEFAULT_HTTP_PORT


def test_a_file_with_every_kind_of_entry(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "# the fleet\n"
        "- gpu-node-[001-128]:9477\n"
        "- https://edge-[1-2].example:9443\n"
        "- {name: lab-box, address: '127.0.0.1:18000'}\n"
    )
    targets = load_inventory(path)
    assert len(targets) == 131
    assert targets[0] == Target("gpu-node-001", "http://gpu-node-001:9477")
    assert targets[-1] == Target("lab-box", "http://127.0.0.1:18000")


def test_an_inventory_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_bytes(b"- gpu-\xff\n")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_inventory(path)


def test_every_problem_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("- ok-[1-2]\n- {name: x}\n- 42\n- ok-1\n")
    with pytest.raises(ConfigError) as caught:
        load_inventory(path)
    text = str(caught.value)
    assert f"{path}:2:3: [1]:" in text
    assert f"{path}:3:3: [2]:" in text
    assert "duplicate node names: ok-1" in text
    not_a_list = tmp_path / "map.yaml"
    not_a_list.write_text("nodes: [a]\n")
    with pytest.raises(ConfigError, match="must be a YAML list"):
        load_inventory(not_a_list)
    with pytest.raises(ConfigError, match="cannot read"):
        load_inventory(tmp_path / "missing.yaml")


@given(st.text(max_size=40))
def test_any_text_is_a_host_list_or_a_value_error(text: str) -> None:
    try:
        hosts = expand_hosts(text)
    except ValueError:
        return
    assert hosts and all(isinstance(h, str) for h in hosts)
