"""The /metrics content: the latest Snapshot, vLLM readings and fleetd's self-metrics.

A prometheus_client custom collector registered on a registry the daemon passes in (never
the global one). Missing readings are not exported as samples — the series goes stale and
``fleetd_gpu_readings_missing`` counts them — so a failed read never looks like a zero.
Every family comes from the catalog, which gives its type and help.

Two ways to get the text, byte for byte the same (a test holds them together):
``prometheus_client.generate_latest(registry)`` (the standard path), and
``FleetdExporter.render()``, which formats the ~1000 GPU series straight from the readings
with each series' line cached (formatted again only when its value changed), several
times cheaper than prometheus_client's per-sample label validation and escaping; a group of
readings replaced by the same values keeps its text. The HTTP server should serve
``render()`` when the registry holds only this exporter.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import cast

from prometheus_client import ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from fleetd import __version__
from fleetd.collect.catalog import CATALOG, MetricSpec
from fleetd.logs import get_logger
from fleetd.model import Labels, Reading, Snapshot, same_value

log = get_logger("collect.exporter")


POLL_DURATION_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


def _family(
    spec: MetricSpec, label_names: Sequence[str]
) -> GaugeMetricFamily | CounterMetricFamily:
    if spec.type == "counter":
        return CounterMetricFamily(spec.name, spec.help, labels=label_names)
    return GaugeMetricFamily(spec.name, spec.help, labels=label_names)


_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def _family_name(metric: str, catalog: Mapping[str, MetricSpec]) -> str:
    """The catalog family a reading belongs to: its own name, or for ``x_bucket``, ``x_sum``
    and ``x_count`` the histogram ``x`` (stored as three series, exported as one family)."""
    if metric in catalog:
        return metric
    for suffix in _HISTOGRAM_SUFFIXES:
        base = metric.removesuffix(suffix)
        if base != metric and base in catalog and catalog[base].type == "histogram":
            return base
    return metric


def _histogram_order(readings: list[Reading]) -> list[Reading]:
    """Each label set's buckets by ascending ``le``, then its _sum and _count."""

    def key(reading: Reading) -> tuple[Labels, int, float]:
        rest = tuple(p for p in reading.labels if p[0] != "le")
        rank = next(i for i, s in enumerate(_HISTOGRAM_SUFFIXES) if reading.metric.endswith(s))
        le = next((v for k, v in reading.labels if k == "le"), "0")
        try:
            bound = float(le)
        except ValueError:
            bound = float("nan")
        return rest, rank, bound

    return sorted(readings, key=key)


def _group(
    readings: Iterable[Reading], catalog: Mapping[str, MetricSpec]
) -> dict[str, list[Reading]]:
    grouped: dict[str, list[Reading]] = {}
    families: dict[str, str] = {}  # metric → family, looked up once per metric
    for reading in readings:
        if reading.value is not None:
            metric = reading.metric
            family = families.get(metric)
            if family is None:
                family = families[metric] = _family_name(metric, catalog)
            grouped.setdefault(family, []).append(reading)
    return grouped


def _in_catalog_order(
    readings: Iterable[Reading], catalog: Mapping[str, MetricSpec]
) -> tuple[list[tuple[str, MetricSpec, list[Reading]]], list[str]]:
    """The non-missing readings grouped by family, in catalog order (families with none are
    left out), and the families the catalog does not have: both renderers export this."""
    grouped = _group(readings, catalog)
    ordered = [(name, spec, grouped.pop(name)) for name, spec in catalog.items() if name in grouped]
    return ordered, list(grouped)


def render_readings(
    readings: Iterable[Reading], catalog: Mapping[str, MetricSpec] = CATALOG
) -> list[Metric]:
    """Metric families for the non-missing readings, in catalog order.

    A reading of a metric outside the catalog, or with labels its family does not have,
    is dropped and logged, never exported.
    """
    groups, unknown = _in_catalog_order(readings, catalog)
    families: list[Metric] = []
    for name, spec, group in groups:
        if spec.type == "histogram":
            histogram = Metric(name, spec.help, "histogram")
            for reading in _histogram_order(group):
                histogram.add_sample(reading.metric, dict(reading.labels), reading.value)  # type: ignore[arg-type]
            families.append(histogram)
            continue
        names = tuple(k for k, _ in group[0].labels)  # Labels are sorted by name
        family = _family(spec, names)
        for reading in group:
            labels = reading.labels
            if len(labels) != len(names) or any(
                k != n for (k, _), n in zip(labels, names, strict=True)
            ):
                log.warning("reading_labels_mismatch", metric=name, labels=[k for k, _ in labels])
                continue
            family.add_metric([v for _, v in labels], reading.value)  # type: ignore[arg-type]
        families.append(family)
    for name in unknown:
        log.warning("metric_not_in_catalog", metric=name)
    return families


