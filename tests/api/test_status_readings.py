"""The key readings of the status page, computed in one pass with each series' role
remembered, are those of a plain grouping by GPU and filtering by labels (the reference
below) for every poll: a value that changed shows in the next poll's, a missing one is
null."""

from __future__ import annotations

from fleetd.api.status import KEY_READINGS, _indexed
from fleetd.api.views import gpu_of
from fleetd.model import Reading, Snapshot, label_value, make_labels

TS = 1_767_225_600.0


def _reading(metric: str, gpu: int | None, value: float | None, **extra: object) -> Reading:
    labels = {"gpu": gpu, "uuid": f"u{gpu}", **extra} if gpu is not None else extra
    return Reading(metric, make_labels(labels), value, TS)


def _snapshot(hotspot: float | None, power: float, pages: tuple[float, float]) -> Snapshot:
    readings = (
        _reading("fleetd_gpu_temperature_celsius", 0, hotspot, sensor="hotspot"),
        _reading("fleetd_gpu_temperature_celsius", 0, 40.0, sensor="edge"),  # no key reading
        _reading("fleetd_gpu_temperature_celsius", 1, 55.0, sensor="hotspot"),
        _reading("fleetd_gpu_power_watts", 0, power),
        _reading("fleetd_gpu_power_watts", 1, 300.0),
        _reading("fleetd_gpu_retired_pages", 0, pages[0], reason="sbe"),  # summed
        _reading("fleetd_gpu_retired_pages", 0, pages[1], reason="dbe"),
        _reading("fleetd_gpu_info", 2, 1.0, serial="S2", bdf="0000:03:00.0"),  # info only
        _reading("fleetd_gpu_power_watts", None, 9.0),  # node-level: no GPU
        _reading("fleetd_gpu_utilization_ratio", 1, 0.5, engine="gfx"),
        # XGMI: every port read down includes the port to itself; "down" is the links that
        # read 0 (GpuXgmiLinkDown's), so 1 here, not 2
        _reading("fleetd_gpu_xgmi_links", 1, 6.0, state="up"),
        _reading("fleetd_gpu_xgmi_links", 1, 2.0, state="down"),
        *(_reading("fleetd_gpu_xgmi_link_up", 1, float(p != 3), link=p) for p in (0, 2, 3)),
    )
    return Snapshot("n", TS, (), readings)


def _by_gpu(snapshot: Snapshot, metrics: set[str]) -> dict[int, list[Reading]]:
    out: dict[int, list[Reading]] = {}
    for reading in snapshot.readings:
        gpu = gpu_of(reading.labels)
        if reading.metric in metrics and gpu is not None:
            out.setdefault(gpu, []).append(reading)
    return out


def _reference(snapshot: Snapshot) -> dict[int, dict[str, float | None]]:
    """Per GPU, each key reading: None when it has no series or one is missing, else the sum
    or the last value, as its spec says."""
    out: dict[int, dict[str, float | None]] = {}
    wanted = {spec.metric for spec in KEY_READINGS} | {"fleetd_gpu_info"}
    for gpu, found in _by_gpu(snapshot, wanted).items():
        keys: dict[str, float | None] = {}
        for spec in KEY_READINGS:
            values = [
                r.value
                for r in found
                if r.metric == spec.metric
                and all(label_value(r.labels, k) == v for k, v in spec.labels)
            ]
            if not values or any(v is None for v in values):
                keys[spec.name] = None
            elif spec.combine == "sum":
                keys[spec.name] = float(sum(v for v in values if v is not None))
            elif spec.combine == "zeros":
                keys[spec.name] = float(len([v for v in values if v == 0]))
            else:
                keys[spec.name] = values[-1]
        out[gpu] = keys
    return out


def test_key_readings_equal_the_reference_poll_after_poll() -> None:
    for snapshot in (
        _snapshot(61.0, 500.0, (1.0, 2.0)),
        _snapshot(62.5, 500.0, (1.0, 3.0)),  # changed values
        _snapshot(None, 480.0, (1.0, 3.0)),  # a key reading missing in this poll
    ):
        infos, keys = _indexed(snapshot)
        assert keys == _reference(snapshot)
        wanted = {spec.metric for spec in KEY_READINGS} | {"fleetd_gpu_info"}
        assert set(infos) == set(_by_gpu(snapshot, wanted))
        info = _by_gpu(snapshot, {"fleetd_gpu_info"})
        for gpu, found in infos.items():
            assert found.by_metric.get("fleetd_gpu_info") == info.get(gpu)
    assert keys[0]["temperature_hotspot_c"] is None and keys[0]["power_w"] == 480.0
    assert keys[0]["retired_pages"] == 4.0 and keys[1]["utilization_gfx"] == 0.5
    assert keys[1]["xgmi_links_up"] == 6.0 and keys[1]["xgmi_links_down"] == 1.0
    assert set(keys[2].values()) == {None}
