"""``remediation.proactive``: rolling proactive validation of healthy hives (docs/remediation.md,
"Rolling proactive validation"). Off by default; when on it follows ``remediation.mode`` like
every run (``dry-run`` plans and logs, ``on`` drains and validates).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictBool, StrictFloat, StrictInt

from fleetd.configbase import Duration, Span, StrictModel


class ProactiveConfig(StrictModel):
    """When a healthy hive is drained and put through the `proactive` validation ladder."""

    enabled: StrictBool = False
    """Validate each hive of this node on a schedule: drain it, run the ladder of
    `remediation.validation.plans.proactive`, then re-admit it (or quarantine it when a
    validator fails). Needs that ladder."""
    interval: Annotated[Duration, Span("1h", "365d")] = 604800.0
    """How often each hive is validated: the next one is due this long after the last began
    (journaled, so a restart neither repeats nor forgets it)."""
    retry_interval: Annotated[Duration, Span(60, "30d")] = 21600.0
    """After a validation that was abandoned (load rose, an incident began) or refused a slot,
    the next attempt on that hive waits this long."""
    check_interval: Annotated[Duration, Span(1, "1h")] = 60.0
    """How often remediation's tick looks for a due hive with headroom (the schedule's
    granularity)."""
    window: Annotated[Duration, Span(60, "1d")] = 900.0
    """The traffic window: a hive is validated only when the node's load stayed under the
    thresholds over the whole of it."""
    max_requests: StrictFloat | StrictInt = Field(default=1.0, ge=0)
    """Headroom: the most running + waiting vLLM requests any of the node's workers may have
    had over `window` (from `fleetd_vllm_requests_running`/`_waiting`) for a validation to
    start; once under way, a worker above it abandons the validation at once."""
    max_gpu_activity: Annotated[float, Field(ge=0, le=1)] | None = None
    """Headroom: the highest average gfx activity (0 to 1, `fleetd_gpu_utilization_ratio`) of
    the node's GPUs over `window` for a validation to start; once under way, a GPU outside the
    hive above it abandons the validation. None: not checked."""
