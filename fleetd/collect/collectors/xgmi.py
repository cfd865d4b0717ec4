"""XGMI: per-link up/down, links by state, the XGMI error status, per-link data moved.

amdsmi_get_gpu_xgmi_link_status gives "U"/"D"/"X" per link (X = disabled, which is not a
fault and has no up/down series). amdsmi_get_link_metrics always returns 8 entries; only the
first ``num_links`` are links. Read/write data are KB counters, exported as bytes.
When the status call fails, the links seen last time are reported missing, so a rule on a
link sees it go missing instead of silently vanishing.
"""

from __future__ import annotations

from fleetd.collect import parse
from fleetd.collect.base import Readings, attempt, field
from fleetd.collect.source import GpuSource
from fleetd.model import Reading

LINK_UP = "fleetd_gpu_xgmi_link_up"
LINKS = "fleetd_gpu_xgmi_links"
ERROR_STATUS = "fleetd_gpu_xgmi_error_status"
READ = "fleetd_gpu_xgmi_read_bytes_total"
WRITE = "fleetd_gpu_xgmi_write_bytes_total"

_STATES = ("up", "down", "disabled")
_MEMO_LINKS = "xgmi_links"


class XgmiCollector:
    name = "xgmi"

    def collect(self, gpu: GpuSource, now: float) -> list[Reading]:
        out = Readings(gpu.identity, now)
        memo = gpu.memo()

        status, err = attempt(gpu.xgmi_link_status)
        entries = field(status, "status")
        if err is None and isinstance(entries, list):
            known = []
            for link, entry in enumerate(entries):
                if entry == parse.LINK_DISABLED:
                    continue
                known.append(link)
                out.add(LINK_UP, parse.xgmi_link_up(entry), entry, labels=(("link", str(link)),))
            memo[_MEMO_LINKS] = tuple(known)
            counts = parse.xgmi_link_states(entries)
            for state in _STATES:
                value = counts[state] if counts is not None else None
                out.add(
                    LINKS,
                    value,
                    reason=None if counts is not None else parse.REASON_NA,
                    labels=(("state", state),),
                )
        else:
            reason = err or parse.missing_reason(entries)
            for link in memo.get(_MEMO_LINKS, ()):
                out.missing(LINK_UP, reason, labels=(("link", str(link)),))
            for state in _STATES:
                out.missing(LINKS, reason, labels=(("state", state),))

        raw, err = attempt(gpu.xgmi_error_status)
        out.add(ERROR_STATUS, parse.xgmi_error_status(raw), raw, reason=err)

        metrics, err = attempt(gpu.link_metrics)
        links = field(metrics, "links")
        if err is None and isinstance(links, list):
            for link in range(parse.link_count(field(metrics, "num_links"), links)):
                entry = links[link]
                labels = (("link", str(link)),)
                raw = field(entry, "read")
                out.add(READ, parse.kib_to_bytes(raw), raw, labels=labels)
                raw = field(entry, "write")
                out.add(WRITE, parse.kib_to_bytes(raw), raw, labels=labels)
        else:
            reason = err or parse.missing_reason(links)
            for link in memo.get(_MEMO_LINKS, ()):
                out.missing(READ, reason, labels=(("link", str(link)),))
                out.missing(WRITE, reason, labels=(("link", str(link)),))
        return out.items
