"""The ``collect:`` section of fleetd.yaml: how fresh each tier of GPU readings must be."""

from __future__ import annotations

from pydantic import Field, StrictBool, StrictInt

from fleetd.configbase import StrictModel


class CollectConfig(StrictModel):
    """Cadence tiers of the GPU readings (docs/performance.md, "Cadence tiers").

    Fast readings (temperatures, power, energy, activity, PCIe link, XGMI link status, the ECC
    totals, throttling from gpu_metrics) are read every poll. Slow readings are read every
    `slow_every` polls and keep the time they were read, so their data age is honest and the
    rules give them `slow_every` times as long before they count as stale. Static readings
    (limits, VRAM size, ECC-enabled blocks, bad-page threshold) are read once per discovery;
    the temperature limits, ECC-enabled blocks and bad-page threshold are sent with the slow
    tier. The processes on each GPU are read every `poll.slow_interval`.
    """

    slow_every: StrictInt = Field(default=12, ge=1, le=3600)
    """Slow readings (per-block ECC counts, retired pages, clocks, XGMI traffic counters, the
    power cap) are read every this many polls (1: every poll). With `ecc_guard` a per-block ECC
    count is never older than the poll that saw the total move.
    """
    ecc_guard: StrictBool = True
    """Read the per-block ECC counts and retired pages in the same poll whenever
    amdsmi_get_gpu_total_ecc_count (read every poll) differs from its value at their last read,
    so a new error is never left waiting for the slow cadence.
    """
    metrics_table: StrictBool = True
    """Read the current temperatures (hotspot, HBM, edge), socket power, the energy counter and
    gfx/memory activity from the gpu_metrics table, which every poll reads anyway, instead of
    five more amdsmi calls per GPU (amdsmi_get_temp_metric ×3, amdsmi_get_power_info,
    amdsmi_get_energy_count, amdsmi_get_gpu_activity). One failing gpu_metrics read then makes
    all of them missing together. false: one call each, as before.
    """
