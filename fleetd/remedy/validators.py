"""The validation ladder's command validators: run AMD's tools, read their verdict from their
output (docs/remediation.md, "Validation ladder").

Each validator is a command (an argument vector, no shell) run as its own process group with
a timeout: a validator that hangs is killed at its timeout, its whole group with it, and
fails. Its output is read by the parser of its ``kind``:

* ``rvs`` — the ROCm Validation Suite's log lines. Every verdict RVS prints is a
  ``[RESULT]`` line ending in ``pass: TRUE|FALSE`` or ``met: TRUE|FALSE`` (gst, iet, mem,
  babel, pebb/pbqt with thresholds), ``<module> true|false`` (peqt, pesm) or ``Test N :
  PASS|FAIL`` (mem); an ``[ERROR ]``
  line is a failure whatever the results say. The same rules as AMD's Cluster Validation
  Suite (ROCm/cvs: cvs/tests/health/rvs_cvs.py fails on ``met: FALSE``, ``pass: FALSE``,
  ``[ERROR ]``).
* ``transferbench`` — TransferBench's all-to-all summary (ROCm/TransferBench:
  src/client/Presets/AllToAll.hpp): the ``SRC\\DST`` table with one ``RTotal`` row (the
  bandwidth each GPU received) and ``Average   bandwidth (GPU Timed): X GB/s``. Passes
  when both are at least the configured floors (AMD's CVS MI300X health config:
  ``gpu_to_gpu_a2a_rtotal`` 320 GB/s).
* ``agfhc`` — AGFHC's result summary in the form AMD's GPU operator test runner reports it
  (ROCm/gpu-operator: docs/test/agfhc.md): ``{"number": 1, "suitesResult": {"<gpu>":
  {"<test>": "success" | "failure", …}}, "status": "completed"}``; passes when the run
  completed and every test of every GPU says ``success``. (AGFHC's own console format is
  not public; its runs need AMD's authorisation.)

Output a parser does not understand — no verdict line at all, a table cut short — is a
failure with the raw output kept, never a pass; so is a non-zero exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

INFERENCE = "inference"
"""The built-in validator: the per-model inference probe against its baseline, run once the
workers serve again and before they go back into rotation (``fleetd.vllm.benchmark``)."""

KINDS = ("rvs", "transferbench", "agfhc")


@dataclass(frozen=True, slots=True)
class Parsed:
    """A parser's reading: ``ok`` True/False, or None when it did not understand the output."""

    ok: bool | None
    summary: str


# ------------------------------------------------------------------------------------ RVS
_RVS_RESULT = re.compile(r"^\s*\[RESULT\]\s*\[\s*[0-9.]+\]\s*(?P<body>.*?)\s*$")
_RVS_VERDICT = re.compile(r"\b(?P<what>pass|met):\s*(?P<value>TRUE|FALSE)\b")
_RVS_MODULE_VERDICT = re.compile(r"\b(?P<module>[a-z]+)\s+(?P<value>true|false)\s*$")
_RVS_TEST_VERDICT = re.compile(r"\bTest\s+\d+\s*:\s*(?P<value>PASS|FAIL)\s*$")
_RVS_ERROR = re.compile(r"^\s*\[ERROR\s*\]")


