"""The daemon's heartbeat job: publish this node's row, read back what the fleet says of it.

Built once by the daemon when ``registry.url`` is set, and called every
``registry.heartbeat_interval`` by the scheduler with the current time. One beat:

1. reads the fleet silences not yet ended and hands the ones naming this node to the
   dispatcher (and to a small cache file, so a restart while the registry is down keeps them);
   then acknowledges the firing alerts a recent fleet acknowledgement covers, and takes the
   remediation mode of the newest wave naming this node (``fleetd.registry.modes``);
2. publishes the node's status row (with its versions and firing alerts);
3. reads how many nodes of its SKU run each version, and exports ``fleetd_version_drift``;
4. with a peer comparison given (gray failure against the fleet): replaces this node's serving
   figures in ``fleet_serving`` and reads its peers' (``fleetd.registry.serving``); a failure
   is handed to the comparison, whose fleet verdicts then say they are node-local only.

The silences are read before the row is published, so the firing alerts it carries show
them muted. A registry that is down costs a log line and a counter, never an exception into the
scheduler, and never touches local alerting: the dispatcher keeps the fleet silences it last
had (each ends at its own ``ends_at``, never later, never earlier) and the drift readings
stay as last computed. The next beat tries again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from fleetd.alert.silence_store import Silence, silence_from_json, silence_json
from fleetd.api.alerts import current_alerts, firing
from fleetd.api.services import ApiServices
from fleetd.api.status import node_status
from fleetd.logs import get_logger
from fleetd.model import Reading, make_labels
from fleetd.registry.config import RegistryConfig
from fleetd.registry.drift import COMPONENTS, NodeVersions, drifts, majority
from fleetd.registry.modes import FleetModeBook, mode_for
from fleetd.registry.reader import RegistryError, describe_error
from fleetd.registry.report import publish_report
from fleetd.registry.serving import publish_serving, read_peers
from fleetd.registry.silences import FleetSilenceBook, for_node
from fleetd.registry.store import RegistryPublisher
from fleetd.vllm.fleet import FleetView
from fleetd.vllm.peers import PeerComparison

log = get_logger("registry")


def default_address(node: str, port: int, *, tls: bool) -> str:
    """How fleetctl reaches an agent that did not say: ``http(s)://<node name>:<port>``."""
    return f"{'https' if tls else 'http'}://{node}:{port}"


