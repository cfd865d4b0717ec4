"""The fleetd.yaml reference, generated from the schema itself so that it cannot drift.

``reference_markdown()`` walks ``FleetdConfig`` and every section model under it and writes
one table per section: key, type, default, allowed values and what the key does.
``fleetd config reference`` prints it; docs/configuration.md is that output, and a test
holds the two equal.

Where each part comes from:

* type and default: the pydantic field (durations print as ``5m``, secrets as ``secret``);
* allowed values: the field's annotated limits (``ge``, ``min_length``, ``pattern``) and the
  messages of the validators that check it, read from their source, so a new check shows up
  here without anyone writing it down twice;
* the description: the field's ``description``, else a docstring right under the field,
  else ``FIELD_NOTES`` below, else the comment on the field's own line;
* a section's text: its class docstring, else ``SECTION_NOTES``; the model validators'
  messages are listed under it as the section's checks.
"""

from __future__ import annotations

import ast
import inspect
import io
import socket
import textwrap
import tokenize
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from fleetd.config import FleetdConfig
from fleetd.configbase import Secret, StrictModel, format_duration, parse_duration

GIB = 1024**3
MIB = 1024**2
LONG_DEFAULT = 60
"""A default longer than this (as text) is shown in a YAML block under its table."""

# ------------------------------------------------------------------------------------ prose
# Descriptions of fields whose model says nothing about them (no description, docstring or
# line comment). Keyed by the class that declares the field; a test checks every key here
# names a real field and that every field ends up described.
FIELD_NOTES: dict[str, str] = {
    # fleetd.yaml's top level and the sections in fleetd/config.py
    "FleetdConfig.node": "How this node names itself.",
    "FleetdConfig.state_dir": (
        "Directory for fleetd's own data: the SQLite database `fleetd.db` (unless `store.path` "
        "or `store.url` says otherwise). The systemd unit's `StateDirectory=fleetd` creates it."
    ),
    "FleetdConfig.backend": "Where GPU telemetry comes from.",
    "FleetdConfig.poll": "Polling cadence and per-GPU timeout.",
    "FleetdConfig.http": "The HTTP server (/metrics, /healthz, /api/v1).",
    "FleetdConfig.logging": "Log format and level.",
    "FleetdConfig.vllm": "The vLLM workers on this node.",
    "FleetdConfig.rules": "Which health rules run.",
    "FleetdConfig.alerting": "Receivers, routing, inhibition and delivery of alerts.",
    "FleetdConfig.store": "The local database and its retention.",
    "FleetdConfig.api": "Who may change things through the API.",
    "FleetdConfig.remediation": "Automatic remediation (dry-run by default).",
    "FleetdConfig.registry": "The fleet registry this node publishes its heartbeat to.",
    "NodeConfig.name": (
        "The node's name in alerts, the API, the event log and the fleet registry. fleetctl "
        "also uses it as the host name of the agent unless `registry.address` is set."
    ),
    "NodeConfig.labels": (
        "Extra labels for this node (e.g. `rack: r12`, `cluster: inference-eu`)."
    ),
    "BackendConfig.kind": (
        "`amdsmi`: the real library (needs ROCm's libamd_smi.so and `pip install "
        "fleetd[amd]`). `simulator`: the built-in simulated node, for demos and tests. "
        "`fleetd run --simulate SCENARIO` switches to the simulator whatever this says."
    ),
    "BackendConfig.scenario": (
        "Simulator only: a shipped scenario name (fleetd/sim/scenarios/, e.g. `demo`, "
        "`thermal_runaway`) or a scenario YAML file; unset: a node without faults."
    ),
    "BackendConfig.simulated_model": (
        "Simulator only: the node it models when no scenario names one."
    ),
    "BackendConfig.seed": ("Simulator only: random seed (0 means the scenario's own seed)."),
    "PollConfig.interval": (
        "How often every GPU is read and the rules are evaluated. A poll that is still "
        "running when the next is due is not stacked: the next one is skipped and counted in "
        "`fleetd_polls_missed_total`."
    ),
    "PollConfig.gpu_timeout": (
        "How long one GPU's reads may take in one poll. A GPU that overruns has its "
        "readings marked missing for that poll (never zero); the other GPUs are not delayed."
    ),
    "PollConfig.slow_interval": (
        "How often the slow reads (the processes on each GPU) are made; they stay out of "
        "every other poll."
    ),
    "HttpConfig.bind": (
        "Address to listen on. The default, 127.0.0.1, keeps the API and /metrics on this "
        "host; set the node's address (or 0.0.0.0) for Prometheus and fleetctl to reach it."
    ),
    "HttpConfig.port": "TCP port of /metrics, /healthz and /api/v1.",
    "HttpConfig.tls_cert": "PEM certificate (chain); with `tls_key`, the server speaks HTTPS.",
    "HttpConfig.tls_key": "PEM private key of `tls_cert`.",
    "LoggingConfig.format": (
        "`json`: one JSON object per line (for journald and log shippers). `console`: "
        "readable lines for people. `fleetd run --log-format` overrides it."
    ),
    "LoggingConfig.level": "Lowest level written.",
    "VllmWorkerConfig.name": (
        "The worker's name (labels, the API, `{worker}` in remediation commands)."
    ),
    "VllmWorkerConfig.url": (
        "Base URL of the vLLM server: fleetd reads `/metrics` and `/health` for telemetry, and "
        "`/v1/models` (and optionally a 1-token completion) when re-admitting it."
    ),
    "VllmWorkerConfig.gpus": (
        "GPU indices the worker runs on (what HIP_VISIBLE_DEVICES gives it). Remediation "
        "drains every worker with a GPU in the reset unit."
    ),
    "VllmWorkerConfig.unit": (
        "The worker's systemd unit (e.g. `vllm@3.service`), which remediation's `systemd` "
        "adapter stops and starts."
    ),
    "VllmWorkerConfig.model": (
        "The served model name; re-admission waits until `/v1/models` lists it. Unset: any "
        "listed model will do."
    ),
    "VllmConfig.workers": "The vLLM servers on this node; none means no vLLM telemetry.",
    "VllmConfig.scrape_interval": "How often each worker's /metrics and /health are read.",
    "VllmConfig.timeout": "How long one worker has to answer a scrape.",
    # rules:
    "RulesConfig.shipped": "Run the rule packs shipped with fleetd.",
    "RulesConfig.packs": "Extra rule pack files or directories, loaded after the shipped ones.",
    "RulesConfig.local_dir": (
        "Site rules (`*.yaml`): a rule here with a shipped rule's name replaces it, and "
        "`disable: [Name]` switches a shipped rule off. A missing directory means none."
    ),
    "RulesConfig.stale_polls": (
        "A series not updated for this many polls is stale: a rule reading it sees no data, "
        "and a GPU whose telemetry is stale is `unknown`, never `healthy`."
    ),
    "RulesConfig.no_data_hold": (
        "How long a firing alert stays firing while its data is missing before it resolves "
        "(a GPU that stops answering is not taken as healed)."
    ),
    "RulesConfig.resolved_retention": (
        "How long a resolved alert is still shown (API, fleetctl) before it is forgotten."
    ),
    "RulesConfig.outage_tolerance": (
        "Pending alerts keep their progress towards `for` across a daemon restart shorter "
        "than this; after a longer outage they start over. Firing alerts stay firing "
        "whatever the outage."
    ),
    "RulesConfig.for_grace_period": (
        "After a restart, a pending alert of a rule whose `for` is longer than this keeps at "
        "least this long to go before it can fire (as Prometheus' `for_grace_period`)."
    ),
    "RulesConfig.runbook_base_url": (
        "Prefix for a rule's relative `runbook` path: `docs/runbooks/GpuMissing.md` becomes "
        "`<runbook_base_url>/docs/runbooks/GpuMissing.md` in the alert's `runbook_url`."
    ),
    # alerting:
    "AlertingConfig.external_url": (
        "URL of this agent as people reach it; used in notification links (PagerDuty "
        "`client_url`, Alertmanager `generatorURL`)."
    ),
    "AlertingConfig.receivers": (
        "Where notifications go; each receiver has one or more integrations. The default is "
        "one `console` receiver."
    ),
    "AlertingConfig.route": (
        "The routing tree. Unset: every alert goes to the first receiver, grouped by nothing, "
        "with Alertmanager's default timings."
    ),
    "AlertingConfig.inhibit_rules": (
        "Alerts that mute other alerts. Setting this key replaces the defaults shown, so keep "
        "them in your list if you want them."
    ),
    "AlertingConfig.delivery": "Retry policy of the notification outbox.",
    "ReceiverConfig.name": "Receiver name, referred to by `route.receiver`.",
    "ReceiverConfig.pagerduty": "PagerDuty Events API v2 integrations.",
    "ReceiverConfig.slack": "Slack integrations (incoming webhook or bot token).",
    "ReceiverConfig.webhook": "Generic webhooks (Alertmanager's webhook payload, version 4).",
    "ReceiverConfig.alertmanager": "Alertmanagers to feed (one entry per HA peer).",
    "ReceiverConfig.console": "Print alerts as lines on standard output.",
    "RateLimitConfig.per_second": "Sustained sends per second.",
    "RateLimitConfig.burst": "Sends allowed at once before the rate applies.",
    "_HttpIntegration.timeout": "How long one HTTP request to the receiver may take.",
    "_HttpIntegration.rate_limit": (
        "Token bucket for this integration. Unset: the integration's default (PagerDuty "
        "1.5/s burst 20, Slack 1/s burst 3, webhook 10/s burst 20, Alertmanager 10/s burst 10)."
    ),
    "PagerDutyConfig.routing_key": "Integration key of an Events API v2 integration.",
    "PagerDutyConfig.url": "Events API endpoint for alert events.",
    "PagerDutyConfig.change_url": "Events API endpoint for change events.",
    "PagerDutyConfig.send_resolved": "Send a resolve when the alert resolves.",
    "PagerDutyConfig.send_changes": (
        "Send remediation steps as PagerDuty change events (they never page)."
    ),
    "PagerDutyConfig.source": "PagerDuty `payload.source`; unset: the node name.",
    "PagerDutyConfig.client_url": (
        "PagerDuty `client_url` (link on the incident); unset: `alerting.external_url`."
    ),
    "PagerDutyConfig.group": "PagerDuty `payload.group` (e.g. the cluster).",
    "PagerDutyConfig.client": "PagerDuty `client` (shown with the incident).",
    "SlackConfig.webhook_url": "Incoming-webhook URL (one message per notification).",
    "SlackConfig.bot_token": (
        "Bot token for the Web API: the firing message is edited when the alert resolves and "
        "updates go in its thread. Needs `channel`."
    ),
    "SlackConfig.channel": "Channel to post to (with `bot_token`).",
    "SlackConfig.api_url": "Slack Web API base URL.",
    "SlackConfig.reply_broadcast": "Also show thread replies in the channel.",
    "SlackConfig.send_resolved": "Notify when alerts resolve (as Alertmanager, off by default).",
    "SlackConfig.send_changes": "Post remediation steps.",
    "SlackConfig.max_alerts": "Most alerts listed in one message.",
    "WebhookConfig.url": "The URL to POST to (a secret: it often carries a token).",
    "WebhookConfig.send_resolved": "Send resolved alerts.",
    "WebhookConfig.send_changes": "Send remediation steps too.",
    "WebhookConfig.max_alerts": (
        "Most alerts in one payload (the rest are counted in `truncatedAlerts`); 0: all."
    ),
    "AlertmanagerConfig.url": "Base URL of one Alertmanager, e.g. `http://127.0.0.1:9093`.",
    "AlertmanagerConfig.bearer_token": "Bearer token for Alertmanager's API, if it needs one.",
    "AlertmanagerConfig.resend_interval": (
        "Firing alerts are posted again this often, each with `endsAt` a few intervals ahead, "
        "so an Alertmanager that stops hearing from this node resolves them by itself."
    ),
    "AlertmanagerConfig.resolved_retention": (
        "How long resolved alerts keep being posted (so every HA peer hears of the resolve)."
    ),
    "ConsoleConfig.send_resolved": "Print resolves.",
    "ConsoleConfig.send_changes": "Print remediation steps.",
    "ConsoleConfig.format": "`text` lines or one JSON object per line.",
    "RouteConfig.receiver": "Receiver for alerts this route matches; inherited when unset.",
    "RouteConfig.matchers": (
        'Label matchers, all of which must match: `name="value"`, `!=`, `=~` and `!~` '
        "(regular expressions, anchored). Not allowed on the root route."
    ),
    "RouteConfig.continue_": (
        "Keep trying the following sibling routes after this one matched (key `continue`)."
    ),
    "RouteConfig.group_by": (
        "Labels that split alerts into notification groups; `[...]` groups by every label. "
        "Inherited when unset."
    ),
    "RouteConfig.group_wait": (
        "How long a new group waits for more alerts before its first notification."
    ),
    "RouteConfig.group_interval": (
        "How long a group waits before notifying about alerts added to it."
    ),
    "RouteConfig.repeat_interval": "How often a still-firing group is notified again.",
    "RouteConfig.routes": "Child routes, tried in order; the first match wins unless `continue`.",
    "InhibitRuleConfig.source_matchers": "Matchers of the alert that mutes.",
    "InhibitRuleConfig.target_matchers": "Matchers of the alerts it mutes.",
    "InhibitRuleConfig.equal": (
        "Labels that must have the same value on both (a missing label counts as empty)."
    ),
    "DeliveryConfig.initial_backoff": "First retry delay after a failed send.",
    "DeliveryConfig.max_backoff": (
        "Longest retry delay (the backoff doubles up to it, with jitter)."
    ),
    "DeliveryConfig.max_retry_after": "Longest `Retry-After` from a receiver that is honoured.",
    "DeliveryConfig.give_up_after": (
        "A notification still failing this long after it was queued is given up "
        "(`fleetd_alert_notifications_failed_total`)."
    ),
    "DeliveryConfig.retention": (
        "How long delivered and given-up notifications (and expired silences) are kept for "
        "inspection."
    ),
    # store:
    "StoreConfig.url": (
        "A SQLAlchemy URL instead of the SQLite file, e.g. "
        "`postgresql://fleetd:PASSWORD@db/fleetd_node7` (a bare `postgresql://` gets the "
        "installed driver, psycopg2 by default)."
    ),
    "StoreConfig.path": "The SQLite file; default `<state_dir>/fleetd.db`.",
    "StoreConfig.raw_retention": "How long raw samples (every poll) are kept.",
    "StoreConfig.rollup_1m_retention": "How long 1-minute rollups (min, max, avg, last) are kept.",
    "StoreConfig.rollup_1h_retention": "How long 1-hour rollups are kept.",
    "StoreConfig.event_retention": (
        "How long the event log is kept (alerts, remediation, resets, reloads, operator actions)."
    ),
    "StoreConfig.disk_budget_bytes": (
        "Upper bound on the database size: over it, the oldest stored telemetry of every tier "
        "is dropped first (`fleetd_store_budget_dropped_bytes_total`). `null`: no bound."
    ),
    "StoreConfig.memory_retention": (
        "The in-memory window the rules evaluate against; older data is read from the "
        "database. The window is refilled from the database at start-up."
    ),
    "StoreConfig.busy_timeout": (
        "How long a write waits for another writer's lock (SQLite) before it counts as failed."
    ),
    "StoreConfig.chunk_span": (
        "Raw samples are compressed into one chunk per series per span (whole minutes)."
    ),
    "StoreConfig.compact_delay": (
        "How long past the end of its span a poll's row stays uncompressed before compaction."
    ),
    "StoreConfig.maintenance_interval": (
        "How often store maintenance (compaction, rollups, retention, the disk budget) runs."
    ),
    "StoreConfig.maintenance_rows": (
        "Most rows one maintenance step handles per job, so maintenance never stalls a poll."
    ),
    "StoreConfig.retry_interval": (
        "First retry after a failed write (disk full, locked, I/O error); doubles on each "
        "failure up to `retry_interval_max`."
    ),
    "StoreConfig.retry_interval_max": "Longest wait between write retries.",
    "StoreConfig.backlog_polls": (
        "Polls kept in memory while writes fail, written once the database answers again; "
        "beyond, the oldest are dropped (`fleetd_store_backlog_dropped_polls_total`)."
    ),
    "StoreConfig.synchronous": (
        "SQLite `synchronous`: `full` makes a committed poll survive a power cut; `normal` "
        "writes less but may lose the last transactions on power loss (never corrupts)."
    ),
    # api:
    "ApiConfig.token": (
        "Bearer token that every change through the API needs (at least 16 characters). "
        "Without one the API is read-only."
    ),
    "ApiConfig.token_name": (
        "The token's name, recorded with every change it makes (the token itself never is)."
    ),
    "ApiConfig.history_window": "Default window of the GPU detail history.",
    "ApiConfig.history_points": "Most points per series in a history answer.",
    "ApiConfig.max_history_window": "Longest history window a request may ask for.",
    # remediation:
    "RemediationConfig.mode": (
        "`off`: no automatic runs. `dry-run`: runs are planned, journaled and announced, "
        "nothing is touched. `on`: fleetd acts. A person's drain/undrain/cancel always acts."
    ),
    "RemediationConfig.reset_unit": (
        "The GPUs one reset reaches: `hive` (every GPU of the XGMI hive, right for "
        "MI300/MI350-class nodes) or `gpu` (only for GPUs that are not in a hive)."
    ),
    "RemediationConfig.plans": (
        "What a rule's `remediation: {plan: NAME}` does: `reset`, `quarantine`, `reboot` or "
        "`none` (switched off)."
    ),
    "RemediationConfig.budget": "Resets per GPU before the ladder escalates.",
    "RemediationConfig.probation": (
        "A GPU that faults again this soon after being re-admitted escalates at once."
    ),
    "RemediationConfig.drain": "How workers are taken out of service.",
    "RemediationConfig.verify": "What a reset unit must show before its workers come back.",
    "RemediationConfig.readmit": "How restarted workers are checked before they take traffic.",
    "RemediationConfig.workers": "How fleetd controls the vLLM workers.",
    "RemediationConfig.reboot": (
        "Optional rung between reset and quarantine: a command that reboots the node."
    ),
    "RemediationConfig.fleet": "Cap on GPUs out of service and the circuit breaker.",
    "BudgetConfig.max_resets": "Resets allowed per GPU within `window`.",
    "BudgetConfig.window": "The sliding window of the reset budget.",
    "DrainConfig.balancer_delay": (
        "Wait after the out-of-rotation hook, for the load balancer to stop sending requests."
    ),
    "DrainConfig.poll_interval": "How often a draining worker's in-flight requests are read.",
    "DrainConfig.idle_reads": (
        "Consecutive reads with `vllm:num_requests_running` + `vllm:num_requests_waiting` = 0 "
        "that count as drained."
    ),
    "DrainConfig.timeout": "Longest wait for the workers to drain.",
    "DrainConfig.on_timeout": (
        "`proceed`: stop the workers anyway (vLLM's `--shutdown-timeout` still finishes what "
        "it can). `abort`: put the workers back into rotation and page instead of resetting."
    ),
    "DrainConfig.release_timeout": (
        "Longest wait, after the stop, for every process to let go of the unit's GPUs; then "
        "the reset is refused and the unit quarantined."
    ),
    "DrainConfig.release_poll_interval": "How often the GPUs' process lists are read meanwhile.",
    "DrainConfig.refuse_if_kfd_processes": (
        "Refuse a reset while any KFD (compute) process runs on the node: a hive reset kills "
        "every one of them, not only those on the drained GPUs."
    ),
    "BurnInConfig.command": (
        "Command (argument vector, no shell) that exercises the GPUs after a reset; exit 0 "
        "passes. `{gpus}` and `{node}` are replaced."
    ),
    "BurnInConfig.timeout": "How long the burn-in may run; on expiry it is killed and fails.",
    "VerifyConfig.healthy_polls": (
        "Consecutive healthy polls every GPU of the unit needs after the reset: up, PCIe at "
        "its maximum width and speed, every XGMI link up, no new uncorrectable errors."
    ),
    "VerifyConfig.poll_interval": "Time between verification polls.",
    "VerifyConfig.timeout": "Longest verification; a unit not healthy by then is quarantined.",
    "VerifyConfig.burn_in": "Optional burn-in command run after verification passes.",
    "ReadmitConfig.timeout": (
        "How long a restarted worker has to answer /health and list its model (loading a "
        "large model takes minutes)."
    ),
    "ReadmitConfig.poll_interval": "How often a restarted worker is checked.",
    "ReadmitConfig.completion_check": (
        "Also require a 1-token completion to succeed before the worker goes back into rotation."
    ),
    "HttpHookConfig.out_url": "URL called to take a worker out of rotation.",
    "HttpHookConfig.in_url": "URL called to put it back.",
    "HttpHookConfig.method": "HTTP method of both calls.",
    "HttpHookConfig.out_body": "Request body of the out call (JSON; placeholders replaced).",
    "HttpHookConfig.in_body": "Request body of the in call.",
    "HttpHookConfig.token": "Bearer token sent to the load balancer's API.",
    "HttpHookConfig.timeout": "How long one call may take.",
    "RotationConfig.out_command": (
        "Command that takes `{worker}` out of the load balancer's rotation "
        "(e.g. a HAProxy runtime-socket call)."
    ),
    "RotationConfig.in_command": "Command that puts it back.",
    "RotationConfig.http": "An HTTP call to the load balancer's API instead of commands.",
    "WorkerCommandsConfig.drain": "Stop sending work to `{worker}`.",
    "WorkerCommandsConfig.undrain": "Send work to `{worker}` again.",
    "WorkerCommandsConfig.status": "Print the number of requests or jobs in flight (0 = idle).",
    "WorkerCommandsConfig.ready": (
        "Exit 0 once the worker serves again; unset: the vLLM HTTP checks are used."
    ),
    "WorkerCommandsConfig.stop": "Stop the worker's processes (optional).",
    "WorkerCommandsConfig.start": "Start them again (optional).",
    "WorkersConfig.adapter": (
        "`systemd`: workers are systemd units (`vllm.workers[].unit`) behind an optional "
        "rotation hook. `command`: your own commands (Slurm, Kubernetes, a router)."
    ),
    "WorkersConfig.systemctl": "The systemctl program (found on PATH).",
    "WorkersConfig.command_timeout": (
        "Timeout of rotation hooks, `systemctl start`/`is-active` and adapter commands."
    ),
    "WorkersConfig.stop_timeout": (
        "Timeout of `systemctl stop`; keep it above the unit's `TimeoutStopSec` "
        "(90 s in systemd/vllm@.service)."
    ),
    "WorkersConfig.http_timeout": "Timeout of the HTTP reads of a worker (/metrics, /health).",
    "WorkersConfig.rotation": "The systemd adapter's load-balancer hook; unset: no rotation step.",
    "WorkersConfig.commands": "The `command` adapter's commands.",
    "RebootConfig.command": (
        "Command that reboots the node, or asks your scheduler to (`{node}`, `{gpus}` "
        "replaced). After the reboot the new daemon verifies the GPUs."
    ),
    "RebootConfig.timeout": (
        "How long the node has to go down after the request; a node still up then is quarantined."
    ),
    "RebootConfig.max_per_window": "Reboots allowed per `window`; beyond: quarantine.",
    "RebootConfig.window": "The sliding window of the reboot budget.",
    "BreakerConfig.max_failures": (
        "Distinct GPUs whose faults asked for automatic remediation within `window` that "
        "open the breaker (counted fleet-wide with a registry). It stays open until a person "
        "resets it."
    ),
    "BreakerConfig.window": "The breaker's window.",
    "FleetConfig.max_gpus_out": (
        "Most GPUs out of service at once (fleet-wide with a registry, else on this node): "
        "GPUs in a run or held after one. An automatic run that would exceed it waits; a "
        "person's drain is counted but never refused."
    ),
    "FleetConfig.breaker": "Stops automatic remediation when too many GPUs fail together.",
    "FleetConfig.lease_timeout": (
        "How long a planned run may wait for the cap (and for the run ahead of it on this "
        "node) before it gives up."
    ),
    "FleetConfig.lease_retry_interval": "How often a waiting run asks again.",
    # registry:
    "RegistryConfig.url": (
        "PostgreSQL URL of the fleet registry, "
        "`postgresql://USER:PASSWORD@HOST/DB` (the installed driver is used, psycopg2 by "
        "default). Set: this node publishes its heartbeat there, "
        "and remediation's cap and breaker become fleet-wide."
    ),
    "RegistryConfig.address": (
        "How fleetctl reaches this agent's API (`http(s)://host:port`); default "
        "`http(s)://<node.name>:<http.port>`."
    ),
    "RegistryConfig.heartbeat_interval": "How often this node's status row is published.",
    "RegistryConfig.stale_after": (
        "The age at which this node's heartbeat counts as stale. The agent does not act on "
        "it: readers judge staleness (`fleetctl --stale-after`, default 60 s), so keep the two "
        "equal."
    ),
    "RegistryConfig.timeout": "Connect timeout of the registry database.",
}

