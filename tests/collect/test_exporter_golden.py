"""The full /metrics text for a fixed simulated MI355X node, seed and time.

The golden file guards names, labels, types, help and values. Regenerate it after an
intended change with ``FLEETD_UPDATE_GOLDEN=1 python -m pytest tests/collect``.
Process metrics (CPU, memory, fds, start time) and the wall time of amdsmi calls depend on
this process and are normalised.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleetd.clock import FakeClock
from fleetd.collect.abi import amdsmi_info
from fleetd.collect.catalog import CATALOG, GPU_METRICS, SELF_METRICS, VLLM_METRICS
from fleetd.collect.exporter import FleetdExporter
from fleetd.model import OutOfService, Sample, SeriesKey, ServiceReason, Snapshot
from fleetd.rules.health import NodeHealth, assess
from fleetd.rules.metrics import health_readings
from fleetd.vllm.collector import TokensPerJouleTracker, worker_readings
from fleetd.vllm.config import VllmWorkerConfig
from fleetd.vllm.metrics import VllmValues, parse_vllm_metrics

from .conftest import make_rig

GOLDEN = Path(__file__).parent / "golden" / "metrics_mi355x_seed7.prom"
UPDATE = os.environ.get("FLEETD_UPDATE_GOLDEN") == "1"
START = 1_767_225_600.0  # 2026-01-01T00:00:00Z
PROCESS_LINE = re.compile(
    r"^((?:process_[a-z_]+|fleetd_amdsmi_call_seconds_total)(?:\{[^}]*\})?) .*$", re.MULTILINE
)
"""Lines whose values depend on this process: its own metrics, and amdsmi's wall time."""

NODE = "gpu-node-golden"
NODE_LABELS = {"cluster": "inference-eu1", "rack": "r12"}
HEALTH_METRICS = {
    "fleetd_gpu_health",
    "fleetd_gpu_health_data_age_seconds",
    "fleetd_gpu_service",
    "fleetd_node_health",
    "fleetd_node_health_data_age_seconds",
}
DRAINED = OutOfService(ServiceReason.DRAINED, "run-golden", "drain", "drained", START, "fan")

WORKERS = [
    VllmWorkerConfig(name="llama-tp4", url="http://127.0.0.1:8000", gpus=[0, 1, 2, 3]),
    VllmWorkerConfig(name="qwen", url="http://127.0.0.1:8004", gpus=[4]),
]


def serving_text(step: int) -> str:
    """Every serving histogram and counter fleetd reads, as vLLM names them."""
    from fleetd.vllm.serving import COUNTERS, HISTOGRAMS

    labels = 'engine="0",model_name="m"'
    lines: list[str] = []
    for names in HISTOGRAMS.values():
        lines.append(f"# TYPE {names[0]} histogram")
        for le, n in (("0.1", 2 + step), ("1.0", 5 + step), ("+Inf", 6 + step)):
            lines.append(f'{names[0]}_bucket{{{labels},le="{le}"}} {n}')
        lines.append(f"{names[0]}_sum{{{labels}}} {2.5 + step}")
        lines.append(f"{names[0]}_count{{{labels}}} {6 + step}")
    for names in COUNTERS.values():
        base = names[0].removesuffix("_total")
        lines += [f"# TYPE {base} counter", f"{names[0]}{{{labels}}} {100 + step}"]
    lines.append("# TYPE vllm:request_success counter")
    for reason, n in (("stop", 5), ("length", 1), ("abort", 0)):
        lines.append(f'vllm:request_success_total{{{labels},finished_reason="{reason}"}} {n}')
    return "\n".join(lines) + "\n"


def render_fixed_node() -> str:
    """Poll the simulated node twice 5 s apart, scrape two fixed vLLM states, render."""
    clock = FakeClock(START)
    rig = make_rig(clock, seed=7, load=0.6)
    try:
        rig.node.inject(3, "ecc_ce_storm", rate_per_s=2.0)
        rig.node.inject(6, "pcie_downgrade")
        registry = CollectorRegistry()
        exporter = FleetdExporter(registry, node=NODE, node_labels=NODE_LABELS)
        tracker = TokensPerJouleTracker(WORKERS)
        for step, tokens in enumerate((10_000.0, 18_000.0)):
            if step:
                clock.advance(5.0)
            now = clock.now()
            snapshot = rig.poller.poll(now)
            exporter.update(snapshot)
            serving = parse_vllm_metrics(serving_text(step)).serving
            vllm = worker_readings(
                WORKERS[0], True, VllmValues(7, 2, 0.55, tokens, serving), None, now
            ) + worker_readings(WORKERS[1], False, VllmValues(), "unreachable", now)
            derived = tracker.update(vllm, snapshot, now)
            exporter.update_vllm(vllm + derived, failed_workers=["qwen"])
            exporter.update_group("rules", health_readings(health_of(snapshot), now))
            exporter.update_group("backend", [amdsmi_info(rig.backend.abi, now)])
            exporter.update_group("amdsmi", rig.backend.meter.readings(now))
        exporter.record_missed_poll()
        return generate_latest(registry).decode()
    finally:
        rig.close()


def health_of(snapshot: Snapshot) -> NodeHealth:
    """The health verdict of the poll with GPU 6 drained (no alerts: nothing was evaluated)."""
    up: dict[SeriesKey, Sample | None] = {
        r.key: None if r.value is None else Sample(r.ts, r.value)
        for r in snapshot.readings
        if r.metric == "fleetd_gpu_up"
    }
    return assess(up, [], snapshot.ts, stale_after_s=17.5, service={"6": DRAINED})


