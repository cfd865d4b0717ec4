"""Every metric fleetd exports: name, type, unit, help and labels, in one place.

Names carry their unit (``_celsius``, ``_watts``, ``_bytes``, ``_seconds``, ``_ratio``) and
counters end in ``_total``. Internal readings use these same names, so rules, the store,
/metrics, the Prometheus rule export and the dashboards share one vocabulary. A test checks
that /metrics exposes nothing outside this catalog and that dashboards query nothing outside it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter", "info", "histogram", "summary"]

GPU = ("gpu", "uuid")


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    type: MetricType
    unit: str
    help: str
    labels: tuple[str, ...] = ()
    config_labels: bool = False  # also carries the labels of fleetd.yaml's node.labels


def _m(name: str, type_: MetricType, unit: str, help_: str, *labels: str) -> MetricSpec:
    return MetricSpec(name, type_, unit, help_, tuple(labels))


GPU_METRICS: tuple[MetricSpec, ...] = (
    # identity and presence
    _m(
        "fleetd_gpu_info",
        "gauge",
        "",
        "GPU identity; the value is always 1.",
        *GPU,
        "bdf",
        "serial",
        "product",
        "model",
        "vbios",
        "driver_version",
        "kfd_id",
        "hip_id",
        "hive_id",
    ),
    _m(
        "fleetd_gpu_up",
        "gauge",
        "",
        "1 when the GPU enumerated and answered its last poll within the timeout, 0 when it is missing or hung.",
        *GPU,
    ),
    _m(
        "fleetd_gpu_readings_missing",
        "gauge",
        "",
        "Readings of this GPU that were missing in the last poll (unsupported, N/A, error or timeout).",
        *GPU,
        "collector",
    ),
    # temperature
    _m(
        "fleetd_gpu_temperature_celsius",
        "gauge",
        "celsius",
        "Current temperature per sensor: hotspot (junction), hbm (VRAM), edge where present, vr (max voltage regulator).",
        *GPU,
        "sensor",
    ),
    _m(
        "fleetd_gpu_temperature_limit_celsius",
        "gauge",
        "celsius",
        "Temperature limits the GPU itself reports, per sensor: critical (throttle) and emergency (shutdown).",
        *GPU,
        "sensor",
        "limit",
    ),
    # power and energy
    _m("fleetd_gpu_power_watts", "gauge", "watts", "Current socket power.", *GPU),
    _m(
        "fleetd_gpu_power_average_watts",
        "gauge",
        "watts",
        "Average socket power as reported by the GPU (absent on MI300-class).",
        *GPU,
    ),
    _m("fleetd_gpu_power_cap_watts", "gauge", "watts", "Power cap in force.", *GPU),
    _m(
        "fleetd_gpu_energy_joules_total",
        "counter",
        "joules",
        "Energy consumed since the driver loaded.",
        *GPU,
    ),
    # ECC / RAS
    _m(
        "fleetd_gpu_ecc_errors_total",
        "counter",
        "",
        "ECC errors of all blocks since the driver loaded, by type: correctable, uncorrectable, deferred.",
        *GPU,
        "type",
    ),
    _m(
        "fleetd_gpu_ecc_block_errors_total",
        "counter",
        "",
        "ECC errors per RAS block since the driver loaded, by type.",
        *GPU,
        "block",
        "type",
    ),
    _m(
        "fleetd_gpu_ecc_enabled",
        "gauge",
        "",
        "1 when ECC is enabled for the RAS block.",
        *GPU,
        "block",
    ),
    _m(
        "fleetd_gpu_retired_pages",
        "gauge",
        "",
        "HBM pages retired (bad pages recorded in the board EEPROM), by status: reserved, pending, unreservable.",
        *GPU,
        "status",
    ),
    _m(
        "fleetd_gpu_retired_pages_threshold",
        "gauge",
        "",
        "Bad-page count at which the driver marks the GPU bad (needs root and debugfs).",
        *GPU,
    ),
    # PCIe
    _m("fleetd_gpu_pcie_link_width_lanes", "gauge", "lanes", "Current PCIe link width.", *GPU),
    _m(
        "fleetd_gpu_pcie_link_max_width_lanes",
        "gauge",
        "lanes",
        "Maximum PCIe link width the GPU supports.",
        *GPU,
    ),
    _m(
        "fleetd_gpu_pcie_link_speed_gigatransfers_per_second",
        "gauge",
        "GT/s",
        "Current PCIe link speed (32 = Gen5).",
        *GPU,
    ),
    _m(
        "fleetd_gpu_pcie_link_max_speed_gigatransfers_per_second",
        "gauge",
        "GT/s",
        "Maximum PCIe link speed the GPU supports.",
        *GPU,
    ),
    _m("fleetd_gpu_pcie_replays_total", "counter", "", "PCIe replays.", *GPU),
    _m(
        "fleetd_gpu_pcie_replay_rollovers_total",
        "counter",
        "",
        "PCIe replay-counter rollovers.",
        *GPU,
    ),
    _m(
        "fleetd_gpu_pcie_l0_recoveries_total",
        "counter",
        "",
        "PCIe link transitions from L0 to recovery.",
        *GPU,
    ),
    _m("fleetd_gpu_pcie_naks_sent_total", "counter", "", "PCIe NAKs sent.", *GPU),
    _m("fleetd_gpu_pcie_naks_received_total", "counter", "", "PCIe NAKs received.", *GPU),
    # XGMI
    _m(
        "fleetd_gpu_xgmi_link_up",
        "gauge",
        "",
        "1 when the XGMI port is up, 0 when a port that was up is not (only ports in the "
        "GPU's learned baseline, every port seen up, are exported).",
        *GPU,
        "link",
    ),
    _m(
        "fleetd_gpu_xgmi_links",
        "gauge",
        "",
        "XGMI ports by the state amdsmi reports (up, down, disabled); a GPU's port to itself counts, and may read down on a healthy board: links down are fleetd_gpu_xgmi_link_up == 0.",
        *GPU,
        "state",
    ),
    _m(
        "fleetd_gpu_xgmi_error_status",
        "gauge",
        "",
        "XGMI error status: 0 no errors, 1 error, 2 multiple errors. Not exported where the "
        "library cannot read it (MI300X/MI325X/MI350X/MI355X: INVAL); see XGMI_WAFL ECC counts.",
        *GPU,
    ),
    _m(
        "fleetd_gpu_xgmi_read_bytes_total",
        "counter",
        "bytes",
        "Data read over each XGMI link.",
        *GPU,
        "link",
    ),
    _m(
        "fleetd_gpu_xgmi_write_bytes_total",
        "counter",
        "bytes",
        "Data written over each XGMI link.",
        *GPU,
        "link",
    ),
    # throttling
    _m(
        "fleetd_gpu_throttle_residency_total",
        "counter",
        "",
        "Firmware throttle-residency accumulator per reason (ppt, socket_thermal, hbm_thermal, vr_thermal, prochot); divide its increase by fleetd_gpu_throttle_accumulation_total's.",
        *GPU,
        "reason",
    ),
    _m(
        "fleetd_gpu_throttle_accumulation_total",
        "counter",
        "",
        "Firmware accumulation counter, the denominator of the throttle residencies.",
        *GPU,
    ),
    _m(
        "fleetd_gpu_throttle_ratio",
        "gauge",
        "ratio",
        "Fraction of the last poll interval the GPU spent throttled, per reason.",
        *GPU,
        "reason",
    ),
    # utilisation, memory, clocks, processes
    _m(
        "fleetd_gpu_utilization_ratio",
        "gauge",
        "ratio",
        "Engine activity, 0 to 1: gfx, memory.",
        *GPU,
        "engine",
    ),
    _m("fleetd_gpu_memory_used_bytes", "gauge", "bytes", "VRAM in use.", *GPU),
    _m("fleetd_gpu_memory_total_bytes", "gauge", "bytes", "VRAM size.", *GPU),
    _m(
        "fleetd_gpu_clock_hertz",
        "gauge",
        "hertz",
        "Current clock per domain: gfx, memory, soc.",
        *GPU,
        "domain",
    ),
    _m("fleetd_gpu_processes", "gauge", "", "Processes using the GPU (slow cadence).", *GPU),
    _m(
        "fleetd_gpu_process_memory_bytes",
        "gauge",
        "bytes",
        "Memory held by processes on the GPU (slow cadence).",
        *GPU,
    ),
)


def _histogram_series(family: str, what: str) -> tuple[MetricSpec, ...]:
    """A vLLM latency histogram: stored and read by rules as three series (``family_bucket``
    with ``le``, ``family_sum``, ``family_count``), exported as one histogram family."""
    return (
        _m(family, "histogram", "seconds", f"{what} (from vLLM's histogram).", "worker", "model", "le"),
    )  # fmt: skip


VLLM_METRICS: tuple[MetricSpec, ...] = (
    _m(
        "fleetd_vllm_up",
        "gauge",
        "",
        "1 when the vLLM worker's /health answered 200.",
        "worker",
        "gpu",
    ),
    _m(
        "fleetd_vllm_requests_running",
        "gauge",
        "",
        "Requests the worker is running (vllm:num_requests_running).",
        "worker",
        "gpu",
    ),
    _m(
        "fleetd_vllm_requests_waiting",
        "gauge",
        "",
        "Requests queued at the worker (vllm:num_requests_waiting).",
        "worker",
        "gpu",
    ),
    _m(
        "fleetd_vllm_kv_cache_usage_ratio",
        "gauge",
        "ratio",
        "KV-cache usage, 0 to 1.",
        "worker",
        "gpu",
    ),
    _m(
        "fleetd_vllm_generation_tokens_total",
        "counter",
        "",
        "Tokens generated by the worker.",
        "worker",
        "gpu",
    ),
    _m(
        "fleetd_gpu_tokens_per_joule",
        "gauge",
        "tokens/J",
        "Generation tokens per joule over the last scrape interval, per GPU.",
        *GPU,
    ),
    _m(
        "fleetd_vllm_generation_tokens_per_second",
        "gauge",
        "tokens/s",
        "Generation tokens per second of each vLLM worker over the same interval as "
        "fleetd_gpu_tokens_per_joule (the dashboards' peer comparison).",
        "worker",
    ),
)

SERVING_METRICS: tuple[MetricSpec, ...] = (
    _m(
        "fleetd_vllm_peer_slowdown_ratio",
        "gauge",
        "ratio",
        "A worker decoding slower than its peers on the node (same model): its time per token "
        "over the peers' median, minus 1, while it is an outlier, with the attribution "
        "(hardware, engine, workload), the number of peers and the level (gpu: against the "
        "node's workers; hive: the hive against the fleet's, through the registry); 0 for an "
        "hour once it is not.",
        "worker",
        "model",
        "gpu",
        "attribution",
        "peers",
        "level",
    ),
    _m(
        "fleetd_vllm_peer_compared",
        "gauge",
        "",
        "1 when the worker could be compared with enough peers, 0 when not (too few peers with "
        "data, no decode figure of its own, or — level hive — cut off from the registry).",
        "worker",
        "model",
        "level",
    ),
    # vLLM's latency histograms and serving counters (fleetd/vllm/serving.py); one series per
    # worker and model, not per GPU (the node dashboard's "Serving" row).
    *(
        spec
        for family, what in (
            ("fleetd_vllm_time_to_first_token_seconds", "Time to first token"),
            (
                "fleetd_vllm_inter_token_latency_seconds",
                "Inter-token latency (vllm:time_per_output_token_seconds before it was renamed)",
            ),
            ("fleetd_vllm_e2e_request_latency_seconds", "End-to-end request latency"),
            ("fleetd_vllm_request_queue_time_seconds", "Time requests spent queued"),
            ("fleetd_vllm_request_prefill_time_seconds", "Time requests spent in prefill"),
            ("fleetd_vllm_request_decode_time_seconds", "Time requests spent in decode"),
        )
        for spec in _histogram_series(family, what)
    ),
    _m(
        "fleetd_vllm_prompt_tokens_total",
        "counter",
        "",
        "Prompt (prefill) tokens processed (vllm:prompt_tokens_total).",
        "worker",
        "model",
    ),
    _m(
        "fleetd_vllm_preemptions_total",
        "counter",
        "",
        "Requests preempted by the engine (vllm:num_preemptions_total).",
        "worker",
        "model",
    ),
    _m(
        "fleetd_vllm_prefix_cache_queries_total",
        "counter",
        "",
        "Prefix-cache queries in tokens (vllm:prefix_cache_queries_total).",
        "worker",
        "model",
    ),
    _m(
        "fleetd_vllm_prefix_cache_hits_total",
        "counter",
        "",
        "Prefix-cache hits in tokens (vllm:prefix_cache_hits_total).",
        "worker",
        "model",
    ),
    _m(
        "fleetd_vllm_requests_finished_total",
        "counter",
        "",
        "Requests finished, by reason: stop, length, abort, error, repetition, other "
        "(vllm:request_success_total{finished_reason}).",
        "worker",
        "model",
        "reason",
    ),
)

SELF_METRICS: tuple[MetricSpec, ...] = (
    _m("fleetd_build_info", "gauge", "", "fleetd version; the value is always 1.", "version"),
    _m(
        "fleetd_amdsmi_info",
        "gauge",
        "",
        "The amdsmi Python package and the libamd_smi.so it drives, and whether fleetd has "
        "validated the pair (validated, unvalidated, unsafe); the value is always 1.",
        "package",
        "library",
        "verdict",
    ),
    MetricSpec(
        "fleetd_node_info",
        "gauge",
        "",
        "This node: its name and every label of node.labels in fleetd.yaml (cluster, rack, ...); the value is always 1.",
        ("node",),
        config_labels=True,
    ),
    _m(
        "fleetd_poll_duration_seconds",
        "histogram",
        "seconds",
        "Wall time of one poll of every GPU.",
    ),
    _m("fleetd_polls_total", "counter", "", "Polls run."),
    _m(
        "fleetd_polls_missed_total",
        "counter",
        "",
        "Polls skipped because the previous one was still running.",
    ),
    _m(
        "fleetd_collector_success",
        "gauge",
        "",
        "1 when the collector's last run succeeded for every GPU.",
        "collector",
    ),
    _m(
        "fleetd_collector_duration_seconds",
        "gauge",
        "seconds",
        "Wall time of the collector's last run over all GPUs.",
        "collector",
    ),
    _m(
        "fleetd_last_poll_timestamp_seconds",
        "gauge",
        "seconds",
        "When the last poll finished (Unix time).",
    ),
    _m("fleetd_scrape_errors_total", "counter", "", "Failed scrapes of vLLM workers.", "worker"),
    _m(
        "fleetd_amdsmi_calls_total",
        "counter",
        "",
        "amdsmi library calls made by fleetd, by function (failed calls included); "
        "per GPU per poll, this is what sets fleetd's cost on a real node.",
        "function",
    ),
    _m(
        "fleetd_amdsmi_call_seconds_total",
        "counter",
        "seconds",
        "Wall time spent inside amdsmi calls, by function; divided by "
        "fleetd_amdsmi_calls_total it is the mean latency of one call.",
        "function",
    ),
    _m(
        "fleetd_config_reloads_total",
        "counter",
        "",
        "Config reloads by result: success, failure.",
        "result",
    ),
    _m(
        "fleetd_config_last_reload_success", "gauge", "", "1 when the last config reload succeeded."
    ),
    # fleetd's own process, exported by prometheus_client's ProcessCollector with its help texts
    _m(
        "process_cpu_seconds_total",
        "counter",
        "seconds",
        "Total user and system CPU time spent in seconds.",
    ),
    _m("process_resident_memory_bytes", "gauge", "bytes", "Resident memory size in bytes."),
    _m("process_virtual_memory_bytes", "gauge", "bytes", "Virtual memory size in bytes."),
    _m(
        "process_start_time_seconds",
        "gauge",
        "seconds",
        "Start time of the process since unix epoch in seconds.",
    ),
    _m("process_open_fds", "gauge", "", "Number of open file descriptors."),
    _m("process_max_fds", "gauge", "", "Maximum number of open file descriptors."),
)

RULE_METRICS: tuple[MetricSpec, ...] = (
    _m(
        "fleetd_gpu_health",
        "gauge",
        "",
        "GPU health as a state set: 1 for the current state (healthy, degraded, unhealthy, unknown, out_of_service), 0 for the others. A GPU remediation has out of service is never healthy.",
        *GPU,
        "state",
    ),
    _m(
        "fleetd_gpu_health_data_age_seconds",
        "gauge",
        "seconds",
        "Seconds since the GPU's last successful reading (fleetd_gpu_up 1): grows while its readings are missing.",
        *GPU,
    ),
    _m(
        "fleetd_gpu_service",
        "gauge",
        "",
        "Whether the GPU serves, as a state set: 1 for in_service, or for why it is out (remediating, drained, quarantined, held), 0 for the others.",
        *GPU,
        "state",
    ),
    _m(
        "fleetd_node_health",
        "gauge",
        "",
        "Node health as a state set (worst of its GPUs and node-level alerts; out_of_service when every GPU in service is healthy but some are out): 1 for the current state.",
        "state",
    ),
    _m(
        "fleetd_node_health_data_age_seconds",
        "gauge",
        "seconds",
        "Seconds since the last successful reading of the node's least recently read GPU.",
    ),
    _m(
        "fleetd_alerts",
        "gauge",
        "",
        "Alerts by severity and state (pending, firing).",
        "severity",
        "state",
    ),
    _m(
        "fleetd_rule_health",
        "gauge",
        "",
        "1 when the rule's last evaluation succeeded, 0 when it failed (a rule problem, never a page).",
        "rule",
    ),
    _m(
        "fleetd_rule_evaluation_failures_total",
        "counter",
        "",
        "Evaluations of the rule that failed.",
        "rule",
    ),
    _m(
        "fleetd_rule_evaluation_duration_seconds",
        "gauge",
        "seconds",
        "Wall time of the last evaluation of all rules.",
    ),
    _m("fleetd_rules_loaded", "gauge", "", "Rules the engine is running."),
    _m(
        "fleetd_rule_inputs_supported",
        "gauge",
        "",
        "1 when every GPU reading the rule reads has been provided on this node, 0 when one "
        "never has: the rule can never fire here (fleetd doctor lists them).",
        "rule",
    ),
    _m(
        "fleetd_doctor_check",
        "gauge",
        "",
        "The start-up preflight (fleetd doctor): 0 ok, 1 warning, 2 failure, per check.",
        "check",
    ),
    _m(
        "fleetd_rule_reloads_total",
        "counter",
        "",
        "Rule reloads by result: success, failure.",
        "result",
    ),
    _m(
        "fleetd_rules_last_reload_success",
        "gauge",
        "",
        "1 when the last rule reload succeeded (or none was tried).",
    ),
)

ALERT_METRICS: tuple[MetricSpec, ...] = (
    _m(
        "fleetd_alert_notifications_sent_total",
        "counter",
        "",
        "Notifications delivered, per receiver and integration (kind/index).",
        "receiver",
        "integration",
    ),
    _m(
        "fleetd_alert_notifications_failed_total",
        "counter",
        "",
        "Notifications given up on: rejected by the receiver (4xx other than 429) or still failing after the give-up time.",
        "receiver",
        "integration",
    ),
    _m(
        "fleetd_alert_notifications_retried_total",
        "counter",
        "",
        "Failed attempts scheduled for a retry (5xx, 429, timeouts, network errors).",
        "receiver",
        "integration",
    ),
    _m(
        "fleetd_alert_config_errors_total",
        "counter",
        "",
        "Notifications the receiver rejected as wrong (4xx other than 408/429): a configuration error.",
        "receiver",
        "integration",
    ),
    _m(
        "fleetd_alert_receiver_rejecting",
        "gauge",
        "",
        "1 while the receiver's last answer was a rejection (configuration error), 0 after a success.",
        "receiver",
        "integration",
    ),
    _m(
        "fleetd_alert_outbox_pending",
        "gauge",
        "",
        "Notifications waiting in the outbox (outbox depth).",
        "receiver",
        "integration",
    ),
    _m(
        "fleetd_alert_outbox_oldest_pending_age_seconds",
        "gauge",
        "seconds",
        "Age of the oldest notification waiting in the outbox; 0 when none waits.",
        "receiver",
        "integration",
    ),
)

REMEDIATION_METRICS: tuple[MetricSpec, ...] = (
    _m(
        "fleetd_remediation_mode",
        "gauge",
        "",
        "Remediation mode in force (off, dry-run, on); the value is always 1.",
        "mode",
    ),
    _m(
        "fleetd_remediation_paused",
        "gauge",
        "",
        "1 while a person has paused automatic remediation.",
    ),
    _m(
        "fleetd_remediation_breaker_open",
        "gauge",
        "",
        "1 while the circuit breaker holds automatic remediation (until a person resets it).",
        "scope",
    ),
    _m(
        "fleetd_remediation_runs_active",
        "gauge",
        "",
        "Remediation runs not yet concluded on this node.",
    ),
    _m(
        "fleetd_remediation_runs_total",
        "counter",
        "",
        "Concluded remediation runs in the journal, by plan and outcome (done, quarantined, aborted, drained).",
        "plan",
        "outcome",
    ),
    _m("fleetd_remediation_resets_total", "counter", "", "GPU (hive) resets remediation issued."),
    _m(
        "fleetd_remediation_gpus_held",
        "gauge",
        "",
        "GPUs of this node held out of service after a run (quarantined, drained, cancelled mid-way).",
    ),
    _m(
        "fleetd_remediation_gpus_out_of_service",
        "gauge",
        "",
        "GPUs the remediation cap counts as out of service, in its scope (this node, or the fleet).",
        "scope",
    ),
)

STORE_METRICS: tuple[MetricSpec, ...] = (
    _m(
        "fleetd_store_errors_total",
        "counter",
        "",
        "Failed storage operations by op: open, write, read, maintenance, event, corrupt (a corrupt file moved aside).",
        "op",
    ),
    _m(
        "fleetd_store_degraded",
        "gauge",
        "",
        "1 while storage writes fail and polls are kept in memory only (rules keep evaluating from memory).",
    ),
    _m(
        "fleetd_evidence_write_failing",
        "gauge",
        "",
        "1 while the last evidence bundle could not be written even after dropping the oldest (a full disk; FleetdStorageDegraded).",
    ),
    _m(
        "fleetd_evidence_dropped_for_space_total",
        "counter",
        "",
        "Evidence bundles dropped, oldest first, to make room on a full disk.",
    ),
    _m(
        "fleetd_store_samples_written_total",
        "counter",
        "",
        "Samples written to the local database.",
    ),
    _m(
        "fleetd_store_disk_bytes",
        "gauge",
        "bytes",
        "Bytes the local database takes on disk (SQLite file and WAL, or PostgreSQL relation sizes).",
    ),
    _m(
        "fleetd_store_budget_dropped_bytes_total",
        "counter",
        "bytes",
        "Stored telemetry deleted early, oldest first, to keep the database within its disk budget.",
    ),
    _m(
        "fleetd_store_backlog_polls",
        "gauge",
        "",
        "Polls held in memory waiting for the database to accept writes again.",
    ),
    _m(
        "fleetd_store_backlog_dropped_polls_total",
        "counter",
        "",
        "Polls never written because the in-memory backlog was full during a storage outage.",
    ),
)

CLOCK_METRICS: tuple[MetricSpec, ...] = (
    _m(
        "fleetd_clock_offset_seconds",
        "gauge",
        "seconds",
        "Wall clock minus fleetd's steady clock, which slews at 5 % towards it after a wall-clock step (positive: fleetd's time is behind).",
    ),
    _m(
        "fleetd_clock_steps_total",
        "counter",
        "",
        "Wall-clock steps of half a second or more seen (NTP, date -s); fleetd's own time never steps with them.",
    ),
    _m(
        "fleetd_clock_reanchors_total",
        "counter",
        "",
        "Times fleetd's steady clock jumped to the wall clock because it was more than a day off; durations running across a jump are not kept.",
    ),
)

EVENT_METRICS: tuple[MetricSpec, ...] = (
    # fleetd.events: kernel log and CPER records, counted on arrival (not polled: a GPU
    # without events has none of these, which is no blind spot)
    _m(
        "fleetd_gpu_kernel_events_total",
        "counter",
        "",
        "amdgpu faults the kernel log reported since fleetd started, by kind (ras_error, gpu_reset, ring_timeout, page_fault, ...) and severity (RAS/AER severity, reset phase, or error).",
        *GPU,
        "kind",
        "severity",
    ),
    _m(
        "fleetd_gpu_kernel_event_age_seconds",
        "gauge",
        "seconds",
        "Seconds since the newest kernel-log fault of this kind and severity.",
        *GPU,
        "kind",
        "severity",
    ),
    _m(
        "fleetd_gpu_cper_records_total",
        "counter",
        "",
        "Fresh CPER records read since fleetd started (stale ones, from before the boot or too old, are not counted), by severity and the AFID that decided their action.",
        *GPU,
        "severity",
        "afid",
    ),
    _m(
        "fleetd_gpu_cper_last_fatal_age_seconds",
        "gauge",
        "seconds",
        "Seconds since the newest fresh fatal CPER record; its AFID and the action the AFID table names (none, reset, reboot, physical).",
        *GPU,
        "afid",
        "action",
    ),
    _m(
        "fleetd_gpu_unplanned_resets_total",
        "counter",
        "",
        "GPU resets the kernel reported while no fleetd run had the GPU out of service.",
        *GPU,
    ),
    _m(
        "fleetd_gpu_unplanned_reset_age_seconds",
        "gauge",
        "seconds",
        "Seconds since the newest GPU reset not started by fleetd.",
        *GPU,
    ),
    _m(
        "fleetd_gpu_driver_events_total",
        "counter",
        "",
        "KFD SMI events (amdsmi event reader) received since fleetd started, by event (vmfault, thermal_throttle, gpu_pre_reset, gpu_post_reset, ...).",
        *GPU,
        "event",
    ),
    _m(
        "fleetd_gpu_driver_event_age_seconds",
        "gauge",
        "seconds",
        "Seconds since the newest KFD SMI event of this kind.",
        *GPU,
        "event",
    ),
    _m(
        "fleetd_gpu_fault_incident_open",
        "gauge",
        "",
        "1 while an uncorrectable-fault incident of the GPU is open (until the run that handles it verifies the GPU), 0 for 15 minutes after it closed. Labels are the first report's: source (counters, kernel, cper), class (the report's severity: fatal, non_fatal_uncorrected, uncorrectable, deferred, poison), afid and action ('' when that report had none).",
        *GPU,
        "source",
        "class",
        "afid",
        "action",
    ),
    _m(
        "fleetd_event_source_input_total",
        "counter",
        "",
        "What the event sources met since fleetd started, by source (kernel_log, cper, amdsmi_events) and kind: bad input (malformed_buffer, truncated_record, unparsed, file_rotated, read_failed, ...) and routine counts (records.fatal, events.vmfault, prefiltered, ...).",
        "source",
        "kind",
    ),
)

FLEET_METRICS: tuple[MetricSpec, ...] = (
    # fleetd.registry: what the heartbeat last read back from the fleet registry
    _m(
        "fleetd_version_drift",
        "gauge",
        "",
        "1 when this node runs another version of the item (driver, amdsmi, vbios, firmware, fleetd, partition) than the majority of its SKU group in the fleet registry, 0 when it runs the majority's; absent while unknown.",
        "item",
        "version",
        "majority",
    ),
    _m(
        "fleetd_fleet_silences",
        "gauge",
        "",
        "Fleet-wide silences from the registry that name this node and have not ended (kept, until each ends, while the registry cannot be read).",
    ),
    _m(
        "fleetd_registry_heartbeat_failures_total",
        "counter",
        "",
        "Heartbeats that could not publish to or read from the fleet registry; alerting goes on without it.",
    ),
)

KPI_METRICS: tuple[MetricSpec, ...] = (
    # reliability KPIs and rule precision over remediation.kpi_window (fleetd.remedy.kpi)
    _m("fleetd_kpi_window_seconds", "gauge", "seconds", "The window the fleetd_kpi_* and rule precision gauges cover (remediation.kpi_window)."),
    _m("fleetd_kpi_repairs", "gauge", "", "Fault runs back in service in the window: automatic (the run re-admitted on its own) or manual (it held its GPUs until a person released them).", "repair"),
    _m("fleetd_kpi_time_to_repair_seconds", "gauge", "seconds", "Mean time from the trigger to back in service of the window's repairs, automatic or manual.", "repair"),
    _m("fleetd_kpi_remediation_runs", "gauge", "", "Automatic reset/reboot runs (not dry) concluded in the window: succeeded (done) or failed (quarantined, aborted).", "result"),
    _m("fleetd_kpi_remediation_success_ratio", "gauge", "ratio", "Succeeded over concluded automatic runs in the window (absent while none concluded)."),
    _m("fleetd_kpi_readmission_seconds", "gauge", "seconds", "Mean time from trigger to done of the window's successful runs (the sum of their stages)."),
    _m("fleetd_kpi_readmission_stage_seconds", "gauge", "seconds", "Mean time the window's successful runs spent per stage: queued, drain, capture, reset, verify, validate, worker_start, back_in_rotation.", "stage"),
    _m("fleetd_kpi_gpu_incidents", "gauge", "", "Incidents (a run an alert started, or a critical alert with no run) per GPU in the window.", "gpu", "serial"),
    _m("fleetd_kpi_gpu_time_between_incidents_seconds", "gauge", "seconds", "Mean time between a GPU's incidents in the window (with two or more).", "gpu", "serial"),
    _m("fleetd_kpi_hive_incidents", "gauge", "", "Incidents of a hive's GPUs in the window.", "hive"),
    _m("fleetd_kpi_hive_time_between_incidents_seconds", "gauge", "seconds", "Mean time between a hive's incidents in the window (with two or more).", "hive"),
    _m("fleetd_kpi_gpu_out_of_service_seconds", "gauge", "seconds", "GPU-seconds remediation runs kept GPUs out of service within the window (drain to back in service; still held: until now); / 3600 for GPU-hours."),
    _m("fleetd_rule_mode", "gauge", "", "A loaded rule's trust stage (shadow, alert, remediate); the value is always 1.", "rule", "mode"),
    _m("fleetd_rule_remediation_verdicts", "gauge", "", "A rule's automatic runs in the window by what they found: fault_found (verification or validation failed, or the trigger proved the fault), nothing_found (done on a symptom alone), recurred (faulted again within probation).", "rule", "verdict"),
    _m("fleetd_rule_precision_ratio", "gauge", "ratio", "A rule's runs that found a real fault or recurred, over its runs judged in the window (absent while none).", "rule"),
    _m("fleetd_rule_alerts_resolved_without_action", "gauge", "", "A rule's alerts that resolved in the window with no run touching their GPU.", "rule"),
    _m("fleetd_rule_shadow_firings", "gauge", "", "Firings of a rule in shadow mode in the window (logged, never notified, never remediated).", "rule"),
)  # fmt: skip

CATALOG: dict[str, MetricSpec] = {
    spec.name: spec
    for group in (
        GPU_METRICS,
        EVENT_METRICS,
        VLLM_METRICS,
        SERVING_METRICS,
        SELF_METRICS,
        RULE_METRICS,
        ALERT_METRICS,
        REMEDIATION_METRICS,
        STORE_METRICS,
        CLOCK_METRICS,
        FLEET_METRICS,
        KPI_METRICS,
    )
    for spec in group
}


def spec(name: str) -> MetricSpec:
    """The catalog entry of ``name``; KeyError for a metric fleetd does not export."""
    return CATALOG[name]


HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
"""The series a histogram family is written as (``x_bucket`` with ``le``, ``x_sum``, ``x_count``)."""

def _series(specs: Iterable[MetricSpec]) -> frozenset[str]:
    return frozenset(
        spec.name + suffix
        for spec in specs
        for suffix in (HISTOGRAM_SERIES if spec.type == "histogram" else ("",))
    )


EXPORTED_ONLY = frozenset({"fleetd_doctor_check"})
"""Catalog names in a rule-readable group that only /metrics shows (the start-up preflight)."""

SERIES_NAMES: frozenset[str] = _series(
    spec
    for group in (
        GPU_METRICS,
        EVENT_METRICS,
        VLLM_METRICS,
        SERVING_METRICS,
        RULE_METRICS,
        STORE_METRICS,
        FLEET_METRICS,
    )
    for spec in group
    if spec.name not in EXPORTED_ONLY
)
"""Every metric name fleetd writes into its window and store, so every name a rule can read:
the polls' GPU series, the event sources' and fault incidents', vLLM and serving, the rules'
own (health, coverage), the store's and the fleet registry's; a histogram as its three series,
never by its family name. fleetd has no recording rules: a rule's result is an alert, not a
series."""

METRICS_ONLY: frozenset[str] = _series(CATALOG.values()) - SERIES_NAMES
"""Names only /metrics shows, computed at a scrape or kept by the exporter (build and process
info, the polls' own timing, amdsmi call counts, the clock check, the preflight, alert delivery,
remediation and the reliability KPIs): a rule cannot read them."""