SECTION_NOTES: dict[str, str] = {
    "LoggingConfig": "Logging: structured lines on standard error (journald under systemd).",
    "VllmConfig": "The vLLM servers on this node, scraped for telemetry and drained by "
    "remediation.",
    "ReceiverConfig": "One receiver: a name and one or more integrations of any kind.",
    "WorkersConfig": "How remediation takes workers out of service and back.",
    "BurnInConfig": "A command run after a reset's verification, before workers come back.",
    "RegistryConfig": "The fleet registry (PostgreSQL) this node publishes its heartbeat to.",
}

_FACTORY_TEXT: dict[Callable[[], Any], str] = {socket.gethostname: "the host name"}

_ALIAS_TEXT: dict[str, str] = {"Argv": "argument vector", "MatcherList": "list of matchers"}
"""Type aliases whose name says more than what they stand for (``Argv`` is ``list[str]``)."""

_BASIC_TYPES: dict[Any, str] = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    Path: "path",
    Secret: "secret",
}

HEADER = """\
# fleetd.yaml reference

<!-- Generated by `fleetd config reference` from the schema in fleetd/config.py and each
fleetd/<package>/config.py. Do not edit by hand: tests/test_config_docs.py fails when this
file and the schema disagree. Regenerate with
`python -m fleetd config reference > docs/configuration.md`. -->

fleetd reads one YAML file, `/etc/fleetd/fleetd.yaml` by default (`fleetd run --config
PATH`). Every key is optional; [fleetd.example.yaml](fleetd.example.yaml) shows them all
with production values. `fleetd config check PATH` validates a file and the rule files it
names, and lists every problem at once as `file:line:col: key: message`; unknown keys are
errors, not ignored.
SIGHUP (`systemctl reload fleetd`) re-reads the file; see
[operations.md](operations.md#reloading-the-configuration) for what takes effect without a
restart.

Value types:

* **duration**: seconds as a number, or text such as `250ms`, `30s`, `5m`, `1h30m`, `7d`, `2w`.
* **secret**: a value that is never logged or shown (it prints as `<secret>`). Give it as
  `KEY: value`, or keep it out of the file with `KEY_file: /path` (the file's content,
  surrounding whitespace stripped) or `KEY_env: VARIABLE` (an environment variable). Only one
  of the three.
* **path**: a file system path; **argument vector**: a list `[program, arg, ...]` run
  without a shell, in which `{worker}`, `{unit}`, `{url}`, `{gpus}`, `{node}` and `{model}`
  are replaced.
"""