def normalise(text: str) -> str:
    return PROCESS_LINE.sub(lambda m: f"{m.group(1)} <process-dependent>", text)


@pytest.fixture(scope="module")
def metrics_text() -> str:
    return render_fixed_node()


def test_metrics_match_the_golden_file(metrics_text: str) -> None:
    actual = normalise(metrics_text)
    if UPDATE:
        GOLDEN.write_text(actual)
    assert GOLDEN.exists(), f"{GOLDEN} is missing: run with FLEETD_UPDATE_GOLDEN=1"
    assert actual == GOLDEN.read_text(), "run with FLEETD_UPDATE_GOLDEN=1 if the change is intended"


def test_rendering_is_deterministic(metrics_text: str) -> None:
    assert normalise(render_fixed_node()) == normalise(metrics_text)


def test_everything_exported_is_in_the_catalog(metrics_text: str) -> None:
    families = list(text_string_to_metric_families(metrics_text))
    assert families
    seen = set()
    for family in families:
        name = family.name + "_total" if family.type == "counter" else family.name
        assert name in CATALOG, f"{name} is exported but not in the catalog"
        spec = CATALOG[name]
        assert family.type == spec.type, name
        assert family.documentation == spec.help, name
        for sample in family.samples:
            allowed = set(spec.labels) | ({"le"} if spec.type == "histogram" else set())
            if spec.config_labels:  # fleetd_node_info: plus the config's node.labels
                assert set(sample.labels) == allowed | set(NODE_LABELS), (name, sample.labels)
                continue
            assert set(sample.labels) <= allowed, (name, sample.labels)
            if spec.type not in ("histogram", "summary"):
                assert set(sample.labels) == set(spec.labels), (name, sample.labels)
        seen.add(name)
    # the fixed node exercises every GPU, vLLM and poll metric fleetd has
    not_here = {
        "fleetd_config_last_reload_success",
        "fleetd_gpu_power_average_watts",  # N/A on MI3xx-class GPUs
        "fleetd_gpu_xgmi_error_status",  # unreadable on gfx942/gfx950: not exported
        # the event series exist once an event arrived (tests/events/test_wiring.py)
        "fleetd_gpu_kernel_events_total",
        "fleetd_gpu_kernel_event_age_seconds",
        "fleetd_gpu_cper_records_total",
        "fleetd_gpu_cper_last_fatal_age_seconds",
        "fleetd_gpu_unplanned_resets_total",
        "fleetd_gpu_unplanned_reset_age_seconds",
    }
    mine = {spec.name for spec in (*GPU_METRICS, *VLLM_METRICS, *SELF_METRICS)}
    expected = (mine | HEALTH_METRICS) - not_here
    assert expected - seen == set()


def test_node_info_carries_the_node_labels(metrics_text: str) -> None:
    assert (
        'fleetd_node_info{cluster="inference-eu1",node="gpu-node-golden",rack="r12"} 1.0'
        in metrics_text
    )


def test_a_drained_gpu_is_out_of_service_never_healthy(metrics_text: str) -> None:
    values = {
        line.split(",uuid=")[0]: line.rsplit(" ", 1)[1]
        for line in metrics_text.splitlines()
        if line.startswith(("fleetd_gpu_health{", "fleetd_gpu_service{"))
    }
    assert values['fleetd_gpu_health{gpu="6",state="out_of_service"'] == "1.0"
    assert values['fleetd_gpu_health{gpu="6",state="healthy"'] == "0.0"
    assert values['fleetd_gpu_service{gpu="6",state="drained"'] == "1.0"
    assert values['fleetd_gpu_service{gpu="6",state="in_service"'] == "0.0"
    assert values['fleetd_gpu_health{gpu="5",state="healthy"'] == "1.0"
    assert values['fleetd_gpu_service{gpu="5",state="in_service"'] == "1.0"
    assert 'fleetd_node_health{state="out_of_service"} 1.0' in metrics_text


def test_node_label_names_are_made_valid_and_never_replace_the_node() -> None:
    from fleetd.collect.exporter import node_info_labels

    labels = {"rack-id": "r1", "9zone": "z", "node": "other", "__x": "y", "rack_id": "dup"}
    assert node_info_labels("n1", labels) == {"node": "n1", "_9zone": "z", "rack_id": "dup"}


def test_missing_readings_are_absent_not_zero(metrics_text: str) -> None:
    # average power is N/A on MI3xx: no sample at all, and counted as missing
    assert "fleetd_gpu_power_average_watts{" not in metrics_text
    assert 'fleetd_gpu_readings_missing{collector="power",gpu="0"' in metrics_text
    # the unreachable worker has up=0 and no other vLLM samples
    assert 'fleetd_vllm_up{gpu="4",worker="qwen"} 0.0' in metrics_text
    assert 'fleetd_vllm_requests_running{gpu="4",worker="qwen"}' not in metrics_text


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_check_metrics_passes(metrics_text: str) -> None:
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=metrics_text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == "", (
        result.stdout + result.stderr
    )


def test_fast_render_is_byte_identical_to_generate_latest() -> None:
    clock = FakeClock(START)
    rig = make_rig(clock, seed=7, load=0.6)
    try:
        registry = CollectorRegistry()
        exporter = FleetdExporter(registry)
        for _ in range(2):
            clock.advance(5.0)
            exporter.update(rig.poller.poll(clock.now()))
            now = clock.now()
            exporter.update_vllm(
                worker_readings(WORKERS[0], True, VllmValues(1, 2, 0.3, 40.0), None, now)
            )
            fast = exporter.render()
            standard = generate_latest(registry)
            assert normalise(fast.decode()) == normalise(standard.decode())
    finally:
        rig.close()
