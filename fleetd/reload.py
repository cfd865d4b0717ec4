"""SIGHUP and ``POST /api/v1/reload``: re-read fleetd.yaml and the rules, all or nothing.

Applied at once: the rules and their timing, ``alerting``, ``poll.interval``. Every other
section is built into running parts at start: a change there is logged and recorded as
needing a restart, and the running value stays — in the daemon's config too, so what the
daemon reports is what it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from fleetd.alert.dispatch import Dispatcher
from fleetd.collect.cadence import metric_cadence
from fleetd.collect.exporter import FleetdExporter
from fleetd.config import FleetdConfig
from fleetd.errors import ConfigError, Problem
from fleetd.jobs import JobRunner
from fleetd.logs import get_logger
from fleetd.rules.config import check_rules, engine_settings, rules_to_check
from fleetd.rules.engine import RuleEngine
from fleetd.rules.loader import UnknownMetric
from fleetd.sdnotify import SystemdNotify
from fleetd.store.resilient import ResilientStore

log = get_logger("daemon")

RESTART_ONLY = (
    "node",
    "state_dir",
    "backend",
    "http",
    "logging",
    "store",
    "vllm",
    "api",
    "remediation",
    "registry",
    "events",
    "collect",
)
"""Sections built into running parts at start: a reload reports a change, keeps the value."""
POLL_RESTART_ONLY = ("gpu_timeout", "slow_interval")


def keep_restart_only(old: FleetdConfig, new: FleetdConfig) -> tuple[FleetdConfig, list[str]]:
    """``new`` with ``old``'s values of what only a restart applies; what changed there."""
    changed = [n for n in RESTART_ONLY if getattr(new, n) != getattr(old, n)]
    changed += [
        f"poll.{n}" for n in POLL_RESTART_ONLY if getattr(new.poll, n) != getattr(old.poll, n)
    ]
    poll = new.poll.model_copy(update={n: getattr(old.poll, n) for n in POLL_RESTART_ONLY})
    kept: dict[str, Any] = {n: getattr(old, n) for n in RESTART_ONLY}
    return new.model_copy(update={**kept, "poll": poll}), changed


class Reloadable(Protocol):
    """The daemon as a reload changes it (a protocol: fleetd.daemon imports this module)."""

    config: FleetdConfig
    config_path: Path | None
    loader: Callable[[Path], FleetdConfig]
    notifier: SystemdNotify
    exporter: FleetdExporter
    engine: RuleEngine
    store: ResilientStore
    dispatcher: Dispatcher | None
    scheduler: JobRunner

    def now(self) -> float: ...

    def job_interval(self, seconds: float) -> float: ...

    def ready_again(self) -> None: ...

    def reload_or_raise(self) -> None: ...


def apply_reload(daemon: Reloadable) -> None:
    """Load ``daemon.config_path`` and apply it; raises ConfigError (old config kept).

    The rejection lists every problem of the file and of the rule files at once: when the
    file is wrong, the rule files its ``rules:`` section names are checked anyway (when that
    section cannot be read, the shipped packs, and the rejection says so)."""
    path = daemon.config_path
    assert path is not None
    daemon.notifier.reloading()
    now = daemon.now()
    found: list[Problem] = []
    loaded: FleetdConfig | None = None
    try:
        loaded = daemon.loader(path)
    except ConfigError as exc:
        found += exc.problems
    rules_config, note = rules_to_check(path, None if loaded is None else loaded.rules)
    checked = check_rules(rules_config)
    found += checked.problems
    if note:
        found.append(Problem(str(path), None, None, "rules", note))
    log_unknown_metrics(checked.warnings)
    if loaded is None or checked.rules is None:
        problems = [str(p) for p in found]
        log.error("config_reload_failed", problems=problems)
        daemon.exporter.record_config_reload(False)
        daemon.engine.reload_rejected(problems)
        daemon.store.append_event(
            "config_reload",
            now=now,
            message="config reload rejected; the running config is kept",
            data={"problems": problems},
        )
        daemon.ready_again()
        raise ConfigError(found)
    rules = checked.rules
    new, restart_needed = keep_restart_only(daemon.config, loaded)
    daemon.engine.try_reload(
        lambda: rules,
        engine_settings(
            new.rules, new.poll.interval, cadence=metric_cadence(new.collect.slow_every)
        ),
    )
    if daemon.dispatcher is not None:
        try:
            daemon.dispatcher.reload(new.alerting, now)
        except Exception as exc:  # it runs the new routes; only its clean-up is left
            log.warning("alert_reload_cleanup_failed", error=repr(exc))
    if new.poll.interval != daemon.config.poll.interval:  # before start: applied at start
        daemon.scheduler.reschedule("poll", daemon.job_interval(new.poll.interval))
    daemon.config = new
    daemon.exporter.record_config_reload(True)
    daemon.store.append_event(
        "config_reload",
        now=now,
        message="config reloaded",
        data={
            "rules": len(rules),
            "restart_needed_for": restart_needed,
            "warnings": [str(u.where) for u in checked.warnings],
        },
    )
    if restart_needed:
        log.warning("config_reload_needs_restart", sections=restart_needed)
    log.info("config_reloaded", rules=len(rules))
    daemon.ready_again()


def log_unknown_metrics(unknown: Sequence[UnknownMetric]) -> None:
    """A warning for every rule selector on a metric fleetd never writes (the rule loads and
    can never fire): at start and at every reload."""
    for item in unknown:
        log.warning(
            "rule_reads_unknown_metric",
            rule=item.rule,
            metric=item.metric,
            suggestion=item.suggestion,
            where=str(item.where),
        )


def reload_logged(daemon: Reloadable) -> bool:
    """``reload_or_raise`` that never raises: it runs on the main thread, whose loop is the
    daemon's life. False when the reload was rejected or crashed (old config kept)."""
    try:
        daemon.reload_or_raise()
    except ConfigError:
        return False
    except Exception as exc:
        log.exception("config_reload_crashed", error=repr(exc))
        daemon.exporter.record_config_reload(False)
        daemon.ready_again()
        return False
    return True