# ------------------------------------------------------------------------------------ model
@dataclass(frozen=True, slots=True)
class FieldDoc:
    key: str
    type_text: str
    default: str
    allowed: tuple[str, ...]
    description: str
    long_default: str | None = None


@dataclass(frozen=True, slots=True)
class SectionDoc:
    path: str
    anchor: str
    model: type[BaseModel]
    text: str
    fields: tuple[FieldDoc, ...]
    checks: tuple[str, ...]


def reference_markdown(root: type[BaseModel] = FleetdConfig) -> str:
    """The whole reference as Markdown (what docs/configuration.md holds)."""
    sections = list(collect_sections(root))
    out = [HEADER]
    for section in sections:
        out.append(_render_section(section))
    return "\n".join(out).rstrip() + "\n"


def collect_sections(root: type[BaseModel] = FleetdConfig) -> Iterator[SectionDoc]:
    """Every section model under ``root`` once, depth first in field order."""
    anchors: dict[type[BaseModel], tuple[str, str]] = {}
    yield from _walk(root, "", anchors)


def _walk(
    model: type[BaseModel], path: str, anchors: dict[type[BaseModel], tuple[str, str]]
) -> Iterator[SectionDoc]:
    anchor = _anchor(path)
    anchors[model] = (path, anchor)
    children: list[tuple[type[BaseModel], str]] = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        sub = _section_model(info.annotation)
        if sub is not None and sub not in anchors:
            child_path = f"{path}.{key}" if path else key
            if _is_list(info.annotation):
                child_path += "[]"
            anchors[sub] = (child_path, _anchor(child_path))
            children.append((sub, child_path))
    fields = tuple(
        _field_doc(model, name, info, anchors) for name, info in model.model_fields.items()
    )
    yield SectionDoc(
        path=path,
        anchor=anchor,
        model=model,
        text=_section_text(model),
        fields=fields,
        checks=tuple(_model_checks(model)),
    )
    for sub, child_path in children:
        yield from _walk(sub, child_path, anchors)


