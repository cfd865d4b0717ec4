"""``fleetd doctor``: what an operator must know about a node before trusting fleetd on it.

Each check is a pure function of what it is given (the backend, one poll, the rules, a file
system root), so tests run them on a fake ``/sys`` tree; ``run_checks`` gathers them. A
check is ``ok``, ``warn`` (fleetd works, something is blind or unvalidated) or ``fail``
(something fleetd promises would not work: a reset could not be issued, memory would be
corrupted, nothing could be stored). Exit codes: 0 all ok, 1 a warning, 2 a failure.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from fleetd.collect.abi import AbiCheck
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.catalog import GPU_METRICS
from fleetd.collect.source import ReadError
from fleetd.config import FleetdConfig
from fleetd.logs import get_logger
from fleetd.model import GpuIdentity, Reading, Snapshot, make_labels
from fleetd.remedy.holders import DEFAULT_MONITORING_AGENTS, KfdInspector, judge
from fleetd.rules.coverage import BlindSpot, InputCoverage
from fleetd.rules.loader import RuleSet
from fleetd.vllm.config import VllmWorkerConfig

_log = get_logger("daemon")

GPU_CATALOG = frozenset(spec.name for spec in GPU_METRICS)

Status = Literal["ok", "warn", "fail"]
EXIT_CODES: dict[Status, int] = {"ok": 0, "warn": 1, "fail": 2}


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Status
    detail: str
    items: tuple[str, ...] = field(default_factory=tuple)  # one line per GPU, rule, process

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "items": list(self.items)}


def exit_code(checks: Iterable[Check]) -> int:
    return max((EXIT_CODES[c.status] for c in checks), default=0)


# --------------------------------------------------------------------------------- the checks
def check_root(euid: int, *, resets: bool) -> Check:
    """amdsmi_reset_gpu reads debugfs, which needs root."""
    if euid == 0:
        return Check("root", "ok", "running as root: resets can be issued")
    status: Status = "fail" if resets else "warn"
    return Check("root", status, f"running as uid {euid}: amdsmi_reset_gpu needs root")


def check_debugfs(root: Path, gpus: Sequence[GpuIdentity]) -> Check:
    """Every GPU's DRM minor has ``amdgpu_gpu_recover`` in debugfs (the reset reads it)."""
    missing: list[str] = []
    items: list[str] = []
    for gpu in gpus:
        minors = sorted(
            int(p.name[4:])
            for p in (root / "sys/bus/pci/devices" / gpu.bdf / "drm").glob("card*")
            if p.name[4:].isdigit()
        )
        if not minors:
            missing.append(f"GPU {gpu.index} ({gpu.bdf}): no DRM card under sysfs")
            continue
        recover = root / "sys/kernel/debug/dri" / str(minors[0]) / "amdgpu_gpu_recover"
        if recover.exists():
            items.append(f"GPU {gpu.index} ({gpu.bdf}): {recover.relative_to(root)}")
        else:
            missing.append(f"GPU {gpu.index} ({gpu.bdf}): {recover.relative_to(root)} absent")
    if missing:
        return Check(
            "debugfs",
            "fail",
            "a reset cannot be issued on every GPU (is debugfs mounted at /sys/kernel/debug?)",
            tuple(missing + items),
        )
    return Check("debugfs", "ok", "amdgpu_gpu_recover present for every GPU", tuple(items))


def check_hive(gpus: Sequence[GpuIdentity], unknown_hive: Sequence[int] | None = None) -> Check:
    """A reset takes the whole hive; an unknown hive makes the reset unit the whole node.

    ``unknown_hive``: the GPUs whose amdsmi_get_xgmi_info failed (the backend knows); None
    takes every GPU without a hive id as unknown."""
    hives = {g.hive_id for g in gpus}
    if len(gpus) <= 1:
        return Check("hive", "ok", f"{len(gpus)} GPU: no XGMI hive")
    if unknown_hive is None:
        unknown_hive = [g.index for g in gpus if g.hive_id is None]
    if unknown_hive:
        unknown = [f"GPU {i}" for i in sorted(unknown_hive)]
        return Check(
            "hive",
            "warn",
            "hive unknown for some GPUs: a reset run takes the whole node",
            tuple(unknown),
        )
    known = sorted(str(h) for h in hives if h is not None)
    if not known:
        return Check("hive", "ok", f"{len(gpus)} GPUs, none in an XGMI hive: each its own unit")
    return Check("hive", "ok", f"{len(gpus)} GPUs in {len(known)} hive(s): {', '.join(known)}")


