"""How notifications say things, so every text is read once: no GPU or node named twice, a
resolved alert never shown as if still true, and nothing cut in the middle of a word.

A rule's summary usually names its GPU already (``GPU 3: 1 new uncorrectable ECC error(s)``);
``where`` and ``headline`` only add what the summary does not say. A resolved alert's summary
describes the moment it fired, so resolved texts say "resolved" and show the last value as
"was X", never the summary as if current.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from fleetd.alert.notification import AlertRecord


def gpu_phrase(gpus: Iterable[str]) -> str:
    """``GPU 3``, ``GPUs 0, 2, 5``, ``GPUs 0–7`` (runs of three or more as a range)."""
    values = sorted({g for g in gpus if g}, key=_gpu_order)
    if not values:
        return ""
    if len(values) == 1:
        return f"GPU {values[0]}"
    return "GPUs " + ", ".join(_runs(values))


def _gpu_order(value: str) -> tuple[int, str]:
    return (int(value), "") if value.isdigit() else (1 << 30, value)


def _runs(values: list[str]) -> list[str]:
    if not all(v.isdigit() for v in values):
        return values
    numbers = [int(v) for v in values]
    out: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        if prev - start >= 2:
            out.append(f"{start}–{prev}")
        else:
            out.extend(str(x) for x in range(start, prev + 1))
        if n is not None:
            start = prev = n
    return out


def _mentions(text: str, gpu: str) -> re.Match[str] | None:
    return re.search(rf"(?<![\w-])GPUs? {re.escape(gpu)}(?![\w.])", text)


def split_summary(alert: AlertRecord) -> tuple[str, str]:
    """(where, what): the GPU the alert is about (empty when the summary already names it,
    or for a node-level alert) and the summary without a leading ``GPU N``.

    ``GPU 3: 1 new uncorrectable ECC error(s)`` → (``GPU 3``, ``1 new uncorrectable ECC
    error(s)``); ``vLLM worker gpu3 is down`` (no gpu label) → (``""``, the summary).
    """
    text = alert.annotation("summary") or ""
    gpu = alert.label("gpu") or ""
    if not gpu:
        return "", text
    where = f"GPU {gpu}"
    unit = alert.label("gpus")
    if unit and unit != gpu:
        where += f" (reset unit: {gpu_phrase(unit.split(','))})"
    found = _mentions(text, gpu)
    if found is None:
        return where, text
    if found.start() == 0:
        rest = text[found.end() :].lstrip(" :,-–—")
        return where, rest
    return "", text  # the summary names the GPU in its own words


def headline(node: str, alert: AlertRecord) -> str:
    """One line naming node, GPU and what is wrong, each once: ``node-b GPU 3: 1 new
    uncorrectable ECC error(s)``."""
    text = alert.annotation("summary") or alert.alertname
    if text.startswith((f"{node}:", f"{node} ")):
        return text
    gpu = alert.label("gpu")
    if gpu:
        found = _mentions(text, gpu)
        if found is not None and found.start() == 0:
            return f"{node} {text}"
        if found is not None:
            return f"{node}: {text}"
        return f"{node} GPU {gpu}: {text}"
    return f"{node}: {text}"


def on_node(node: str, text: str) -> str:
    """``text`` prefixed with the node unless it already starts with it."""
    if text.startswith((f"{node}:", f"{node} ")):
        return text
    return f"{node}: {text}"


def was(alert: AlertRecord) -> str:
    """``was 97`` for a resolved alert's last value, or nothing."""
    return "" if alert.value is None else f"was {alert.value:g}"


def cut(text: str, limit: int, marker: str = "…") -> str:
    """``text`` in at most ``limit`` characters, cut at a word boundary when it must be."""
    if len(text) <= limit:
        return text
    room = max(0, limit - len(marker))
    head = text[:room]
    space = head.rfind(" ")
    if space >= room // 2:  # a word boundary not too far back; else cut the long word
        head = head[:space]
    return head.rstrip(" ,;:-") + marker