_float_text = cast(Callable[[float], str], floatToGoString)
_FLOAT_CACHE_LIMIT = 4096
_float_cache: dict[float, str] = {}


def _go_string(value: float) -> str:
    """prometheus_client's text of ``value``, remembered for values that repeat every poll
    (0, 1, counts, sizes); the cache is emptied when it fills."""
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"  # 0.0 == -0.0 as a key
    text = _float_cache.get(value)
    if text is None:
        text = _float_text(value)
        if value == value:  # NaN is never found again: not kept
            if len(_float_cache) >= _FLOAT_CACHE_LIMIT:
                _float_cache.clear()
            _float_cache[value] = text
    return text


_LINE_CACHE_LIMIT = 100_000  # series lines kept; far above any real node's series count


def _escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _header(spec: MetricSpec) -> str:
    help_text = spec.help.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {spec.name} {help_text}\n# TYPE {spec.name} {spec.type}\n"


def render_readings_text(
    readings: Iterable[Reading],
    catalog: Mapping[str, MetricSpec] = CATALOG,
    lines: dict[tuple[str, Labels], tuple[float, str]] | None = None,
) -> str:
    """The exposition text of ``render_readings(readings)``, built without Metric objects.

    ``lines`` keeps each series' last line and the value it shows across calls: series
    repeat every poll, and most of their values with them (19 in 20 of a GPU's from one
    poll to the next). A line is reused while its value stays; when the value changed, its
    ``name{labels} `` prefix is (the value, last on the line, has no space).
    """
    if lines is None:
        lines = {}
    elif len(lines) > _LINE_CACHE_LIMIT:
        lines.clear()
    groups, _unknown = _in_catalog_order(readings, catalog)  # dropped: render_readings logs them
    out: list[str] = []
    for _name, spec, group in groups:
        histogram = spec.type == "histogram"
        if histogram:
            group = _histogram_order(group)
        names = tuple(k for k, _ in group[0].labels)
        text: list[str] = []
        for reading in group:
            key = (reading.metric, reading.labels)
            value: float = reading.value  # type: ignore[assignment]  # _group keeps no None
            kept = lines.get(key)
            if kept is not None:
                if same_value(kept[0], value):
                    text.append(kept[1])
                    continue
                prefix = kept[1][: kept[1].rindex(" ") + 1]
            elif not histogram and tuple(k for k, _ in reading.labels) != names:
                continue  # render_readings logs it
            else:
                inner = ",".join(f'{k}="{_escape_label_value(v)}"' for k, v in reading.labels)
                metric = reading.metric
                prefix = f"{metric}{{{inner}}} " if inner else f"{metric} "
            line = f"{prefix}{_go_string(value)}\n"
            lines[key] = (value, line)
            text.append(line)
        out.append(_header(spec))
        out.extend(text)
    return "".join(out)


def renders_alike(old: Sequence[Reading], new: Sequence[Reading]) -> bool:
    """Whether two groups of readings give the same /metrics text: the same series in the
    same order with the same values (a reading's timestamp is not exported)."""
    return len(old) == len(new) and all(
        a.metric == b.metric and a.labels == b.labels and same_value(a.value, b.value)
        for a, b in zip(old, new, strict=True)
    )


_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_NOT_LABEL_CHAR = re.compile(r"[^a-zA-Z0-9_]")


def node_info_labels(node: str, labels: Mapping[str, str]) -> dict[str, str]:
    """``fleetd_node_info``'s labels: ``node`` and each of ``node.labels``.

    A label name Prometheus would reject is written as it would (``rack-id`` → ``rack_id``,
    a leading digit gets ``_``); one that names ``node``, starts with ``__`` (reserved) or
    repeats an earlier one is left out and logged, never exported twice or in place of the
    node's name (a valid name is kept before one made valid).
    """
    out = {"node": node}
    valid_first = sorted(labels.items(), key=lambda kv: (not _LABEL_NAME.match(kv[0]), kv[0]))
    for raw, value in valid_first:
        name = _NOT_LABEL_CHAR.sub("_", str(raw))
        if not _LABEL_NAME.match(name):
            name = "_" + name
        if name in out or name.startswith("__"):
            log.warning("node_label_skipped", label=str(raw), exported_as=name)
            continue
        out[name] = str(value)
    return out