def _anchor(path: str) -> str:
    if not path:
        return "top-level"
    return path.replace("[]", "").replace(".", "-").replace("_", "-")


# ------------------------------------------------------------------------------------ fields
def _field_doc(
    model: type[BaseModel],
    name: str,
    info: FieldInfo,
    anchors: dict[type[BaseModel], tuple[str, str]],
) -> FieldDoc:
    key = info.alias or name
    duration = _is_duration_field(info)
    type_text = _alias_text(model, name) or _type_text(info.annotation, anchors, duration=duration)
    default, long_default = _default_text(info, name, duration=duration)
    description = field_description(model, name)
    if _is_secret(info.annotation):
        description += f" Secret: or `{key}_file` / `{key}_env`."
    return FieldDoc(
        key=key,
        type_text=type_text,
        default=default,
        allowed=tuple(_limits(info)) + tuple(_field_checks(model, name)),
        description=description.strip(),
        long_default=long_default,
    )


def _alias_text(model: type[BaseModel], name: str) -> str | None:
    """The text of a named alias in the field's written annotation (modules here use
    ``from __future__ import annotations``, so it is the source text)."""
    written = inspect.get_annotations(declaring_class(model, name)).get(name)
    if not isinstance(written, str):
        return None
    for alias, text in _ALIAS_TEXT.items():
        if alias in written.replace("|", " ").split():
            return text
    return None


