"""Exporter behaviour that needs no GPU: missing readings, unknown metrics, self-metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import fleetd
from fleetd.collect.exporter import FleetdExporter, render_readings
from fleetd.model import CollectorResult, GpuIdentity, GpuStatus, Reading, Snapshot, make_labels

GPU = GpuIdentity(index=0, uuid="uuid-0", bdf="0000:05:00.0")
TS = 1_767_225_600.0


def _labels(**extra: object):
    return make_labels({"gpu": 0, "uuid": "uuid-0", **extra})


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_missing_readings_are_not_exported_as_samples():
    readings = [
        Reading("fleetd_gpu_temperature_celsius", _labels(sensor="hotspot"), 61.0, TS),
        Reading("fleetd_gpu_temperature_celsius", _labels(sensor="edge"), None, TS, "na"),
        Reading("fleetd_gpu_power_watts", _labels(), None, TS, "busy"),
    ]
    families = render_readings(readings)
    assert [f.name for f in families] == ["fleetd_gpu_temperature_celsius"]
    (sample,) = families[0].samples
    assert sample.labels["sensor"] == "hotspot" and sample.value == 61.0


def test_unknown_metric_and_wrong_labels_are_dropped():
    readings = [
        Reading("fleetd_gpu_made_up_metric", _labels(), 1.0, TS),
        Reading("fleetd_gpu_power_watts", _labels(), 500.0, TS),
        Reading("fleetd_gpu_power_watts", _labels(extra="x"), 501.0, TS),
    ]
    families = render_readings(readings)
    assert [f.name for f in families] == ["fleetd_gpu_power_watts"]
    assert [s.value for s in families[0].samples] == [500.0]


def test_counters_carry_total_suffix():
    readings = [Reading("fleetd_gpu_energy_joules_total", _labels(), 12.5, TS)]
    registry = CollectorRegistry()
    exporter = FleetdExporter(registry, process_metrics=False)
    exporter.update(Snapshot("n", TS, (GpuStatus(GPU, True, True),), tuple(readings)))
    text = generate_latest(registry).decode()
    assert "# TYPE fleetd_gpu_energy_joules_total counter" in text
    assert 'fleetd_gpu_energy_joules_total{gpu="0",uuid="uuid-0"} 12.5' in text
    assert "_created" not in text


def test_self_metrics_count_polls_misses_durations_and_reloads():
    registry = CollectorRegistry()
    exporter = FleetdExporter(registry, process_metrics=False, poll_buckets=(0.1, 1.0))
    for duration in (0.05, 0.5, 3.0):
        exporter.update(
            Snapshot(
                "n",
                TS,
                (),
                (),
                collectors=(
                    CollectorResult("temperature", True, 0.01),
                    CollectorResult("xgmi", False, 0.5, "timeout on gpu 3"),
                ),
                duration_s=duration,
            )
        )
    exporter.record_missed_poll()
    exporter.record_config_reload(True)
    exporter.record_config_reload(False)
    exporter.update_vllm([], failed_workers=["w1", "w1", "w2"])
    samples = _samples(registry)
    assert samples[("fleetd_polls_total", ())] == 3
    assert samples[("fleetd_polls_missed_total", ())] == 1
    assert samples[("fleetd_poll_duration_seconds_bucket", (("le", "0.1"),))] == 1
    assert samples[("fleetd_poll_duration_seconds_bucket", (("le", "1.0"),))] == 2
    assert samples[("fleetd_poll_duration_seconds_bucket", (("le", "+Inf"),))] == 3
    assert samples[("fleetd_poll_duration_seconds_sum", ())] == 3.55
    assert samples[("fleetd_collector_success", (("collector", "temperature"),))] == 1
    assert samples[("fleetd_collector_success", (("collector", "xgmi"),))] == 0
    assert samples[("fleetd_last_poll_timestamp_seconds", ())] == TS + 3.0
    assert samples[("fleetd_scrape_errors_total", (("worker", "w1"),))] == 2
    assert samples[("fleetd_config_reloads_total", (("result", "failure"),))] == 1
    assert samples[("fleetd_config_last_reload_success", ())] == 0
    assert samples[("fleetd_build_info", (("version", fleetd.__version__),))] == 1


def test_exporter_uses_only_the_registry_it_is_given():
    from prometheus_client import REGISTRY

    before = set(REGISTRY._collector_to_names)
    FleetdExporter(CollectorRegistry())
    assert set(REGISTRY._collector_to_names) == before


def test_fast_render_escapes_like_prometheus_client():
    odd = GpuIdentity(
        index=0,
        uuid='uu"id\\0',
        bdf="0000:05:00.0",
        product='AMD "Instinct"\nMI355X \\ OAM',
    )
    readings = (
        Reading(
            "fleetd_gpu_info",
            make_labels(
                {
                    "gpu": 0,
                    "uuid": odd.uuid,
                    "bdf": odd.bdf,
                    "serial": "",
                    "product": odd.product,
                    "model": "MI355X",
                    "vbios": "",
                    "driver_version": "",
                    "kfd_id": "",
                    "hip_id": "",
                    "hive_id": "",
                }
            ),
            1.0,
            TS,
        ),
        Reading("fleetd_gpu_energy_joules_total", odd.labels, 1.5e12, TS),
        Reading(
            "fleetd_gpu_temperature_celsius",
            make_labels({"gpu": 0, "uuid": odd.uuid, "sensor": "hbm"}),
            -3.0,
            TS,
        ),
    )
    registry = CollectorRegistry()
    exporter = FleetdExporter(registry, process_metrics=False)
    exporter.update(Snapshot("n", TS, (GpuStatus(odd, True, True),), readings))
    assert exporter.render() == generate_latest(registry)
    assert exporter.render() == generate_latest(registry)  # cached prefixes give the same