class _Families:
    """A throw-away collector over fixed families, for prometheus_client's formatter."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


def _go_float(value: float) -> str:
    """Bucket bound as Prometheus writes it ("+Inf", "0.005", "1.0")."""
    if value == float("inf"):
        return "+Inf"
    return repr(float(value))


class _Histogram:
    """A cumulative histogram kept by hand.

    prometheus_client's ``Histogram`` (even with ``registry=None``) adds a
    ``_created`` sample stamped from the wall clock, which can only be switched off for the
    whole process; that breaks the golden file and puts a clock read inside logic. Tried and
    reverted (2026-12): 4 exporter tests failed on ``fleetd_poll_duration_seconds_created``.
    """

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(sorted(bounds))
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
                break
        else:
            self.counts[-1] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        result: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            result.append((_go_float(bound), float(running)))
        return result


class FleetdExporter(Collector):
    """Renders fleetd's state for /metrics; the daemon feeds it after each poll and scrape."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        version: str = __version__,
        process_metrics: bool = True,
        poll_buckets: Sequence[float] = POLL_DURATION_BUCKETS,
        catalog: Mapping[str, MetricSpec] = CATALOG,
        node: str | None = None,
        node_labels: Mapping[str, str] | None = None,
    ) -> None:
        """``node`` and ``node_labels`` (fleetd.yaml's ``node``) make ``fleetd_node_info``."""
        self._catalog = catalog
        self._version = version
        self._node_info = None if node is None else node_info_labels(node, node_labels or {})
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._gpu_families: list[Metric] | None = None
        # named groups of readings besides the GPUs': "vllm", "rules", "alerts", "store", …
        # each group owns distinct metric families and is replaced whole on update
        self._groups: dict[str, tuple[Reading, ...]] = {"vllm": ()}
        self._group_families: dict[str, list[Metric]] = {}
        self._gpu_text: str | None = None
        self._group_text: dict[str, str] = {}
        self._lines: dict[tuple[str, Labels], tuple[float, str]] = {}
        self._polls = 0
        self._missed = 0
        self._durations = _Histogram(poll_buckets)
        self._scrape_errors: dict[str, int] = {}
        self._reloads = {"success": 0, "failure": 0}
        self._last_reload_ok: bool | None = None
        registry.register(self)
        self._process: ProcessCollector | None = None
        if process_metrics:
            self._process = ProcessCollector(registry=registry)

    # --- what the daemon calls ----------------------------------------------------------
    def update(self, snapshot: Snapshot) -> None:
        """Publish a finished poll."""
        with self._lock:
            self._snapshot = snapshot
            self._gpu_families = None
            self._gpu_text = None
            self._polls += 1
            self._durations.observe(snapshot.duration_s)

    def update_vllm(self, readings: Sequence[Reading], failed_workers: Iterable[str] = ()) -> None:
        """Publish the latest vLLM scrape (and derived per-GPU readings such as tokens/J)."""
        self.update_group("vllm", readings)
        with self._lock:
            for reading in readings:  # every worker's counter exists from its first scrape,
                worker = dict(reading.labels).get("worker")  # so rate() sees its first error
                if worker is not None:
                    self._scrape_errors.setdefault(worker, 0)
            for worker in failed_workers:
                self._scrape_errors[worker] = self._scrape_errors.get(worker, 0) + 1

    def update_group(self, group: str, readings: Sequence[Reading]) -> None:
        """Replace one named group of readings (rule health, alert delivery, store, …); its
        text is built again only if it would differ (several groups are replaced at every
        scrape and every poll, and most of the time say the same)."""
        new = tuple(readings)
        with self._lock:
            old = self._groups.get(group)
            self._groups[group] = new
            if old is not None and renders_alike(old, new):
                return
            self._group_families.pop(group, None)
            self._group_text.pop(group, None)

    def record_missed_poll(self) -> None:
        """A poll was skipped because the previous one was still running."""
        with self._lock:
            self._missed += 1

    def record_config_reload(self, success: bool) -> None:
        with self._lock:
            self._reloads["success" if success else "failure"] += 1
            self._last_reload_ok = success

    # --- prometheus_client Collector ---------------------------------------------------
    def describe(self) -> Iterable[Metric]:
        """Nothing up front: the families depend on what the GPUs report."""
        return []

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            snapshot = self._snapshot
            if snapshot is not None and self._gpu_families is None:
                self._gpu_families = render_readings(snapshot.readings, self._catalog)
            gpu_families = list(self._gpu_families or ())
            group_families: list[Metric] = []
            for group, readings in self._groups.items():
                if group not in self._group_families:
                    self._group_families[group] = render_readings(readings, self._catalog)
                group_families += self._group_families[group]
            self_families = self._self_metrics(snapshot)
        yield from gpu_families
        yield from group_families
        yield from self_families

    def render(self) -> bytes:
        """The /metrics text of this exporter and its process metrics, quickly.

        Identical to ``generate_latest(registry)`` for a registry that holds only this
        exporter; GPU text is built once per snapshot however often it is scraped.
        """
        with self._lock:
            snapshot = self._snapshot
            if snapshot is not None and self._gpu_text is None:
                self._gpu_text = render_readings_text(snapshot.readings, self._catalog, self._lines)
            texts = [self._gpu_text or ""]
            for group, readings in self._groups.items():
                if group not in self._group_text:
                    self._group_text[group] = render_readings_text(
                        readings, self._catalog, self._lines
                    )
                texts.append(self._group_text[group])
            families = self._self_metrics(snapshot)
        if self._process is not None:
            families += list(self._process.collect())
        tail = generate_latest(_Families(families))
        return "".join(texts).encode("utf-8") + tail

    def _self_metrics(self, snapshot: Snapshot | None) -> list[Metric]:
        def spec(name: str) -> MetricSpec:
            return self._catalog[name]

        out: list[Metric] = []
        build = GaugeMetricFamily(
            "fleetd_build_info", spec("fleetd_build_info").help, labels=["version"]
        )
        build.add_metric([self._version], 1.0)
        out.append(build)
        if self._node_info is not None:
            info = GaugeMetricFamily(
                "fleetd_node_info", spec("fleetd_node_info").help, labels=list(self._node_info)
            )
            info.add_metric(list(self._node_info.values()), 1.0)
            out.append(info)

        s = spec("fleetd_poll_duration_seconds")
        out.append(
            HistogramMetricFamily(
                s.name, s.help, buckets=self._durations.buckets(), sum_value=self._durations.total
            )
        )
        s = spec("fleetd_polls_total")
        out.append(CounterMetricFamily(s.name, s.help, value=float(self._polls)))
        s = spec("fleetd_polls_missed_total")
        out.append(CounterMetricFamily(s.name, s.help, value=float(self._missed)))

        if snapshot is not None:
            success = GaugeMetricFamily(
                "fleetd_collector_success",
                spec("fleetd_collector_success").help,
                labels=["collector"],
            )
            duration = GaugeMetricFamily(
                "fleetd_collector_duration_seconds",
                spec("fleetd_collector_duration_seconds").help,
                labels=["collector"],
            )
            for result in snapshot.collectors:
                success.add_metric([result.name], 1.0 if result.success else 0.0)
                duration.add_metric([result.name], result.duration_s)
            out += [success, duration]
            s = spec("fleetd_last_poll_timestamp_seconds")
            out.append(GaugeMetricFamily(s.name, s.help, value=snapshot.ts + snapshot.duration_s))

        if self._scrape_errors:
            s = spec("fleetd_scrape_errors_total")
            errors = CounterMetricFamily(s.name, s.help, labels=["worker"])
            for worker, count in sorted(self._scrape_errors.items()):
                errors.add_metric([worker], float(count))
            out.append(errors)

        s = spec("fleetd_config_reloads_total")  # from 0, so rate() sees the first reload
        reloads = CounterMetricFamily(s.name, s.help, labels=["result"])
        for outcome, count in self._reloads.items():
            reloads.add_metric([outcome], float(count))
        out.append(reloads)
        if self._last_reload_ok is not None:
            s = spec("fleetd_config_last_reload_success")
            out.append(
                GaugeMetricFamily(s.name, s.help, value=1.0 if self._last_reload_ok else 0.0)
            )
        return out
