"""ECC/RAS: error counts in total and per enabled block, ECC-enabled blocks, retired pages.

Counts are per driver load (a reset or reload zeroes them; the query layer treats a decrease
as a counter reset). Retired pages are persistent (board EEPROM). The bad-page threshold
needs root and debugfs; without them it is missing (not_supported), never zero.
"""

from __future__ import annotations

from fleetd.collect import parse
from fleetd.collect.base import Readings, attempt, field
from fleetd.collect.source import GpuSource
from fleetd.model import Reading

ERRORS = "fleetd_gpu_ecc_errors_total"
BLOCK_ERRORS = "fleetd_gpu_ecc_block_errors_total"
ENABLED = "fleetd_gpu_ecc_enabled"
RETIRED = "fleetd_gpu_retired_pages"
THRESHOLD = "fleetd_gpu_retired_pages_threshold"
_MEMO_BLOCKS = "ecc_blocks"


class EccCollector:
    name = "ecc"

    def collect(self, gpu: GpuSource, now: float) -> list[Reading]:
        out = Readings(gpu.identity, now)

        total, err = attempt(gpu.total_ecc_count)
        for type_label, key in parse.ECC_TYPES:
            raw = field(total, key)
            out.add(ERRORS, parse.count(raw), raw, reason=err, labels=(("type", type_label),))

        blocks = gpu.ras_blocks()
        memo = gpu.memo()
        mask, err = attempt(gpu.static, "ecc_enabled", gpu.ecc_enabled)
        enabled = parse.enabled_blocks(mask, blocks) if err is None else None
        if enabled is None:
            # keep the series the GPU had: its blocks go missing rather than vanish
            reason = err or parse.missing_reason(mask)
            for block in blocks:
                out.missing(ENABLED, reason, labels=(("block", block),))
            for block in memo.get(_MEMO_BLOCKS, ()):
                for type_label, _ in parse.ECC_TYPES:
                    labels = (("block", block), ("type", type_label))
                    out.missing(BLOCK_ERRORS, reason, labels=labels)
        else:
            memo[_MEMO_BLOCKS] = tuple(block for block, on in enabled.items() if on)
            for block, on in enabled.items():
                out.add(ENABLED, 1.0 if on else 0.0, labels=(("block", block),))
                if on:
                    self._block(gpu, out, block)

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