def check_library(abi: AbiCheck) -> Check:
    return Check("amdsmi", _VERDICT_STATUS[abi.verdict], abi.message)


_VERDICT_STATUS: dict[str, Status] = {"validated": "ok", "unvalidated": "warn", "unsafe": "fail"}


def check_holders(
    pids: Sequence[int] | None,
    own_pid: int,
    error: str | None = None,
    *,
    inspector: KfdInspector | None = None,
    agents: Sequence[str] = DEFAULT_MONITORING_AGENTS,
) -> Check:
    """KFD processes that would hold a reset back (remediation judges them the same way:
    fleetd itself and monitoring agents never count; a process needs VRAM or queues)."""
    if pids is None:
        return Check("kfd", "warn", f"cannot list KFD processes: {error}")
    inspect = (inspector or KfdInspector()).inspect
    verdict = judge([inspect(p) for p in sorted(set(pids))], own_pid=own_pid, agents=agents)
    ignored = tuple(f"pid {p.pid}: {why}" for p, why in verdict.ignored)
    note = f" ({len(ignored)} not counted: {'; '.join(ignored)})" if ignored else ""
    if not verdict.holders:
        return Check("kfd", "ok", f"no KFD process would hold a reset back{note}")
    return Check(
        "kfd",
        "warn",
        f"{len(verdict.holders)} KFD process(es) would be killed by a reset and refuse it{note}",
        tuple(p.describe() for p in verdict.holders),
    )


def check_state_dir(path: Path) -> Check:
    """The database, baselines and journal live here; doctor creates nothing."""
    if not path.exists():
        parent = next((p for p in path.parents if p.exists()), Path("/"))
        if os.access(parent, os.W_OK):
            return Check("state_dir", "ok", f"{path} does not exist yet; fleetd will create it")
        return Check("state_dir", "fail", f"{path} does not exist and {parent} is not writable")
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check("state_dir", "fail", f"cannot write {path}: {exc.strerror or exc}")
    return Check("state_dir", "ok", f"{path} is writable")


def check_rules(blind: Sequence[BlindSpot], total: int) -> Check:
    """Rules that can never fire: on a metric fleetd never writes (a misspelled name, on any
    node), or on a GPU input this node never provided."""
    if not blind:
        return Check("rules", "ok", f"every one of {total} rules has its GPU inputs here")
    unwritten = sum(1 for b in blind if b.unwritten)
    why = [f"{unwritten} read a metric fleetd never writes"] if unwritten else []
    if len(blind) > unwritten:
        why.append(f"{len(blind) - unwritten} an input never provided here")
    return Check(
        "rules",
        "warn",
        f"{len(blind)} of {total} rules can never fire on this node ({'; '.join(why)})",
        tuple(b.describe() for b in blind),
    )


def check_partitions(
    modes: Sequence[tuple[int, str | None, str | None]],
    gpus: Sequence[GpuIdentity] = (),
) -> Check:
    """Compute and memory partition mode per GPU ((index, compute, memory); None: unread);
    with the identities, the layout: each physical GPU and the logical devices it is."""
    items = tuple(f"GPU {i}: {c or 'unknown'}/{m or 'unknown'}" for i, c, m in modes)
    unread = [i for i, c, _ in modes if c is None]
    if unread:
        return Check(
            "partitions",
            "warn",
            "partition mode unreadable: fleetd assumes SPX (one device per GPU)",
            items,
        )
    physical = _physical_layout(gpus)
    if any(len(members) > 1 for members in physical.values()):
        by_index = {i: (c, m) for i, c, m in modes}
        bdf = {g.index: g.bdf for g in gpus}
        items = tuple(
            f"physical GPU {n} ({bdf[members[0]]}): GPU {_span(members)}, "
            + "+".join(mode or "unknown" for mode in by_index.get(members[0], (None, None)))
            for n, members in enumerate(physical.values())
        )
        return Check(
            "partitions",
            "ok",
            f"{len(physical)} physical GPUs partitioned into {len(gpus)} logical devices",
            items,
        )
    return Check("partitions", "ok", "partition modes read", items)


