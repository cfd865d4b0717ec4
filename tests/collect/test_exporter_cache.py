"""What ``FleetdExporter.render`` keeps between scrapes (each series' last line, each group's
text) never shows an old value: every render equals prometheus_client's own text of the
same state, a changed value is seen at the next render, a series gone is gone."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import fleetd.collect.exporter as exporter_module
from fleetd.collect.exporter import FleetdExporter, renders_alike
from fleetd.model import GpuIdentity, GpuStatus, Reading, Snapshot, make_labels

TS = 1_767_225_600.0
GPUS = tuple(
    GpuStatus(GpuIdentity(index=i, uuid=f"u{i}", bdf=f"0000:0{i}:00.0"), True, True)
    for i in range(2)
)


def _gpu(metric: str, gpu: int, value: float | None, ts: float = TS, **extra: object) -> Reading:
    return Reading(metric, make_labels({"gpu": gpu, "uuid": f"u{gpu}", **extra}), value, ts)


def _snapshot(power: tuple[float | None, float | None], ts: float = TS) -> Snapshot:
    readings = (
        _gpu("fleetd_gpu_power_watts", 0, power[0], ts),
        _gpu("fleetd_gpu_power_watts", 1, power[1], ts),
        _gpu("fleetd_gpu_temperature_celsius", 0, 61.0, ts, sensor="hotspot"),
    )
    return Snapshot("n", ts, GPUS, readings)


def _store(values: list[float], ts: float = TS) -> list[Reading]:
    names = ("fleetd_store_samples_written_total", "fleetd_store_degraded")
    return [Reading(n, (), v, ts) for n, v in zip(names, values, strict=False)]


@pytest.fixture
def exporter() -> tuple[FleetdExporter, CollectorRegistry]:
    registry = CollectorRegistry()
    return FleetdExporter(registry, process_metrics=False), registry


def _render(pair: tuple[FleetdExporter, CollectorRegistry]) -> str:
    exporter, registry = pair
    fast = exporter.render()
    assert fast == generate_latest(registry)
    return fast.decode()


def test_a_gpu_value_that_changed_since_the_last_poll_shows_at_the_next_render(exporter):
    exporter[0].update(_snapshot((500.0, 510.0)))
    first = _render(exporter)
    assert 'fleetd_gpu_power_watts{gpu="1",uuid="u1"} 510.0' in first
    exporter[0].update(_snapshot((500.0, 512.5), ts=TS + 1))
    second = _render(exporter)
    assert 'fleetd_gpu_power_watts{gpu="1",uuid="u1"} 512.5' in second
    assert "510.0" not in second
    assert 'fleetd_gpu_power_watts{gpu="0",uuid="u0"} 500.0' in second


def test_a_gpu_reading_missing_in_the_next_poll_disappears_and_comes_back(exporter):
    exporter[0].update(_snapshot((500.0, 510.0)))
    _render(exporter)
    exporter[0].update(_snapshot((500.0, None), ts=TS + 1))
    assert 'gpu="1"' not in _render(exporter).split("fleetd_gpu_temperature")[0]
    exporter[0].update(_snapshot((500.0, 510.0), ts=TS + 2))
    assert 'fleetd_gpu_power_watts{gpu="1",uuid="u1"} 510.0' in _render(exporter)


def test_zero_and_minus_zero_are_written_as_they_are(exporter):
    exporter[0].update(_snapshot((0.0, 1.0)))
    assert 'fleetd_gpu_power_watts{gpu="0",uuid="u0"} 0.0' in _render(exporter)
    exporter[0].update(_snapshot((-0.0, 1.0), ts=TS + 1))
    assert 'fleetd_gpu_power_watts{gpu="0",uuid="u0"} -0.0' in _render(exporter)


def test_a_group_replaced_by_the_same_values_is_not_built_again(exporter, monkeypatch):
    exporter[0].update_group("store", _store([10.0, 0.0]))
    _render(exporter)
    built: list[int] = []
    real = exporter_module.render_readings_text

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(exporter_module, "render_readings_text", counting)
    exporter[0].update_group("store", _store([10.0, 0.0], ts=TS + 5))  # only the time moved
    assert "fleetd_store_samples_written_total 10.0" in _render(exporter)
    assert built == []
    exporter[0].update_group("store", _store([11.0, 0.0], ts=TS + 10))
    assert "fleetd_store_samples_written_total 11.0" in _render(exporter)
    assert built == [1]


def test_a_series_dropped_from_a_group_disappears(exporter):
    exporter[0].update_group("store", _store([10.0, 2.0]))
    assert "fleetd_store_degraded 2.0" in _render(exporter)
    exporter[0].update_group("store", _store([10.0]))
    text = _render(exporter)
    assert "fleetd_store_degraded" not in text
    assert "fleetd_store_samples_written_total 10.0" in text


def test_renders_alike_compares_what_is_written():
    base = _store([1.0, 0.0])
    assert renders_alike(base, _store([1.0, 0.0], ts=TS + 1))
    assert not renders_alike(base, _store([1.0, -0.0]))
    assert not renders_alike(base, _store([1.0]))
    assert not renders_alike(base, _store([2.0, 0.0]))
    nan = [Reading("fleetd_store_samples_written_total", (), float("nan"), TS)]
    assert not renders_alike(nan, nan)  # NaN is written afresh, never assumed the same
    missing = [Reading("fleetd_store_samples_written_total", (), None, TS)]
    assert renders_alike(missing, list(missing))
    assert not renders_alike(missing, _store([1.0]))


def test_a_changed_value_keeps_a_label_value_with_spaces_and_quotes_whole(exporter):
    def running(value: float) -> list[Reading]:
        labels = make_labels({"gpu": 0, "worker": 'llama "tp 4" a\\b'})
        return [Reading("fleetd_vllm_requests_running", labels, value, TS)]

    exporter[0].update_vllm(running(3.0))
    assert " 3.0\n" in _render(exporter)
    exporter[0].update_vllm(running(1e21))
    assert 'worker="llama \\"tp 4\\" a\\\\b"} 1e+21\n' in _render(exporter)
