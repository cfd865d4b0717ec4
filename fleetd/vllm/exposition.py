"""The samples of a Prometheus text exposition, read fast in the form servers write.

prometheus_client's text parser reads a line a character at a time: about 10 µs a sample,
so a vLLM server's few thousand lines cost tens of milliseconds a scrape, eight workers every
scrape interval. Servers (vLLM included, through prometheus_client) write one strict form:
single spaces, valid names, label values without quotes or escapes. A line in that form is
read here with two regular expressions; the first line that is not sends the whole text to
prometheus_client's parser, which then decides, so the samples and the errors are always the
library's (tests/vllm/test_exposition.py compares the two on generated texts).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(
    rf'({_NAME})(?:\{{((?:[a-zA-Z_][a-zA-Z0-9_]*="[^"\\{{}}]*",?)*)\}})? ([^ _]+)(?: ([^ _]+))?'
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')
_META = re.compile(rf"# (HELP|TYPE) ({_NAME})(?: ([^\"\\]*))?")
# the library's own allowed sample names per family type (text_fd_to_metric_families)
_SUFFIXES = {
    "counter": ("",),
    "gauge": ("",),
    "summary": ("_count", "_sum", ""),
    "histogram": ("_count", "_sum", "_bucket"),
}


class _Unusual(Exception):
    """A line outside the strict form: the library reads the whole text instead."""


def exposition_samples(text: str) -> list[Sample]:
    """Every sample of ``text``, named as prometheus_client names them (a counter's sample
    written without ``_total`` gets it). Raises ValueError when the text is not Prometheus
    text exposition format."""
    try:
        return list(_strict_samples(text))
    except _Unusual:
        return [s for family in text_string_to_metric_families(text) for s in family.samples]


def _number(token: str) -> float:
    """A value or a timestamp token (``_`` is already excluded, as the library excludes it)."""
    try:
        return float(token)
    except ValueError:
        raise _Unusual from None


def _strict_samples(text: str) -> Iterator[Sample]:
    """The library's family rules (a sample outside the current family's allowed names ends
    it; a counter family not named ``_total`` renames its samples) over strict lines."""
    family, typ = "", "untyped"
    allowed: tuple[str, ...] = ()
    held: list[Sample] = []

    def flush() -> Iterator[Sample]:
        if typ == "counter" and not family.endswith("_total"):
            yield from (Sample(s.name + "_total", *s[1:]) for s in held)
        else:
            yield from held
        held.clear()

    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            if "HELP" not in line and "TYPE" not in line:
                if '"' in line or "\\" in line or "\t" in line:
                    raise _Unusual
                continue  # a comment the library ignores too
            meta = _META.fullmatch(line)
            if meta is None:
                raise _Unusual
            kind, name, rest = meta.groups()
            if kind == "TYPE" and (rest is None or not rest.isalpha()):
                raise _Unusual
            if name != family:
                if family:
                    yield from flush()
                family, typ = name, "untyped"
            if kind == "TYPE":
                typ = rest
            allowed = tuple(family + suffix for suffix in _SUFFIXES.get(typ, ("",)))
            continue
        match = _SAMPLE.fullmatch(line)
        if match is None:
            raise _Unusual
        name, labels_text, value, stamp = match.groups()
        labels = dict(_LABEL.findall(labels_text)) if labels_text else {}
        if "__name__" in labels:
            raise _Unusual
        timestamp = _number(stamp) / 1000 if stamp is not None else None
        sample = Sample(name, labels, _number(value), timestamp)
        if name in allowed:
            held.append(sample)
            continue
        if family:
            yield from flush()
        family, typ, allowed = "", "untyped", ()
        yield sample
    if family:
        yield from flush()
