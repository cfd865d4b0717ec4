"""ECC/RAS: error counts in total and per enabled block, ECC-enabled blocks, retired pages.

The totals (one call) are read every poll and guard the rest: per-block counts (one call per
enabled block) and retired pages are on the slow tier (``fleetd.collect.cadence``) and are
read at once when a total moved since their last read, so a new error is counted per block
in the poll that sees it. The static readings (ECC-enabled blocks, the bad-page threshold;
read once per discovery) go out with the slow tier too.

Counts are per driver load (a reset or reload zeroes them; the query layer treats a decrease
as a counter reset). Retired pages are persistent (board EEPROM). The bad-page threshold
needs root and debugfs; without them it is missing (not_supported), never zero.
"""

from __future__ import annotations

from collections.abc import Iterable

from fleetd.collect import parse
from fleetd.collect.base import Readings, attempt, field
from fleetd.collect.cadence import slow_every_of, slow_part
from fleetd.collect.source import GpuSource
from fleetd.model import Reading

ERRORS = "fleetd_gpu_ecc_errors_total"
BLOCK_ERRORS = "fleetd_gpu_ecc_block_errors_total"
ENABLED = "fleetd_gpu_ecc_enabled"
RETIRED = "fleetd_gpu_retired_pages"
THRESHOLD = "fleetd_gpu_retired_pages_threshold"
_MEMO_BLOCKS = "ecc_blocks"
_MEMO_TOTALS = "ecc_totals_at_block_read"


class EccCollector:
    """Totals every poll; per-block counts and retired pages on the slow tier (every
    ``slow_every`` polls), read at once when ``guard`` is on and the totals moved since."""

    name = "ecc"
    board_level = True  # partition 0 only: NOT applicable on other partitions

    def __init__(self, slow_every: int = 1, guard: bool = True) -> None:
        self.slow_every = slow_every_of(slow_every)
        self.guard = guard

    def collect(self, gpu: GpuSource, now: float) -> list[Reading]:
        out = Readings(gpu.identity, now)

        total, total_err = attempt(gpu.total_ecc_count)
        for type_label, key in parse.ECC_TYPES:
            raw = field(total, key)
            out.add(ERRORS, parse.count(raw), raw, reason=total_err, labels=(("type", type_label),))

        blocks = gpu.ras_blocks()
        mask, err = attempt(gpu.static, "ecc_enabled", gpu.ecc_enabled)
        enabled = parse.enabled_blocks(mask, blocks) if err is None else None
        reason = err or parse.missing_reason(mask)

        memo = gpu.memo()
        seen = tuple(field(total, key) for _, key in parse.ECC_TYPES) if total_err is None else None
        moved = self.guard and seen is not None and memo.get(_MEMO_TOTALS) != seen
        slow, fresh = slow_part(
            gpu,
            self.name,
            self.slow_every,
            lambda: self._slow(gpu, now, blocks, enabled, reason),
            force=moved,
        )
        if fresh and seen is not None:
            memo[_MEMO_TOTALS] = seen
        out.items.extend(slow)
        return out.items

    @staticmethod
    def _slow(
        gpu: GpuSource,
        now: float,
        blocks: Iterable[str],
        enabled: dict[str, bool] | None,
        reason: str | None,
    ) -> list[Reading]:
        """Per-block counts of the enabled blocks and the retired pages by status; with them
        the static readings (ECC-enabled blocks, bad-page threshold: read once per discovery),
        which need no sample every poll."""
        out = Readings(gpu.identity, now)
        if enabled is None:
            for block in blocks:
                out.missing(ENABLED, reason or parse.REASON_WRONG_TYPE, labels=(("block", block),))
        else:
            for block, on in enabled.items():
                out.add(ENABLED, 1.0 if on else 0.0, labels=(("block", block),))
        memo = gpu.memo()
        if enabled is None:
            # keep the series the GPU had: its blocks go missing rather than vanish
            for block in memo.get(_MEMO_BLOCKS, ()):
                for type_label, _ in parse.ECC_TYPES:
                    labels = (("block", block), ("type", type_label))
                    out.missing(BLOCK_ERRORS, reason or parse.REASON_WRONG_TYPE, labels=labels)
        else:
            memo[_MEMO_BLOCKS] = tuple(block for block, on in enabled.items() if on)
            for block, on in enabled.items():
                if on:
                    EccCollector._block(gpu, out, block)

        pages, err = attempt(gpu.bad_page_info)
        by_status = parse.bad_pages_by_status(pages) if err is None else None
        pages_reason = err or parse.REASON_WRONG_TYPE
        for status in parse.PAGE_STATUSES.values():
            value = by_status[status] if by_status is not None else None
            out.add(RETIRED, value, reason=pages_reason, labels=(("status", status),))
        raw, err = attempt(gpu.static, "bad_page_threshold", gpu.bad_page_threshold)
        out.add(THRESHOLD, parse.count(raw), raw, reason=err)
        return out.items

    @staticmethod
    def _block(gpu: GpuSource, out: Readings, block: str) -> None:
        counts, err = attempt(gpu.ecc_count, block.upper())
        for type_label, key in parse.ECC_TYPES:
            raw = field(counts, key)
            out.add(
                BLOCK_ERRORS,
                parse.count(raw),
                raw,
                reason=err,
                labels=(("block", block), ("type", type_label)),
            )