def parse_rvs(text: str) -> Parsed:
    """RVS's verdict: every ``[RESULT]`` verdict TRUE and no ``[ERROR ]`` line."""
    passed = 0
    failed: list[str] = []
    errors: list[str] = []
    for line in text.splitlines():
        if _RVS_ERROR.match(line):
            errors.append(line.strip())
            continue
        found = _RVS_RESULT.match(line)
        if found is None:
            continue
        body = found.group("body")
        verdicts = [m.group("value") for m in _RVS_VERDICT.finditer(body)]
        module = _RVS_MODULE_VERDICT.search(body)
        if not verdicts and module is not None:
            verdicts = [module.group("value").upper()]
        test = _RVS_TEST_VERDICT.search(body)
        if not verdicts and test is not None:
            verdicts = ["TRUE" if test.group("value") == "PASS" else "FALSE"]
        if not verdicts:
            continue  # a figure without a verdict (e.g. a bandwidth reading)
        if all(v == "TRUE" for v in verdicts):
            passed += 1
        else:
            failed.append(body)
    if failed or errors:
        shown = [*failed, *errors]
        more = f" (+{len(shown) - 3} more)" if len(shown) > 3 else ""
        return Parsed(
            False,
            f"{len(failed)} failed result(s), {len(errors)} error line(s): "
            + "; ".join(shown[:3])
            + more,
        )
    if passed == 0:
        return Parsed(None, "no [RESULT] line with a verdict (pass:/met:) in the output")
    return Parsed(True, f"{passed} result(s), all TRUE")


# ------------------------------------------------------------------------------ TransferBench
_TB_HEADER = re.compile(r"^\s*SRC\\DST[\s,]+(?P<cols>.*)$")
_TB_GPU_COL = re.compile(r"GPU\s+(\d+)")
_TB_RTOTAL = re.compile(r"^\s*RTotal\s+(?P<values>.*)$")
_TB_AVERAGE = re.compile(r"Average\s+bandwidth\s+\(GPU Timed\):\s+(?P<value>[0-9.]+)\s+GB/s")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def parse_transferbench(
    text: str, *, min_average_gbps: float | None, min_rtotal_gbps: float | None
) -> Parsed:
    """TransferBench a2a: every GPU's ``RTotal`` and the average at least their floors."""
    columns: int | None = None
    rtotal: list[float] | None = None
    average: float | None = None
    for line in text.splitlines():
        header = _TB_HEADER.match(line)
        if header is not None:
            columns = len(_TB_GPU_COL.findall(header.group("cols")))
            continue
        row = _TB_RTOTAL.match(line)
        if row is not None:
            rtotal = [float(v) for v in _NUMBER.findall(row.group("values"))]
            continue
        found = _TB_AVERAGE.search(line)
        if found is not None:
            average = float(found.group("value"))
    if columns is None or columns == 0 or rtotal is None or average is None:
        missing = [
            name
            for name, value in (
                ("SRC\\DST header", columns or None),
                ("RTotal row", rtotal),
                ("Average bandwidth line", average),
            )
            if value is None
        ]
        return Parsed(None, f"not a TransferBench a2a summary (missing: {', '.join(missing)})")
    if len(rtotal) < columns:
        return Parsed(None, f"RTotal row has {len(rtotal)} values for {columns} GPUs")
    per_gpu = rtotal[:columns]
    short: list[str] = []
    if min_rtotal_gbps is not None:
        short += [
            f"GPU {i:02d} received {bw:g} GB/s < {min_rtotal_gbps:g}"
            for i, bw in enumerate(per_gpu)
            if bw < min_rtotal_gbps
        ]
    if min_average_gbps is not None and average < min_average_gbps:
        short.append(f"average {average:g} GB/s < {min_average_gbps:g}")
    figures = f"average {average:g} GB/s, lowest RTotal {min(per_gpu):g} GB/s over {columns} GPUs"
    if short:
        return Parsed(False, f"{figures}: " + "; ".join(short))
    return Parsed(True, figures)