def field_description(model: type[BaseModel], name: str) -> str:
    """What the field does, from the code (see the module docstring for the order)."""
    info = model.model_fields[name]
    if info.description:
        return info.description
    owner = declaring_class(model, name)
    notes = _class_notes(owner)
    docstring, comment = notes.get(name, (None, None))
    if docstring:
        return docstring
    note = FIELD_NOTES.get(f"{owner.__name__}.{name}")
    if note:
        return note
    if comment:
        return comment[0].upper() + comment[1:] + ("" if comment.endswith(".") else ".")
    return ""


def declaring_class(model: type[BaseModel], name: str) -> type:
    """The class in ``model``'s MRO whose body declares field ``name``."""
    for cls in model.__mro__:
        if name in inspect.get_annotations(cls):
            return cls
    return model


@cache
def _class_notes(cls: type) -> dict[str, tuple[str | None, str | None]]:
    """Per field of ``cls``'s own body: (docstring under it, comment on its line)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    tree = ast.parse(source)
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    out: dict[str, tuple[str | None, str | None]] = {}
    for i, stmt in enumerate(body):
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        doc = None
        nxt = body[i + 1] if i + 1 < len(body) else None
        if (
            isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            doc = inspect.cleandoc(nxt.value.value)
        end = stmt.end_lineno or stmt.lineno
        out[stmt.target.id] = (doc, comments.get(end))
    return out


def _section_text(model: type[BaseModel]) -> str:
    own = model.__dict__.get("__doc__")
    if own:
        return inspect.cleandoc(own).replace("``", "`")
    return SECTION_NOTES.get(model.__name__, "")


def _is_duration_field(info: FieldInfo) -> bool:
    return any(_is_duration_meta(m) for m in info.metadata) or _has_duration(info.annotation)


def _is_duration_meta(meta: object) -> bool:
    return getattr(meta, "func", None) is parse_duration


def _has_duration(tp: Any) -> bool:
    if get_origin(tp) is Annotated:
        return any(_is_duration_meta(m) for m in get_args(tp)[1:])
    if get_origin(tp) in (Union, types.UnionType):
        return any(_has_duration(a) for a in get_args(tp))
    return False


def _is_secret(tp: Any) -> bool:
    return tp is Secret or Secret in get_args(tp)


def _is_list(tp: Any) -> bool:
    return get_origin(_strip_optional(tp)) is list


def _strip_optional(tp: Any) -> Any:
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _section_model(tp: Any) -> type[BaseModel] | None:
    tp = _strip_optional(tp)
    if get_origin(tp) is list:
        tp = get_args(tp)[0]
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    return None


def _type_text(
    tp: Any, anchors: dict[type[BaseModel], tuple[str, str]], *, duration: bool = False
) -> str:
    if duration and not _has_duration(tp):
        return "duration"
    origin = get_origin(tp)
    if origin is Annotated:
        base, *meta = get_args(tp)
        if any(_is_duration_meta(m) for m in meta):
            return "duration"
        return _type_text(base, anchors)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return " or ".join(_type_text(a, anchors) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(f"`{v}`" for v in get_args(tp))
    if origin is list:
        (item,) = get_args(tp)
        inner = _type_text(item, anchors)
        if inner.startswith("[section]"):
            return "list of [sections]" + inner.removeprefix("[section]")
        return f"list of {_plural(inner)}"
    if origin is dict:
        k, v = get_args(tp)
        return f"map of {_type_text(k, anchors)} to {_type_text(v, anchors)}"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"[section](#{anchors[tp][1]})"
    if tp in _BASIC_TYPES:
        return _BASIC_TYPES[tp]
    raise TypeError(f"no reference text for type {tp!r}")


def _plural(text: str) -> str:
    if text.startswith("one of"):
        return f"values, each {text}"
    return {"integer": "integers", "string": "strings", "path": "paths"}.get(text, text + "s")


# ------------------------------------------------------------------------------------ defaults
def _default_text(info: FieldInfo, name: str, *, duration: bool) -> tuple[str, str | None]:
    """(table cell, YAML block for a default too long for the cell)."""
    if info.is_required():
        return "required", None
    factory = info.default_factory
    if factory is not None:
        if factory in _FACTORY_TEXT:
            return _FACTORY_TEXT[factory], None
        value = factory()  # type: ignore[call-arg]
    else:
        value = info.default
    if isinstance(value, BaseModel):
        return "see its section", None
    text = _value_text(value, name, duration=duration)
    if len(text) > LONG_DEFAULT:
        block = yaml.safe_dump(
            {info.alias or name: _plain(value)}, sort_keys=False, default_flow_style=False
        )
        return "see below", block
    return text, None


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def _value_text(value: Any, name: str, *, duration: bool) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if duration and isinstance(value, int | float):
        return f"`{format_duration(float(value))}`"
    if isinstance(value, int) and name.endswith("_bytes") and value % MIB == 0:
        size = f"{value // GIB} GiB" if value % GIB == 0 else f"{value // MIB} MiB"
        return f"`{value}` ({size})"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    if isinstance(value, int | float | Path):
        return f"`{value}`"
    flow = yaml.safe_dump(
        _plain(value), default_flow_style=True, width=10_000, sort_keys=False
    ).strip()
    return f"`{flow}`"


# ------------------------------------------------------------------------------------ checks
def _limits(info: FieldInfo) -> Iterator[str]:
    text_like = _strip_optional(info.annotation) in (str, Secret)
    for meta in info.metadata:
        if isinstance(meta, annotated_types.Ge):
            yield f"≥ {meta.ge}"
        elif isinstance(meta, annotated_types.Gt):
            yield f"> {meta.gt}"
        elif isinstance(meta, annotated_types.Le):
            yield f"≤ {meta.le}"
        elif isinstance(meta, annotated_types.Lt):
            yield f"< {meta.lt}"
        elif isinstance(meta, annotated_types.MinLen):
            unit = "character" if text_like else "item"
            yield f"at least {meta.min_length} {unit}{'s' if meta.min_length != 1 else ''}"
        elif isinstance(meta, annotated_types.MaxLen):
            unit = "characters" if text_like else "items"
            yield f"at most {meta.max_length} {unit}"
        elif getattr(meta, "pattern", None):
            yield f"matches `{meta.pattern}`"


def _field_checks(model: type[BaseModel], name: str) -> Iterator[str]:
    decorators = model.__pydantic_decorators__.field_validators
    for decorator in decorators.values():
        if name in decorator.info.fields:
            yield from raise_messages(decorator.func)


def _model_checks(model: type[BaseModel]) -> Iterator[str]:
    for decorator in model.__pydantic_decorators__.model_validators.values():
        func = getattr(decorator.func, "__func__", decorator.func)
        if func is getattr(StrictModel._resolve_secret_sources, "__func__", None):
            continue
        yield from raise_messages(decorator.func)


def raise_messages(func: Any) -> list[str]:
    """The messages of ``raise ValueError("...")`` statements in ``func``'s own body."""
    func = getattr(func, "__func__", func)
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return []
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
            continue
        call = node.exc
        if not (isinstance(call.func, ast.Name) and call.func.id == "ValueError" and call.args):
            continue
        text = _literal_text(call.args[0])
        if text is not None:
            found.append(text)
    return found