def _physical_layout(gpus: Sequence[GpuIdentity]) -> dict[tuple[str, str | None], list[int]]:
    """Logical device indices by physical GPU (partition 0's BDF and the serial), in order."""
    out: dict[tuple[str, str | None], list[int]] = {}
    for gpu in sorted(gpus, key=lambda g: g.index):
        out.setdefault((gpu.physical_bdf, gpu.serial), []).append(gpu.index)
    return out


def _span(indices: Sequence[int]) -> str:
    """``24-31`` for a run of indices, else ``1, 4``."""
    ordered = sorted(indices)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return ", ".join(str(i) for i in ordered)


def check_workers(gpus: Sequence[GpuIdentity], workers: Sequence[VllmWorkerConfig]) -> Check:
    """Whether the configured vLLM workers cover every GPU — every partition, on a
    partitioned node — and claim none the node does not have (a config written for another
    partition mode: 64 CPX partitions on a node that came back in SPX, or the reverse)."""
    if not workers:
        return Check("workers", "ok", "no vLLM workers configured: coverage not checked")
    present = {g.index for g in gpus}
    claimed: dict[int, str] = {}
    for worker in workers:
        for index in worker.gpus:
            claimed.setdefault(index, worker.name)
    uncovered = sorted(present - claimed.keys())
    absent = sorted(claimed.keys() - present)
    physical = _physical_layout(gpus)
    partitioned = any(len(members) > 1 for members in physical.values())
    unit = "partition" if partitioned else "GPU"
    items: list[str] = []
    if uncovered:
        items.append(f"no worker on {unit} {_span(uncovered)}")
    if absent:
        names = list(dict.fromkeys(claimed[i] for i in absent))
        items.append(
            f"worker {names[0]} claims GPU {_span(absent)}, which this node does not have"
            if len(names) == 1
            else f"workers {', '.join(names)} claim GPU {_span(absent)}, which this node "
            "does not have"
        )
    if partitioned:
        for n, members in enumerate(physical.values()):
            names = list(dict.fromkeys(claimed[i] for i in members if i in claimed))
            items.append(
                f"physical GPU {n} (GPU {_span(members)}): "
                f"{len(names)} worker(s){': ' + ', '.join(names) if names else ''}"
            )
    served = len(present) - len(uncovered)
    if uncovered or absent:
        return Check(
            "workers",
            "warn",
            f"the workers cover {served} of {len(present)} {unit}s"
            + (f"; {len(absent)} claimed {unit}(s) absent" if absent else ""),
            tuple(items),
        )
    return Check(
        "workers", "ok", f"the workers cover every one of {len(present)} {unit}s", tuple(items)
    )


# --------------------------------------------------------------------------------- rendering
def render_text(checks: Sequence[Check]) -> str:
    marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}
    lines = []
    for c in checks:
        lines.append(f"{marks[c.status]}  {c.name:<11} {c.detail}")
        lines.extend(f"            - {item}" for item in c.items)
    code = exit_code(checks)
    worst = next(status for status, n in EXIT_CODES.items() if n == code)
    lines.append(f"doctor: {worst} (exit {code})")
    return "\n".join(lines)


def run_checks(
    *,
    euid: int,
    resets: bool,
    root: Path,
    gpus: Sequence[GpuIdentity],
    abi: AbiCheck,
    kfd: Callable[[], Sequence[int]],
    own_pid: int,
    state_dir: Path,
    blind: Sequence[BlindSpot],
    rule_count: int,
    partitions: Sequence[tuple[int, str | None, str | None]],
    host_checks: bool = True,
    unknown_hive: Sequence[int] | None = None,
    workers: Sequence[VllmWorkerConfig] = (),
) -> list[Check]:
    """Every check, in the order an operator reads them."""
    checks = [check_root(euid, resets=resets)] if host_checks else []
    if host_checks:
        checks.append(check_debugfs(root, gpus))
    checks += [
        check_hive(gpus, unknown_hive),
        check_partitions(partitions, gpus),
        check_workers(gpus, workers),
        check_library(abi),
    ]
    try:
        checks.append(check_holders(kfd(), own_pid, inspector=KfdInspector(root)))
    except Exception as exc:
        checks.append(check_holders(None, own_pid, str(exc)))
    checks += [check_state_dir(state_dir), check_rules(blind, rule_count)]
    return checks


