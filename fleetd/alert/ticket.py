"""The ``ticket`` receiver: the RMA ticket hook (docs/remediation.md, "RMA record and ticket").

A ticket integration gets nothing but RMA tickets: the ``rma_ticket`` change event remediation
queues once per new physical-action decision on a GPU (by serial). Alerts routed to its
receiver are not sent to it (its delivery mode, ``changes``, takes no group notifications),
and no other change event is. It POSTs the documented JSON body (``ticket_body``) through
the durable outbox like every notification: a receiver that is down is retried with backoff,
and every retry carries the same ``eventId`` (the receiver's de-duplication key; delivery is
at least once).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from fleetd.alert.base import DeliveryMode, PostingNotifier, post_json_2xx
from fleetd.alert.config import TicketReceiverConfig
from fleetd.alert.notification import Notification, Receipt, iso8601
from fleetd.errors import NotifyError
from fleetd.model import label_value

TICKET_KIND = "rma_ticket"
"""The kind of remediation event (and label ``kind`` of its change event) a ticket is."""
TICKET_VERSION = "fleetd-rma-ticket-1"


def is_ticket(notification: Notification) -> bool:
    change = notification.change
    return (
        notification.action == "change"
        and change is not None
        and label_value(change.labels, "kind") == TICKET_KIND
    )


class TicketNotifier(PostingNotifier[TicketReceiverConfig]):
    """POSTs one RMA ticket per call; any 2xx is success."""

    kind: ClassVar[str] = "ticket"
    mode: ClassVar[DeliveryMode] = "changes"

    def body(self, notification: Notification) -> dict[str, object]:
        change = notification.change
        if change is None or not is_ticket(notification):
            raise NotifyError("a ticket receiver sends RMA tickets only", retryable=False)
        return ticket_body(
            event_id=notification.event_id,
            node=notification.node,
            run_id=label_value(change.labels, "run_id"),
            at=iso8601(change.at),
            details=change.details,
        )

    def send(self, notification: Notification) -> Receipt | None:
        body = self.body(notification)
        cfg = self._config
        post_json_2xx(
            self._session, cfg.url, body, timeout=cfg.timeout, what="ticket", token=cfg.token
        )
        return None


def ticket_body(
    *,
    event_id: str,
    node: str,
    run_id: str | None,
    at: str,
    details: Mapping[str, object],
) -> dict[str, Any]:
    """The JSON body a ``ticket`` receiver gets (docs/remediation.md, "The ticket")."""

    def text(key: str) -> str:
        value = details.get(key)
        return "" if value is None else str(value)

    afids = [int(a) for a in text("afids").split(",") if a.strip().isdigit()]
    gpu = text("gpu")
    bundle = None
    if text("bundle_path"):
        bundle = {
            "phase": text("bundle_phase"),
            "path": text("bundle_path"),
            "sha256": text("bundle_sha256"),
            "api": f"/api/v1/remediation/runs/{run_id}/evidence" if run_id else "",
            "fetch": f"fleetctl evidence {node} {run_id}" if run_id else "",
        }
    return {
        "version": TICKET_VERSION,
        "eventId": event_id,
        "ticketId": text("ticket_id"),
        "node": node,
        "serial": text("serial"),
        "gpu": int(gpu) if gpu.isdigit() else None,
        "gpuUuid": text("gpu_uuid"),
        "gpuBdf": text("gpu_bdf"),
        "faultClass": text("fault_class"),
        "afids": afids,
        "source": text("source"),
        "operatorMessage": text("operator_message"),
        "reason": text("reason"),
        "runId": run_id,
        "decidedAt": at,
        "bundle": bundle,
    }