def _literal_text(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                parts.append("…")
        return "".join(parts)
    return None


# ------------------------------------------------------------------------------------ render
def _render_section(section: SectionDoc) -> str:
    lines: list[str] = []
    title = "Top level" if not section.path else f"`{section.path}`"
    level = "##" if section.path.count(".") == 0 else "###"
    lines.append(f'<a id="{section.anchor}"></a>\n')
    lines.append(f"{level} {title}\n")
    if section.text:
        lines.append(_one_paragraph(section.text) + "\n")
    lines.append("| key | type | default | allowed | description |")
    lines.append("|---|---|---|---|---|")
    blocks: list[tuple[str, str]] = []
    for field in section.fields:
        allowed = "; ".join(_cell(a) for a in field.allowed) or ""
        lines.append(
            f"| `{field.key}` | {field.type_text} | {field.default} | {allowed} | "
            f"{_cell(field.description)} |"
        )
        if field.long_default is not None:
            blocks.append((field.key, field.long_default))
    lines.append("")
    for key, block in blocks:
        lines.append(f"Default of `{key}`:\n")
        lines.append(f"```yaml\n{block.rstrip()}\n```\n")
    if section.checks:
        lines.append("Checks across keys:\n")
        lines.extend(f"* {_cell(c)}" for c in section.checks)
        lines.append("")
    return "\n".join(lines)


def _one_paragraph(text: str) -> str:
    """Docstrings keep their line breaks; Markdown paragraphs are separated by blank lines."""
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n")]
    return "\n\n".join(paragraphs)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
