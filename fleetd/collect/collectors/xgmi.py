"""XGMI: per-link up/down, links by state, the XGMI error status, per-link data moved.

amdsmi_get_gpu_xgmi_link_status gives "U"/"D"/"X" per XGMI *port*, not per peer:
``total_links`` is the GPU count (the port to itself included) and a healthy board may read
unused ports down ("D") or disabled ("X") (hardware-behaviour.md §1.3 #6). So
``fleetd_gpu_xgmi_link_up`` is reported for the ports in the GPU's learned baseline — every
port it has been seen up on (``GpuSource.port_baseline``, kept across rediscovery and, with a
state file, restarts) — and reads 0 when such a port is no longer up: ``GpuXgmiLinkDown``
fires on a change from the baseline, and verification after a reset checks against it.
``fleetd_gpu_xgmi_links{state}`` counts all ports as read.
amdsmi_get_link_metrics always returns 8 entries; only the first ``num_links`` are links,
in peer order (their ``link`` label is the entry, not the port). Read/write data are KB
counters, exported as bytes, read on the slow tier (``fleetd.collect.cadence``).
When the status call fails, the links seen last time are reported missing, so a rule on a
link sees it go missing instead of silently vanishing.

The XGMI error status is unreadable on MI300X/MI325X (gfx942) and MI350X/MI355X (gfx950):
sysfs ``xgmi_error`` fails EINVAL and amdsmi answers INVAL (ROCm/rocm-systems#11468). Such
an answer marks the call unsupported on this GPU (``GpuSource.feature``): it is not asked
again until rediscovery and its series is not exported at all (a reading missing every
poll would be noise; ``fleetd doctor`` lists the rule that can never fire). XGMI errors on
those parts are the XGMI_WAFL block's ECC counts (``GpuXgmiWaflErrors``).
"""

from __future__ import annotations

from fleetd.collect import parse
from fleetd.collect.base import Readings, attempt, field
from fleetd.collect.cadence import slow_every_of, slow_part
from fleetd.collect.source import UNSUPPORTED_ON_SKU, GpuSource
from fleetd.model import Reading

LINK_UP = "fleetd_gpu_xgmi_link_up"
LINKS = "fleetd_gpu_xgmi_links"
ERROR_STATUS = "fleetd_gpu_xgmi_error_status"
READ = "fleetd_gpu_xgmi_read_bytes_total"
WRITE = "fleetd_gpu_xgmi_write_bytes_total"

_STATES = ("up", "down", "disabled")
_MEMO_LINKS = "xgmi_links"  # ports with a link_up series
_MEMO_METRIC_LINKS = "xgmi_metric_links"  # amdsmi_get_link_metrics entries
_BASELINE = "xgmi_ports_up"


class XgmiCollector:
    """Link status and error status every poll; the traffic counters on the slow tier."""

    name = "xgmi"
    board_level = True  # partition 0 only: NOT applicable on other partitions

    def __init__(self, slow_every: int = 1) -> None:
        self.slow_every = slow_every_of(slow_every)

    def collect(self, gpu: GpuSource, now: float) -> list[Reading]:
        out = Readings(gpu.identity, now)
        memo = gpu.memo()

        status, err = attempt(gpu.xgmi_link_status)
        entries = field(status, "status")
        if err is None and isinstance(entries, list):
            # per port, not per peer: learn which ports are up on a healthy board and
            # report those; a port that never came up (to itself, unused) is not a link
            up_now = [port for port, entry in enumerate(entries) if entry == parse.LINK_UP]
            baseline = sorted(gpu.port_baseline(_BASELINE, up_now))
            for port in baseline:
                entry = entries[port] if port < len(entries) else None
                value = parse.xgmi_link_up(entry)
                if value is None and entry is not None and entry != parse.NA:
                    value = 0.0  # a port that was up now reads disabled/unknown: not up
                out.add(LINK_UP, value, entry, labels=(("link", str(port)),))
            memo[_MEMO_LINKS] = tuple(baseline)
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
            # the baseline ports go missing (also those learned before a restart)
            ports = set(memo.get(_MEMO_LINKS, ())) | gpu.port_baseline(_BASELINE, ())
            for link in sorted(ports):
                out.missing(LINK_UP, reason, labels=(("link", str(link)),))
            for state in _STATES:
                out.missing(LINKS, reason, labels=(("state", state),))

        raw, err = attempt(gpu.feature, "amdsmi_gpu_xgmi_error_status", gpu.xgmi_error_status)
        if err not in UNSUPPORTED_ON_SKU:
            out.add(ERROR_STATUS, parse.xgmi_error_status(raw), raw, reason=err)

        traffic, _ = slow_part(gpu, self.name, self.slow_every, lambda: self._traffic(gpu, now))
        out.items.extend(traffic)
        return out.items

    @staticmethod
    def _traffic(gpu: GpuSource, now: float) -> list[Reading]:
        out = Readings(gpu.identity, now)
        memo = gpu.memo()
        metrics, err = attempt(gpu.link_metrics)
        links = field(metrics, "links")
        if err is None and isinstance(links, list):
            count = parse.link_count(field(metrics, "num_links"), links)
            memo[_MEMO_METRIC_LINKS] = tuple(range(count))
            for link in range(count):
                entry = links[link]
                labels = (("link", str(link)),)
                raw = field(entry, "read")
                out.add(READ, parse.kib_to_bytes(raw), raw, labels=labels)
                raw = field(entry, "write")
                out.add(WRITE, parse.kib_to_bytes(raw), raw, labels=labels)
        else:
            reason = err or parse.missing_reason(links)
            for link in memo.get(_MEMO_METRIC_LINKS, ()):
                out.missing(READ, reason, labels=(("link", str(link)),))
                out.missing(WRITE, reason, labels=(("link", str(link)),))
        return out.items
