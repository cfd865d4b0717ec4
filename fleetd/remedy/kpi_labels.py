"""The bounded label values of the remediation KPIs, in a module of their own so fleetctl
reads them without loading the KPI code (the run model, the store)."""

from __future__ import annotations

STAGES = (
    "queued",
    "drain",
    "capture",
    "reset",
    "verify",
    "validate",
    "worker_start",
    "back_in_rotation",
)
"""The re-admission stages, in order (bounded: the ``stage`` label of the metrics)."""

VERDICTS = ("fault_found", "nothing_found", "recurred")
"""What a validation found (the ``verdict`` label)."""
