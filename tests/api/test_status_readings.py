"""The key readings of the status page, computed in one pass with each series' role
remembered, are those of ``index_readings`` + ``key_readings`` (the plain reference) for
every poll: a value that changed shows in the next poll's, a missing one is null."""

from __future__ import annotations

from fleetd.api.status import _indexed, index_readings, key_readings
from fleetd.model import Reading, Snapshot, make_labels

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
    )
    return Snapshot("n", TS, (), readings)


def _reference(snapshot: Snapshot) -> dict[int, dict[str, float | None]]:
    return {gpu: key_readings(found) for gpu, found in index_readings(snapshot).items()}


def test_key_readings_equal_the_reference_poll_after_poll() -> None:
    for snapshot in (
        _snapshot(61.0, 500.0, (1.0, 2.0)),
        _snapshot(62.5, 500.0, (1.0, 3.0)),  # changed values
        _snapshot(None, 480.0, (1.0, 3.0)),  # a key reading missing in this poll
    ):
        infos, keys = _indexed(snapshot)
        assert keys == _reference(snapshot)
        reference = index_readings(snapshot)
        assert set(infos) == set(reference)
        for gpu, found in infos.items():
            assert found.by_metric.get("fleetd_gpu_info") == reference[gpu].by_metric.get(
                "fleetd_gpu_info"
            )
    assert keys[0]["temperature_hotspot_c"] is None and keys[0]["power_w"] == 480.0
    assert keys[0]["retired_pages"] == 4.0 and keys[1]["utilization_gfx"] == 0.5
    assert set(keys[2].values()) == {None}
