"""The fast exposition reader against prometheus_client's parser: the same samples (names,
labels, values, timestamps) or the same error, on texts in the servers' strict form and on
texts with every kind of line the strict form leaves to the library."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleetd.vllm import exposition
from fleetd.vllm.exposition import exposition_samples

NAMES = st.sampled_from(
    ["vllm:num_requests_running", "x", "x_total", "x_bucket", "x_count", "x_sum", "y_created"]
)
LABEL_NAMES = st.sampled_from(["model_name", "engine", "le", "a"])
PLAIN_VALUES = st.text(alphabet="abc 0.9+-:/", max_size=6)
NUMBERS = st.sampled_from(["0", "1", "2.5", "1e3", "-1", "+Inf", "NaN", "42", "0.001"])
TYPES = st.sampled_from(["counter", "gauge", "histogram", "summary", "untyped", "info"])


@st.composite
def strict_lines(draw: Any) -> str:
    """A line in the form servers write."""
    kind = draw(st.sampled_from(["sample", "sample", "sample", "help", "type", "comment", ""]))
    name = draw(NAMES)
    if kind == "help":
        return f"# HELP {name} {draw(PLAIN_VALUES)}".rstrip()
    if kind == "type":
        return f"# TYPE {name} {draw(TYPES)}"
    if kind == "comment":
        return "# a remark"
    if kind == "":
        return ""
    labels = draw(st.dictionaries(LABEL_NAMES, PLAIN_VALUES, max_size=3))
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    braces = f"{{{body}}}" if labels or draw(st.booleans()) else ""
    stamp = f" {draw(st.integers(0, 2**41))}" if draw(st.booleans()) else ""
    return f"{name}{braces} {draw(NUMBERS)}{stamp}"


ODD = (
    'x{a="q\\"uote"} 1',
    'x{a="back\\\\slash"} 1',
    'x{a="new\\nline"} 2',
    "x  3",
    "x\t4",
    'x{ a="b" } 5',
    'x{a="b",} 6',
    'x{__name__="z"} 7',
    '{__name__="z"} 8',
    "x 1_0",
    "x 1 1_0",
    "x 1 2 3",
    "x 0x10",
    "x",
    "x{a=b} 1",
    'x{a="b" 1',
    "# TYPE x",
    "# TYPE x counter extra",
    '# HELP x "quoted"',
    "#  TYPE  x  gauge",
    "# HELPER x",
    "#",
    "9x 1",
    'x 1 # {trace="a"} 1',
    "x 1\r",
    'x{a="b{c}"} 1',
    "x inf",
    "x -Inf 12",
)
ODD_LINES = st.sampled_from(ODD)


def _library(text: str) -> list[tuple[str, dict[str, str], float, float | None]] | type:
    try:
        return [_row(s) for f in text_string_to_metric_families(text) for s in f.samples]
    except Exception as exc:  # the exception's type is what is compared
        return type(exc)


def _ours(text: str) -> list[tuple[str, dict[str, str], float, float | None]] | type:
    try:
        return [_row(s) for s in exposition_samples(text)]
    except Exception as exc:
        return type(exc)


def _row(sample: Any) -> tuple[str, dict[str, str], float, float | None]:
    value = float(sample.value)
    return (sample.name, sample.labels, -0.5 if math.isnan(value) else value, sample.timestamp)


@settings(max_examples=400, deadline=None)
@given(st.lists(strict_lines(), max_size=25))
def test_strict_texts_are_read_without_the_library_and_agree_with_it(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    fast = [_row(s) for s in exposition._strict_samples(text)]  # never falls back
    assert fast == _library(text)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(strict_lines(), ODD_LINES), max_size=12))
def test_any_text_gives_the_library_s_samples_or_its_error(lines: list[str]) -> None:
    text = "\n".join(lines)
    assert _ours(text) == _library(text)


@pytest.mark.parametrize("line", ODD)
def test_each_odd_line_gives_the_library_s_answer(line: str) -> None:
    text = f"# TYPE x counter\n{line}\nx_total 1\n"
    assert _ours(text) == _library(text)


def test_what_prometheus_client_writes_is_read_on_the_fast_path() -> None:
    """vLLM exports through prometheus_client: its own output must never need the library."""
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    Gauge("vllm:num_requests_running", "Running.", labels, registry=registry).labels("m", "0").set(
        3
    )
    Counter("vllm:generation_tokens", "Tokens.", labels, registry=registry).labels("m", "0").inc(7)
    hist = Histogram("vllm:e2e_request_latency_seconds", "E2E.", labels, registry=registry)
    hist.labels("m", "0").observe(0.3)
    text = generate_latest(registry).decode()
    fast = [_row(s) for s in exposition._strict_samples(text)]
    assert fast == _library(text)
    names = {row[0] for row in fast}
    assert {"vllm:generation_tokens_total", "vllm:e2e_request_latency_seconds_bucket"} <= names


def test_a_counter_written_without_total_is_renamed_as_the_library_does() -> None:
    rows = [_row(s) for s in exposition_samples("# TYPE req counter\nreq 4\nother 1\n")]
    assert rows == [("req_total", {}, 4.0, None), ("other", {}, 1.0, None)]


def test_not_exposition_format_raises_value_error() -> None:
    with pytest.raises(ValueError):
        exposition_samples("<html><body>502 Bad Gateway</body></html>\n")