# ------------------------------------------------------------------------------------ AGFHC
def parse_agfhc(text: str) -> Parsed:
    """AGFHC's result summary (the test runner's ``suitesResult`` JSON, alone or as a line)."""
    doc = _agfhc_document(text)
    if doc is None:
        return Parsed(None, "no AGFHC result summary (suitesResult JSON) in the output")
    runs = doc if isinstance(doc, list) else [doc]
    failures: list[str] = []
    tests = 0
    for run in runs:
        if not isinstance(run, Mapping) or not isinstance(run.get("suitesResult"), Mapping):
            return Parsed(None, "an AGFHC result without suitesResult")
        status = run.get("status")
        if status != "completed":
            failures.append(f"iteration {run.get('number', '?')} status {status!r}")
        for gpu, suites in run["suitesResult"].items():
            if not isinstance(suites, Mapping) or not suites:
                return Parsed(None, f"AGFHC result for GPU {gpu} holds no tests")
            for name, result in suites.items():
                tests += 1
                if result != "success":
                    failures.append(f"GPU {gpu} {name}: {result}")
    if tests == 0:
        return Parsed(None, "AGFHC result summary with no tests")
    if failures:
        return Parsed(
            False, f"{len(failures)} of {tests} checks failed: " + "; ".join(failures[:5])
        )
    return Parsed(True, f"{tests} checks, all success")


def _agfhc_document(text: str) -> object | None:
    stripped = text.strip()
    candidates = [stripped] + [line.strip() for line in reversed(text.splitlines())]
    for candidate in candidates:
        if not candidate or candidate[0] not in "[{" or "suitesResult" not in candidate:
            continue
        try:
            found: object = json.loads(candidate)
        except ValueError:
            continue
        return found
    return None


# ------------------------------------------------------------------------------------ running
@dataclass(frozen=True, slots=True)
class Execution:
    """How the process ended: its exit code (None when killed at the timeout) and output."""

    returncode: int | None
    output: str
    timed_out: bool
    duration: float
    error: str | None = None  # it could not be started


def execute(
    argv: Sequence[str], *, timeout: float, timer: Callable[[], float] = time.monotonic
) -> Execution:
    """Run ``argv`` in a new process group; at ``timeout`` kill the whole group. stdout and
    stderr are kept together, in the order written, as the tools' logs are read."""
    started = timer()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        return Execution(None, "", False, 0.0, f"cannot run {argv[0]}: {exc.strerror or exc}")
    timed_out = False
    try:
        raw, _ = proc.communicate(timeout=timeout if timeout > 0 else None)
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        raw, _ = proc.communicate()
    output = raw.decode("utf-8", errors="replace") if raw else ""
    code = None if timed_out else proc.returncode
    return Execution(code, output, timed_out, timer() - started)


@dataclass(frozen=True, slots=True)
class Judgement:
    """One validator's outcome as the run records it."""

    ok: bool
    summary: str
    kind: str
    output: str
    exit_code: int | None
    timed_out: bool
    duration: float


def judge(
    kind: str,
    run: Execution,
    *,
    timeout: float,
    min_average_gbps: float | None = None,
    min_rtotal_gbps: float | None = None,
) -> Judgement:
    """The verdict on one execution: the process's end first, then the parser's reading."""

    def verdict(ok: bool, summary: str) -> Judgement:
        return Judgement(ok, summary, kind, run.output, run.returncode, run.timed_out, run.duration)

    if run.error is not None:
        return verdict(False, run.error)
    if run.timed_out:
        return verdict(False, f"timed out after {timeout:g}s: killed with its process group")
    if kind == "rvs":
        parsed = parse_rvs(run.output)
    elif kind == "transferbench":
        parsed = parse_transferbench(
            run.output, min_average_gbps=min_average_gbps, min_rtotal_gbps=min_rtotal_gbps
        )
    elif kind == "agfhc":
        parsed = parse_agfhc(run.output)
    else:
        return verdict(False, f"unknown validator kind {kind!r}")
    if run.returncode != 0:
        tail = f"; {parsed.summary}" if parsed.summary else ""
        return verdict(False, f"exited {run.returncode}{tail}")
    if parsed.ok is None:
        return verdict(False, f"output not understood: {parsed.summary}")
    return verdict(parsed.ok, parsed.summary)


def tail(text: str, limit: int) -> str:
    """The last ``limit`` characters of ``text`` (the end of a log says most), marked when cut."""
    if len(text) <= limit:
        return text
    return "…" + text[-(limit - 1) :]