def check_unsupported(found: Sequence[tuple[int, Mapping[str, str]]]) -> Check:
    """Calls the library answered as unsupported on this GPU model (NOT_SUPPORTED/INVAL),
    which fleetd stopped asking: e.g. the XGMI error status on MI300X/MI355X, the EDGE
    temperature on MI300X. Information, not a fault: the readings they would give are not
    exported, or exported as missing with that reason."""
    by_call: dict[str, list[int]] = {}
    for index, calls in found:
        for call, reason in calls.items():
            by_call.setdefault(f"{call} ({reason})", []).append(index)
    if not by_call:
        return Check("unsupported", "ok", "no call is unsupported on these GPUs")
    items = tuple(
        f"{call}: GPU {', '.join(str(i) for i in sorted(gpus))}"
        for call, gpus in sorted(by_call.items())
    )
    return Check(
        "unsupported",
        "ok",
        f"{len(by_call)} call(s) unsupported on this GPU model: not asked again",
        items,
    )


def partition_modes(backend: AmdSmiBackend) -> list[tuple[int, str | None, str | None]]:
    """(index, compute mode, memory mode) per GPU; None where the library cannot say."""
    out: list[tuple[int, str | None, str | None]] = []
    for gpu in backend.sources():
        modes: list[str | None] = []
        for call in ("amdsmi_get_gpu_compute_partition", "amdsmi_get_gpu_memory_partition"):
            try:
                value = backend.call(call, gpu.handle) if gpu.present else None
            except ReadError:
                value = None
            modes.append(value if isinstance(value, str) and value else None)
        out.append((gpu.identity.index, modes[0], modes[1]))
    return out


def node_checks(
    config: FleetdConfig,
    backend: AmdSmiBackend,
    rules: RuleSet,
    snapshots: Sequence[Snapshot],
    *,
    root: Path = Path("/"),
    host_checks: bool = True,
) -> list[Check]:
    """Every check on this node, from the daemon's own parts (or the CLI's); the rules are
    judged on ``snapshots`` (a few polls: some readings are rates of two)."""
    coverage = InputCoverage(GPU_CATALOG, min_polls=1)
    for snapshot in snapshots:
        coverage.observe(snapshot.readings)
    blind = coverage.blind_spots(rules)  # without a poll: the rules on unwritten names
    checks = run_checks(
        euid=os.geteuid(),
        resets=config.remediation.mode == "on",
        root=root,
        gpus=backend.gpus(),
        abi=backend.abi,
        kfd=backend.compute_processes,
        own_pid=os.getpid(),
        state_dir=config.state_dir,
        blind=blind,
        rule_count=len(rules.rules),
        partitions=partition_modes(backend),
        host_checks=host_checks,
        unknown_hive=[g.identity.index for g in backend.sources() if g.hive_unknown],
        workers=config.vllm.workers,
    )
    if not snapshots:
        unwritten = [b.describe() for b in blind]
        detail = "not polled (unsafe library): GPU inputs not judged"
        if unwritten:
            detail += f"; {len(unwritten)} rules read a metric fleetd never writes"
        checks[-1] = Check("rules", "warn", detail, tuple(unwritten))
    else:
        found = [(g.identity.index, g.unsupported()) for g in backend.sources()]
        checks.append(check_unsupported(found))
    return checks


def doctor_readings(checks: Iterable[Check], now: float) -> list[Reading]:
    """``fleetd_doctor_check{check}``: 0 ok, 1 warning, 2 failure."""
    return [
        Reading("fleetd_doctor_check", make_labels({"check": c.name}), EXIT_CODES[c.status], now)
        for c in checks
    ]


def preflight(
    config: FleetdConfig, backend: AmdSmiBackend, rules: RuleSet, now: float
) -> list[Reading]:
    """The node checks the daemon runs at start, logged and returned for /metrics; the
    rules' blind spots are judged continuously there instead (``fleetd_rule_inputs_supported``)."""
    checks = node_checks(config, backend, rules, [], host_checks=config.backend.kind == "amdsmi")
    checks = [c for c in checks if c.name != "rules"]
    for check in checks:
        if check.status != "ok":
            _log.warning("doctor_check", check=check.name, status=check.status,
                         detail=check.detail, items=list(check.items))  # fmt: skip
    return doctor_readings(checks, now)