class RegistryHeartbeat:
    """Publishes ``services``' status to the registry in ``config`` and applies what it reads.

    Args:
        versions: what this node runs (drift detection); None publishes no versions.
        cache_path: where the fleet silences last read are kept across restarts (JSON);
            None keeps them in memory only.
        caps: the fleet caps this node's fleetd.yaml sets (``Cap.to_json``), published so
            ``fleetctl remediation mode`` checks a wave against them; None publishes none.
    """

    def __init__(
        self,
        config: RegistryConfig,
        services: ApiServices,
        *,
        address: str,
        versions: Callable[[], NodeVersions] | None = None,
        cache_path: Path | None = None,
        remediation_mode: Callable[[str | None], None] | None = None,
        serving: PeerComparison | None = None,
        caps: Sequence[Mapping[str, object]] | None = None,
    ) -> None:
        if config.url is None:
            raise ValueError("the registry heartbeat needs registry.url")
        self._config = config
        self._services = services
        self._versions = versions
        self._cache_path = cache_path
        self._set_mode = remediation_mode
        self._serving = serving
        self._caps = list(caps) if caps is not None else None  # fleetd.yaml's fleet caps
        self._serving_ok = False
        self.fleet_mode: str | None = None  # the mode the newest applicable wave sets
        self._publisher = RegistryPublisher(
            config.url.reveal(), address=config.address or address, timeout=config.timeout
        )
        self._book = FleetSilenceBook("", engine=self._publisher.engine)
        self._modes = FleetModeBook("", engine=self._publisher.engine)
        self.published_total = 0
        self.failures_total = 0
        self.acknowledged_total = 0  # alerts acknowledged here by fleet acknowledgements
        self.last_error: str | None = None
        self._drift: list[Reading] = []
        self._drift_checked_at = float("-inf")
        self._fleet_silences: tuple[Silence, ...] = ()
        self._restore_cache(services.clock.now())

    def beat(self, now: float) -> bool:
        """Read back and publish once; True when the registry answered every step.

        The fleet silences are read first, so the alerts published show them muted; a step
        that fails is logged and counted, and the others still run — unless the database
        did not answer at all (then each would wait its own connect timeout)."""
        errors = []
        steps = (
            self._pull_silences,
            self._pull_acks,
            self._pull_mode,
            self._publish,
            self._publish_report,
            self._check_drift,
            self._exchange_serving,
        )
        self._serving_ok = False
        for step in steps:
            try:
                step(now)
            except Exception as exc:  # e.g. the fleet lease, in the same database, unreadable
                errors.append(str(exc) if isinstance(exc, RegistryError) else describe_error(exc))
                if "OperationalError" in errors[-1]:  # unreachable, refused, timed out
                    break
        if errors:
            error = errors[0]
            if self._serving is not None and not self._serving_ok:
                self._serving.fleet_read(FleetView(error=error))
            self.failures_total += 1
            if self.last_error != error:
                log.warning("registry_publish_failed", error=error)
            self.last_error = error
            return False
        if self.last_error is not None:
            log.info("registry_publish_recovered")
        self.last_error = None
        self.published_total += 1
        return True

    # ---- the steps ---------------------------------------------------------------------
    def _publish(self, now: float) -> None:
        status = node_status(self._services, now)
        on = [
            {
                "rule": a["rule"],
                "severity": a["severity"],
                "gpu": a["gpu"],
                "since": a.get("fired_at") or a.get("active_at"),
                "value": a.get("value"),
                "summary": a["annotations"].get("summary", ""),
                "silenced": bool(a.get("silenced_by")),
                "acknowledged": bool(a.get("acknowledged")),
                "fingerprint": a.get("fingerprint"),
            }
            for a in firing(current_alerts(self._services, now))
        ]
        versions = self._versions() if self._versions is not None else None
        self._publisher.publish(status, now, versions=versions, alerts=on, caps=self._caps)

    def _publish_report(self, now: float) -> None:
        """This node's reliability KPI summary (``fleetctl report --db``)."""
        reliability = self._services.reliability
        if reliability is not None:
            summary = reliability.summary(now)
            publish_report(self._publisher.engine, self._services.node, summary, now)

    def _exchange_serving(self, now: float) -> None:
        """Publish this node's serving figures and read its fleet peers' (same SKU, models)."""
        serving = self._serving
        target = serving.fleet_target if serving is not None else None
        if serving is None or target is None:
            self._serving_ok = True
            return
        node, sku = target
        mine = serving.publishable(now)
        engine = self._publisher.engine
        publish_serving(engine, node, mine)
        models = {f.model for f in mine}
        since = now - self._config.stale_after
        peers = read_peers(engine, sku=sku, models=models, since=since, exclude=node)
        serving.fleet_read(FleetView(tuple(peers), read_at=now))
        self._serving_ok = True

    def _pull_silences(self, now: float) -> None:
        mine = for_node(self._book.current(now), self._services.node, self._services.labels)
        self._apply(mine)
        self._save_cache(mine)

    def _pull_acks(self, now: float) -> None:
        """Acknowledge, on this node, each firing alert a recent fleet acknowledgement covers
        (its episode began before the acknowledgement; a later episode is not covered)."""
        node, labels = self._services.node, self._services.labels
        acks = [a for a in self._book.recent_acks(now) if a.applies_to(node, labels)]
        if not acks:
            return
        dispatcher = self._services.dispatcher
        for held in dispatcher.alerts(now):
            alert = held.alert
            if not alert.firing or held.acknowledged:
                continue
            ack = next((a for a in acks if a.covers(alert.labels, alert.starts_at)), None)
            if ack is None:
                continue
            try:
                dispatcher.acknowledge(
                    alert.fingerprint,
                    author=f"{ack.created_by} (fleet {ack.id[:8]})",
                    comment=ack.comment,
                    now=now,
                )
            except KeyError:  # resolved meanwhile
                continue
            except Exception as exc:  # the local database down: tried again next beat
                log.warning("fleet_ack_not_applied", fingerprint=alert.fingerprint, error=repr(exc))
                continue
            self.acknowledged_total += 1

    def _pull_mode(self, now: float) -> None:
        """The remediation mode of the newest wave naming this node (None: fleetd.yaml's)."""
        if self._set_mode is None:
            return
        mode = mode_for(self._modes.all(), self._services.node, self._services.labels)
        if mode != self.fleet_mode:
            log.info("fleet_remediation_mode", mode=mode or "local")
        self.fleet_mode = mode
        self._set_mode(mode)

    def _check_drift(self, now: float) -> None:
        if now - self._drift_checked_at < self._config.drift_check_interval:
            return
        versions = self._versions() if self._versions is not None else None
        if versions is None or versions.sku is None:
            self._drift = []
            return
        counts = self._publisher.group_counts(versions.sku, now - self._config.stale_after)
        out = []
        for component in COMPONENTS:
            value, known = versions.get(component), counts.get(component, {})
            top = majority(known)
            if value is None or top is None or sum(known.values()) < self._config.drift_min_nodes:
                continue
            drifted = drifts(value, known, self._config.drift_tolerance)
            labels = make_labels({"item": component, "version": value, "majority": top})
            out.append(Reading("fleetd_version_drift", labels, 1.0 if drifted else 0.0, now))
        self._drift = out
        self._drift_checked_at = now

    # ---- what the daemon reads ---------------------------------------------------------
    def readings(self, now: float) -> list[Reading]:
        """The drift series (as last computed), the fleet silences held, the failures."""
        held = sum(1 for s in self._fleet_silences if s.state(now) != "expired")
        return [
            *(Reading(r.metric, r.labels, r.value, now) for r in self._drift),
            Reading("fleetd_fleet_silences", (), float(held), now),
            Reading(
                "fleetd_registry_heartbeat_failures_total", (), float(self.failures_total), now
            ),
        ]

    def fleet_silences(self) -> tuple[Silence, ...]:
        return self._fleet_silences

    # ---- the fleet silences ------------------------------------------------------------
    def _apply(self, silences: Sequence[Silence]) -> None:
        self._fleet_silences = tuple(silences)
        self._services.dispatcher.set_fleet_silences(self._fleet_silences)

    def _save_cache(self, silences: Sequence[Silence]) -> None:
        if self._cache_path is None:
            return
        data = [silence_json(s) for s in silences]
        try:
            tmp = self._cache_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data), encoding="utf-8")
            os.replace(tmp, self._cache_path)
        except OSError as exc:  # a full disk must not fail the heartbeat
            log.warning("fleet_silence_cache_unwritable", error=str(exc))

    def _restore_cache(self, now: float) -> None:
        """The fleet silences the last run read, those not yet ended (until the first beat
        reads the registry): a restart during a registry outage keeps them too."""
        if self._cache_path is None or not self._cache_path.is_file():
            return
        try:
            data = json.loads(self._cache_path.read_text(encoding="utf-8"))
            silences = [silence_from_json(d) for d in data]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("fleet_silence_cache_unreadable", error=str(exc))
            return
        self._apply([s for s in silences if s.state(now) != "expired"])

    def close(self) -> None:
        self._book.close()
        self._modes.close()
        self._publisher.close()
