"""Fuzzing the config and rule loaders: every file ends as a valid config or as clear
``file:line:col: key: message`` problems, never a traceback, in bounded time and memory.

The corpus (tests/chaos/config_corpus.py) is generated from a fixed seed. Hostile cases (alias
bombs, deep nesting, huge files) are measured one by one with tracemalloc; the whole run's
memory with the process's peak resident set. The summary line (corpus size, outcomes, worst
case) is printed: ``pytest -s tests/chaos``.
"""

from __future__ import annotations

import re
import resource
import time
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleetd.cli.fleetd_main import main
from fleetd.config import load_config
from fleetd.errors import ConfigError, Problem
from fleetd.rules.config import load_rules
from fleetd.rules.loader import load_rule_file
from tests.chaos.config_corpus import ENV_SECRET, LAX, SECRET, Case, corpus

pytestmark = pytest.mark.slow  # the whole corpus, each file through the loaders

CASE_SECONDS = 2.0  # one file, parse to problems; the worst measured is far below
CASE_PEAK_BYTES = 64 * 1024**2  # a hostile file's peak allocation while loading
RUN_GROWTH_KIB = 256 * 1024  # the whole run's growth of the process's peak resident set
_NO_LINE = re.compile(r"^larger than \d+ KiB$")


def load(case: Case, path: Path) -> str:
    """``valid`` or ``error``; raises what the loader let escape (a test failure)."""
    try:
        if case.kind == "config":
            load_rules(load_config(path).rules)
        else:
            load_rule_file(path)
    except ConfigError as exc:
        for problem in exc.problems:
            check_problem(problem)
        return "error"
    return "valid"


def check_problem(problem: Problem) -> None:
    text = str(problem)
    assert problem.message.strip(), text
    assert "Traceback" not in text and "\n" not in problem.message, text
    if _NO_LINE.match(problem.message):
        assert text == f"{problem.file}: {problem.message}"
        return
    assert problem.line is not None and problem.col is not None, f"no position: {text}"
    assert problem.line >= 1 and problem.col >= 1, text
    key = f" {problem.key}:" if problem.key else ""
    assert text == f"{problem.file}:{problem.line}:{problem.col}:{key} {problem.message}"


def test_every_file_of_the_corpus_is_valid_or_clear_problems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_SECRET, SECRET)
    cases = corpus(tmp_path)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcomes: Counter[str] = Counter()
    slowest = (0.0, "")
    largest = (0, "")
    for index, case in enumerate(cases):
        path = tmp_path / f"{index:05d}.yaml"
        path.write_bytes(case.data)
        started = time.perf_counter()
        outcome = load(case, path)
        elapsed = time.perf_counter() - started
        if case.hostile:  # again, measuring what it allocates (tracemalloc slows it down)
            tracemalloc.start()
            assert load(case, path) == outcome
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert peak < CASE_PEAK_BYTES, f"{case.name}: peak {peak} bytes"
            largest = max(largest, (peak, case.name))
        assert elapsed < CASE_SECONDS, f"{case.name}: {elapsed:.2f}s"
        slowest = max(slowest, (elapsed, case.name))
        outcomes[f"{case.kind} {outcome}"] += 1
        if "-cut-" in case.name:
            outcomes[f"{case.kind} truncation {outcome}"] += 1
        expected = EXPECTED.get(f"{case.kind}:{case.name}")
        if expected is not None:
            assert outcome == expected, case.name
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert growth < RUN_GROWTH_KIB, f"peak resident set grew by {growth} KiB"
    print(
        f"\nconfig fuzz: {len(cases)} files; "
        + ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items()))
        + f"; slowest {slowest[1]} {slowest[0] * 1000:.0f} ms;"
        f" largest peak {largest[1]} {largest[0] / 1024**2:.1f} MiB;"
        f" resident set grew {growth // 1024} MiB"
    )
    # the corpus is what the docstring says, and it exercises both outcomes
    assert len(cases) > 2500
    assert outcomes["config valid"] >= 3 and outcomes["rules valid"] >= 2
    assert outcomes["config error"] > 2000 and outcomes["rules error"] > 400
    # a cut mid-line is always caught; one right after a line break loses only whole lines
    # after it, and passes only when what is left is a complete, valid file (~1 in 80)
    assert outcomes["config truncation valid"] < outcomes["config truncation error"] / 40


EXPECTED = {
    **{
        f"config:{name}": "valid"
        for name in ("example", "utf8-bom", "crlf", "merge-good", "merge-list")
    },
    "rules:pack": "valid",
    "rules:comment": "valid",  # a rule file of comments only was written on purpose
    **{
        f"{kind}:{name}": "error"
        for kind in ("config", "rules")
        for name in (
            "empty",
            "blank",
            "list",
            "no-final-newline",
            "billion-laughs",
            "recursive-alias",
            "flow-lists-20000",
            "huge-file",
        )
    },
    **{
        f"config:{name}": "error"
        for name in ("comment", "null", "no-alerting", "utf16-bom", "latin1", "nul-byte")
    },
    **{f"config:lax-{name}": "error" for name in LAX},
}


@pytest.mark.parametrize("name", ["billion-laughs", "flow-lists-20000", "recursive-merge"])
def test_config_check_answers_a_hostile_file_with_problems(tmp_path: Path, name: str) -> None:
    case = next(c for c in corpus(tmp_path) if c.name == name and c.kind == "config")
    path = tmp_path / "hostile.yaml"
    path.write_bytes(case.data)
    result = CliRunner().invoke(main, ["config", "check", str(path)])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.output.startswith(f"{path}:") and "Traceback" not in result.output
