"""Fleet silences and drift as pure logic: matcher positions, node selection, majorities."""

from __future__ import annotations

import pytest

from fleetd.alert.matchers import parse_matcher
from fleetd.alert.silence_store import Silence
from fleetd.model import GpuIdentity
from fleetd.registry.drift import (
    NodeVersions,
    drifts,
    fleet_drift,
    majority,
    node_versions,
    partition_layout,
)
from fleetd.registry.silences import (
    ACK_CLOCK_GRACE,
    FleetAck,
    FleetSilence,
    MatcherError,
    check_silence,
    for_node,
    parse_matchers,
)


def silence(node_matchers: list[str], matchers: list[str], ends_at: float = 200.0) -> FleetSilence:
    alert_matchers = tuple(parse_matcher(m) for m in matchers)
    local = Silence("s1", alert_matchers, 100.0, ends_at, "alice", "rack swap", 100.0, 100.0)
    return FleetSilence(local, tuple(parse_matcher(m) for m in node_matchers))


def test_a_bad_matcher_is_refused_with_its_position() -> None:
    with pytest.raises(MatcherError) as caught:
        parse_matchers(['cluster="eu1"', "rack"], "node")
    assert caught.value.position == 2 and str(caught.value).startswith("node matcher 2 ('rack')")
    with pytest.raises(MatcherError) as regex:
        parse_matchers(['alertname=~"Gpu(Ecc"'], "alert")
    assert "alert matcher 1" in str(regex.value) and "at character" in str(regex.value)
    assert [m.name for m in parse_matchers(['a="1"', "b!~x.*"], "alert")] == ["a", "b"]


def test_a_silence_that_would_mute_the_whole_fleet_or_nothing_is_refused() -> None:
    args = {"starts_at": 10.0, "ends_at": 20.0, "created_by": "alice", "now": 10.0}
    with pytest.raises(ValueError, match="at least one"):
        check_silence((), (), **args)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="every alert of the fleet"):
        check_silence((parse_matcher('rack=~".*"'),), (), **args)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="future"):
        check_silence((parse_matcher('rack="r1"'),), (), **{**args, "now": 30.0})  # type: ignore[arg-type]
    check_silence((parse_matcher('rack="r1"'),), (), **args)  # type: ignore[arg-type]


def test_node_matchers_select_nodes_by_labels_and_name() -> None:
    s = silence(['cluster="eu1"', 'rack=~"r1[0-2]"'], ['alertname="GpuEccUncorrectableError"'])
    assert s.applies_to("n1", {"cluster": "eu1", "rack": "r11"})
    assert not s.applies_to("n2", {"cluster": "eu1", "rack": "r13"})
    assert not s.applies_to("n3", {"rack": "r11"})
    by_name = silence(['node="n4"'], [])
    assert by_name.applies_to("n4", {}) and not by_name.applies_to("n5", {})
    (local,) = for_node([s, by_name], "n1", {"cluster": "eu1", "rack": "r10"})
    assert local.id == "fleet:s1" and local.ends_at == 200.0
    assert local.comment == "[fleet] rack swap" and local.created_by == "alice"
    labels = (("alertname", "GpuEccUncorrectableError"), ("gpu", "3"))
    assert local.mutes(labels, 150.0) and not local.mutes(labels, 200.0)


def test_the_majority_and_the_tolerance() -> None:
    counts = {"6.14.14": 7, "6.12.1": 2, "6.10.5": 1}
    assert majority(counts) == "6.14.14" and majority({"b": 1, "a": 1}) == "a"
    assert drifts("6.12.1", counts, 0.0) and not drifts("6.14.14", counts, 0.0)
    assert not drifts("6.12.1", counts, 0.2) and drifts("6.10.5", counts, 0.2)
    assert not drifts(None, counts, 0.0)


def test_fleet_drift_groups_by_sku_and_lists_the_minorities() -> None:
    def v(sku: str, driver: str | None, vbios: str = "022.050") -> NodeVersions:
        return NodeVersions(sku, driver=driver, vbios=vbios, fleetd="0.1.0")

    rows = [
        ("a", v("MI355X", "6.14.14")),
        ("b", v("MI355X", "6.14.14")),
        ("c", v("MI355X", "6.12.1", "022.040")),
        ("d", v("MI355X", None)),
        ("e", v("MI300X", "6.10.5")),
    ]
    groups, found = fleet_drift(rows)
    assert groups == {"MI355X": 4, "MI300X": 1}
    assert [(m.sku, m.component, m.version, m.majority, m.nodes) for m in found] == [
        ("MI355X", "driver", "6.12.1", "6.14.14", ("c",)),
        ("MI355X", "vbios", "022.040", "022.050", ("c",)),
    ]
    assert fleet_drift(rows, tolerance=0.25)[1] == []


def test_a_nodes_versions_from_its_gpus() -> None:
    def gpu(i: int, vbios: str) -> GpuIdentity:
        return GpuIdentity(i, f"u{i}", f"b{i}", model="MI355X", vbios=vbios, driver_version="6.14")

    found = node_versions([gpu(0, "x"), gpu(1, "y"), gpu(2, "x")], amdsmi="7.0.2", fleetd="0.1")
    assert found == NodeVersions(
        "MI355X", "6.14", "7.0.2", "x|y", None, "0.1", None, gpus_physical=3
    )
    assert node_versions([], amdsmi=None, fleetd="0.1").sku is None


def test_the_partition_layout_of_a_node() -> None:
    assert partition_layout([(0, "SPX", "NPS1"), (1, "SPX", "NPS1")]) == "SPX/NPS1"
    assert partition_layout([(0, "CPX", "NPS4"), (1, "SPX", None)]) == "CPX/NPS4|SPX/?"
    assert partition_layout([(0, None, None)]) is None


def test_a_fleet_acknowledgement_covers_episodes_that_began_before_it() -> None:
    ack = FleetAck(
        "a1",
        (parse_matcher('cluster="us2"'),),
        (parse_matcher('alertname="GpuEccUncorrectableError"'),),
        "bob",
        "on it",
        1000.0,
    )
    labels = (("alertname", "GpuEccUncorrectableError"), ("gpu", "3"))
    assert ack.applies_to("n3", {"cluster": "us2"}) and not ack.applies_to("n1", {})
    assert ack.covers(labels, 900.0) and ack.covers(labels, 1000.0 + ACK_CLOCK_GRACE)
    assert not ack.covers(labels, 1000.0 + ACK_CLOCK_GRACE + 1)  # a later episode
    assert not ack.covers((("alertname", "GpuMissing"),), 900.0)
