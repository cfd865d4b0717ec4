"""fleetctl's commands besides ``status``: alerts, silences, drain/undrain, remediation,
history, explain, reload.

Every change needs the API token (``--token-file``) and a ``--reason``; the agent records
both with the local user and host. Exit codes: 0 done, 1 the agent refused (the message says
why), 2 the node could not be reached.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import click

from fleetd.cli.fleetctl_context import (
    EXIT_OK,
    EXIT_UNHEALTHY,
    EXIT_UNREACHABLE,
    Fail,
    Fleet,
    Unreachable,
    actor,
    fleet_options,
    make_fleet,
)
from fleetd.cli.fleetctl_fleet import (
    ack_fleet,
    add_fleet_silence,
    drift_report,
    expire_fleet_silence,
    list_fleet_silences,
    registry_alerts,
    set_wave,
    show_audit,
    show_waves,
)
from fleetd.cli.fleetctl_http import Reply, Target, fan_out, request
from fleetd.cli.fleetctl_render import (
    HEALTH_STYLES,
    Cell,
    Column,
    age,
    clock,
    number,
    render_table,
)

API = "/api/v1"


def parse_duration(text: str) -> float:
    from fleetd.configbase import parse_duration as parse  # pydantic: only when needed

    return parse(text)


def _fleet(kwargs: dict[str, Any]) -> Fleet:
    return make_fleet(
        kwargs.pop("inventory"),
        kwargs.pop("db"),
        kwargs.pop("timeout"),
        kwargs.pop("token_file"),
        kwargs.pop("ca_file"),
        kwargs.pop("colour"),
        kwargs.pop("stale_after"),
    )


def read(fleet: Fleet, node: str, path: str, **params: Any) -> dict[str, Any]:
    """GET from one node; Fail with the right exit code when that does not work."""
    target = fleet.resolve(node)
    reply = request(
        target, "GET", API + path, params={**target.node_param(), **params}, options=fleet.options()
    )
    return _checked(target, reply)


def change(fleet: Fleet, node: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST a change to one node, signed with the token and the local user."""
    target = fleet.resolve(node)
    reply = request(
        target,
        "POST",
        API + path,
        params=target.node_param(),
        body={**body, "actor": actor()},
        options=fleet.options(with_token=True),
    )
    return _checked(target, reply)


def _checked(target: Target, reply: Reply) -> dict[str, Any]:
    if not reply.reachable:
        raise Unreachable(f"{target.name} ({target.url}): {reply.message()}")
    if reply.status == 404 and "unknown node" in reply.message():
        raise Unreachable(f"{target.name} ({target.url}): {reply.message()}")
    if not reply.ok or not isinstance(reply.data, dict):
        message = reply.message()
        problems = reply.data.get("problems") if isinstance(reply.data, dict) else None
        if problems:
            message += "\n" + "\n".join(f"  {p}" for p in problems)
        raise Fail(f"{target.name}: {message}")
    return reply.data


def _targets(fleet: Fleet, nodes: Sequence[str]) -> list[Target]:
    return [fleet.resolve(n) for n in nodes] if nodes else fleet.targets()


def _exit_after_unreachable(replies: Sequence[Reply], fleet: Fleet, code: int) -> NoReturn:
    """Name every node that did not answer, then exit with the command's code."""
    for reply in replies:
        if not reply.ok:
            fleet.echo(fleet.painter.paint(f"{reply.target.name}: {reply.message()}", "bold red"))
    raise SystemExit(code)


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2))


def reason_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--reason", "-r", required=True, help="Why (recorded in the node's event log)."
    )(func)


# ------------------------------------------------------------------------------------ alerts
ALERT_COLUMNS = (
    Column("NODE"),
    Column("SEVERITY"),
    Column("ALERT"),
    Column("GPU", "right"),
    Column("STATE"),
    Column("SINCE"),
    Column("VALUE", "right"),
    Column("MUTED"),
    Column("SUMMARY"),
)
SEVERITY_STYLES = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


@click.command("alerts")
@click.argument("nodes", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Also pending and recently resolved.")
@click.option("--severity", type=click.Choice(["critical", "warning", "info"]))
@click.option(
    "--live",
    is_flag=True,
    help="With --db: ask every agent instead of reading their last heartbeats.",
)
@click.option("--json", "as_json", is_flag=True)
@fleet_options
def alerts_command(
    nodes: tuple[str, ...],
    everything: bool,
    severity: str | None,
    live: bool,
    as_json: bool,
    **kw: Any,
) -> None:
    """Firing alerts of NODES (default: the whole fleet), most severe first.

    With --db (and no inventory) the firing alerts come from the registry, as each agent
    published them at its last heartbeat, in one query; --all and --live ask the agents."""
    fleet = _fleet(kw)
    if fleet.db is not None and fleet.inventory is None and not (live or everything):
        registry_alerts(fleet, nodes, severity, as_json)
    params = {"state": None if everything else "firing", "severity": severity}
    replies = fan_out(
        _targets(fleet, nodes), API + "/alerts", params=params, options=fleet.options()
    )
    found = [(r.node, a) for r in replies if r.ok for a in r.data["alerts"]]
    order = {"critical": 0, "warning": 1, "info": 2}
    found.sort(key=lambda na: (order.get(na[1]["severity"], 9), na[0], na[1]["gpu"] or -1))
    code = EXIT_UNREACHABLE if any(not r.ok for r in replies) else EXIT_OK
    if as_json:
        _echo_json(
            {
                "alerts": [{"node": n, **a} for n, a in found],
                "unreachable": [
                    {"node": r.target.name, "error": r.message()} for r in replies if not r.ok
                ],
            }
        )
        raise SystemExit(code)
    rows = []
    for node, a in found:
        muted = []
        if a["silenced_by"]:
            muted.append("silenced")
        if a["inhibited_by"]:
            muted.append("inhibited")
        if a["acknowledged"]:
            muted.append("acked")
        rows.append(
            [
                Cell(node),
                Cell(a["severity"], SEVERITY_STYLES.get(a["severity"])),
                Cell(a["rule"]),
                Cell("-" if a["gpu"] is None else str(a["gpu"])),
                Cell(a["state"]),
                Cell(clock(a["fired_at"] or a["active_at"])),
                Cell(number(a["value"], digits=2) if a["value"] is not None else "-"),
                Cell(",".join(muted) or "-"),
                Cell(a["annotations"].get("summary", "")),
            ]
        )
    fleet.echo(render_table(ALERT_COLUMNS, rows, fleet.painter))
    _exit_after_unreachable(replies, fleet, code)


@click.command("ack")
@click.argument("args", nargs=-1, metavar="NODE FINGERPRINT | --fleet [MATCHER...]")
@click.option(
    "--fleet",
    "fleet_wide",
    is_flag=True,
    help="Acknowledge through the registry (--db) every alert the MATCHERs accept, firing now "
    "on every node the --node-match matchers accept; agents apply it at their next heartbeat.",
)
@click.option(
    "--node-match", "-n", "node_matchers", multiple=True, help="With --fleet: a node matcher."
)
@click.option("--author", help="With --fleet: who is on it (default: you, user@host).")
@reason_option
@fleet_options
def ack_command(
    args: tuple[str, ...],
    fleet_wide: bool,
    node_matchers: tuple[str, ...],
    author: str | None,
    reason: str,
    **kw: Any,
) -> None:
    """Acknowledge a firing alert (no repeat notifications for this episode), or with --fleet
    the firing alerts the matchers accept across the fleet."""
    fleet = _fleet(kw)
    if fleet_wide:
        ack_fleet(
            fleet, node_matchers, args, author=author or actor(), reason=reason, actor=actor()
        )
        return
    if node_matchers or author:
        raise click.UsageError("--node-match and --author need --fleet")
    if len(args) != 2:
        raise click.UsageError("give NODE and FINGERPRINT (or --fleet and matchers)")
    node, fingerprint = args
    done = change(fleet, node, f"/alerts/{fingerprint}/ack", {"reason": reason})
    fleet.echo(f"{node}: acknowledged {fingerprint} as {done['acknowledgement']['author']}")


# ---------------------------------------------------------------------------------- silences
@click.group("silence")
def silence_group() -> None:
    """Mute alerts on a node for a while (add, list, expire)."""


@silence_group.command("add")
@click.argument("args", nargs=-1, metavar="NODE MATCHER... | --fleet [MATCHER...]")
@click.option(
    "--fleet",
    "fleet_wide",
    is_flag=True,
    help="A fleet-wide silence in the registry (--db): every agent whose labels the "
    "--node-match matchers accept applies it at its next heartbeat.",
)
@click.option(
    "--node-match",
    "-n",
    "node_matchers",
    multiple=True,
    help='With --fleet: a matcher over node labels and the node name (cluster="eu1", '
    'rack=~"r1[0-2]", node="gpu-node-7"); repeat for several.',
)
@click.option("--author", help="With --fleet: who the silence is for (default: you, user@host).")
@click.option("--duration", "-d", default="2h", show_default=True, help="e.g. 30m, 2h, 1d")
@reason_option
@fleet_options
def silence_add(
    args: tuple[str, ...],
    fleet_wide: bool,
    node_matchers: tuple[str, ...],
    author: str | None,
    duration: str,
    reason: str,
    **kw: Any,
) -> None:
    """Silence alerts on NODE matching every MATCHER (e.g. gpu="3" alertname=~"GpuEcc.*"),
    or with --fleet on every node the --node-match matchers accept."""
    fleet = _fleet(kw)
    try:
        seconds = parse_duration(duration)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--duration") from None
    if fleet_wide:
        add_fleet_silence(
            fleet,
            node_matchers,
            args,
            duration=seconds,
            author=author or actor(),
            reason=reason,
            actor=actor(),
        )
        return
    if node_matchers or author:
        raise click.UsageError("--node-match and --author need --fleet")
    if len(args) < 2:
        raise click.UsageError("give NODE and at least one MATCHER (or --fleet)")
    node, matchers = args[0], args[1:]
    done = change(
        fleet,
        node,
        "/silences",
        {"matchers": list(matchers), "duration": duration, "reason": reason},
    )
    silence = done["silence"]
    fleet.echo(f"{node}: silence {silence['id']} until {clock(silence['ends_at'])}")


SILENCE_COLUMNS = (
    Column("NODE"),
    Column("ID"),
    Column("STATE"),
    Column("MATCHERS"),
    Column("ENDS"),
    Column("BY"),
    Column("COMMENT"),
)


@silence_group.command("list")
@click.argument("nodes", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Include expired silences.")
@click.option("--fleet", "fleet_wide", is_flag=True, help="The fleet silences in the registry.")
@click.option("--json", "as_json", is_flag=True)
@fleet_options
def silence_list(
    nodes: tuple[str, ...], everything: bool, fleet_wide: bool, as_json: bool, **kw: Any
) -> None:
    """Silences of NODES (default: the whole fleet), or with --fleet the fleet silences."""
    if fleet_wide:
        list_fleet_silences(_fleet(kw), everything=everything, as_json=as_json)
        return
    fleet = _fleet(kw)
    replies = fan_out(_targets(fleet, nodes), API + "/silences", options=fleet.options())
    found = [
        (r.node, s)
        for r in replies
        if r.ok
        for s in r.data["silences"]
        if everything or s["state"] != "expired"
    ]
    code = EXIT_UNREACHABLE if any(not r.ok for r in replies) else EXIT_OK
    if as_json:
        _echo_json({"silences": [{"node": n, **s} for n, s in found]})
        raise SystemExit(code)
    rows = [
        [
            Cell(n),
            Cell(s["id"]),
            Cell(s["state"], "green" if s["state"] == "active" else None),
            Cell(" ".join(s["matchers"])),
            Cell(clock(s["ends_at"])),
            Cell(s["created_by"]),
            Cell(s["comment"]),
        ]
        for n, s in found
    ]
    fleet.echo(render_table(SILENCE_COLUMNS, rows, fleet.painter))
    _exit_after_unreachable(replies, fleet, code)


@silence_group.command("expire")
@click.argument("args", nargs=-1, required=True, metavar="NODE SILENCE_ID | --fleet SILENCE_ID")
@click.option("--fleet", "fleet_wide", is_flag=True, help="Expire a fleet silence (registry).")
@reason_option
@fleet_options
def silence_expire(args: tuple[str, ...], fleet_wide: bool, reason: str, **kw: Any) -> None:
    """End silence SILENCE_ID on NODE now, or with --fleet the fleet silence SILENCE_ID."""
    fleet = _fleet(kw)
    if fleet_wide:
        if len(args) != 1:
            raise click.UsageError("with --fleet give only the SILENCE_ID")
        expire_fleet_silence(fleet, args[0], reason=reason, actor=actor())
        return
    if len(args) != 2:
        raise click.UsageError("give NODE and SILENCE_ID (or --fleet SILENCE_ID)")
    node, silence_id = args
    change(fleet, node, f"/silences/{silence_id}/expire", {"reason": reason})
    fleet.echo(f"{node}: silence {silence_id} expired")


@silence_group.command("audit")
@click.option("--limit", type=click.IntRange(1, 100_000), default=200, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@fleet_options
def silence_audit(limit: int, as_json: bool, **kw: Any) -> None:
    """Who added and expired which fleet silence, and when (newest first; registry)."""
    show_audit(_fleet(kw), limit=limit, as_json=as_json)


# ------------------------------------------------------------------------------------- drift
@click.command("drift")
@click.option(
    "--tolerance",
    type=click.FloatRange(0, 0.5),
    default=0.0,
    show_default=True,
    help="Share of a SKU group a non-majority version may hold without counting as drift.",
)
@click.option("--show", type=click.IntRange(1, 1000), default=5, show_default=True,
              help="Node names shown per minority version.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True)
@fleet_options
def drift_command(tolerance: float, show: int, as_json: bool, **kw: Any) -> None:
    """Nodes grouped by SKU, and the driver, amdsmi, VBIOS, firmware, fleetd versions and
    partition layouts only a minority of each group runs (from the registry, one query).

    Exit 0: no drift; 1: drift; 2: the registry could not be read."""
    drift_report(_fleet(kw), tolerance, as_json, show)


# ------------------------------------------------------------------------------ drain/undrain
def _run_change(kw: dict[str, Any], node: str, path: str, reason: str) -> None:
    """POST a change that answers with a run, and print the run's line."""
    fleet = _fleet(kw)
    run = change(fleet, node, path, {"reason": reason})["run"]
    gpus = ",".join(str(g) for g in run["gpus"])
    fleet.echo(f"{node}: run {run['run_id']} {run['plan']} gpu {gpus}: {run['state']}")


@click.command("drain")
@click.argument("node")
@click.argument("gpu", type=click.IntRange(0))
@reason_option
@fleet_options
def drain_command(node: str, gpu: int, reason: str, **kw: Any) -> None:
    """Take the vLLM workers on GPU of NODE out of service and hold the GPU out.

    \b
    Only that GPU, not its XGMI hive: its workers leave the load balancer's rotation,
    finish their requests, are stopped, and the GPU is held out of service (a warning
    alert) until `fleetctl undrain NODE GPU`. A hive is only drained by a remediation
    run that resets it. Refused while the GPU is in a run or already held.
    """
    _run_change(kw, node, f"/gpus/{gpu}/drain", reason)


@click.command("undrain")
@click.argument("node")
@click.argument("gpu", type=click.IntRange(0))
@reason_option
@fleet_options
def undrain_command(node: str, gpu: int, reason: str, **kw: Any) -> None:
    """Bring GPU of NODE back into service, with every GPU held by the same run(s).

    \b
    After a drain, a quarantine or an aborted run: the held workers are started, must
    answer /health and serve their model, and go back into rotation; the held alert is
    resolved and the lease released.
    """
    _run_change(kw, node, f"/gpus/{gpu}/undrain", reason)


@click.command("reload")
@click.argument("node")
@reason_option
@fleet_options
def reload_command(node: str, reason: str, **kw: Any) -> None:
    """Reload NODE's fleetd.yaml and rules (a bad file is rejected; the old config runs on)."""
    fleet = _fleet(kw)
    change(fleet, node, "/reload", {"reason": reason})
    fleet.echo(f"{node}: reloaded")


# ------------------------------------------------------------------------------- remediation
@click.group("remediation")
def remediation_group() -> None:
    """Remediation runs: list, show, cancel, pause, resume, reset-breaker."""


RUN_COLUMNS = (
    Column("NODE"),
    Column("RUN"),
    Column("PLAN"),
    Column("STATE"),
    Column("GPUS"),
    Column("STARTED"),
    Column("TRIGGER"),
)


def _run_row(node: str, run: dict[str, Any]) -> list[Cell]:
    state = run["state"] + (" (dry-run)" if run["dry_run"] else "")
    style = "cyan" if not run["terminal"] else "bold red" if run["state"] == "quarantined" else None
    return [
        Cell(node),
        Cell(run["run_id"]),
        Cell(run["plan"]),
        Cell(state, style),
        Cell(",".join(str(g) for g in run["gpus"])),
        Cell(clock(run["created_at"])),
        Cell(run["trigger"]["description"]),
    ]


@remediation_group.command("list")
@click.argument("nodes", nargs=-1)
@click.option("--json", "as_json", is_flag=True)
@fleet_options
def remediation_list(nodes: tuple[str, ...], as_json: bool, **kw: Any) -> None:
    """Recent runs of NODES (default: active runs and held GPUs of the whole fleet)."""
    fleet = _fleet(kw)
    targets = _targets(fleet, nodes)
    if nodes:
        replies = fan_out(targets, API + "/remediation/runs", options=fleet.options())
        runs = [(r.node, run) for r in replies if r.ok for run in r.data["runs"]]
    else:
        replies = fan_out(targets, API + "/remediation", options=fleet.options())
        runs = [(r.node, run) for r in replies if r.ok for run in r.data["active"]]
    code = EXIT_UNREACHABLE if any(not r.ok for r in replies) else EXIT_OK
    held = []
    if not nodes:
        held = [(r.node, h) for r in replies if r.ok for h in r.data["held"]]
    if as_json:
        _echo_json(
            {
                "runs": [{"node": n, **run} for n, run in runs],
                "held": [{"node": n, **h} for n, h in held],
            }
        )
        raise SystemExit(code)
    fleet.echo(render_table(RUN_COLUMNS, [_run_row(n, run) for n, run in runs], fleet.painter))
    for node, h in held:
        gpus = ",".join(str(g) for g in h["gpus"])
        line = (
            f"{node}: gpu {gpus} held ({h['state']}) by run {h['run_id']} since {clock(h['since'])}"
        )
        fleet.echo(
            fleet.painter.paint(line + (f": {h['reason']}" if h["reason"] else ""), "yellow")
        )
    _exit_after_unreachable(replies, fleet, code)


@remediation_group.command("show")
@click.argument("node")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True)
@fleet_options
def remediation_show(node: str, run_id: str, as_json: bool, **kw: Any) -> None:
    """One run of NODE and every step it took."""
    fleet = _fleet(kw)
    data = read(fleet, node, f"/remediation/runs/{run_id}")
    if as_json:
        _echo_json(data)
        return
    run = data["run"]
    fleet.echo(render_table(RUN_COLUMNS, [_run_row(node, run)], fleet.painter))
    for bundle in run.get("bundles", []):  # fetch with: fleetctl evidence NODE RUN
        fleet.echo(f"  evidence ({bundle['phase']}): {bundle['path']} sha256:{bundle['sha256']}")
    for verdict in run.get("validation", []):  # the validation ladder (docs/remediation.md)
        target = f" ({verdict['target']})" if verdict.get("target") else ""
        mark = "pass" if verdict["ok"] else "FAIL"
        fleet.echo(f"  validator {verdict['name']}{target}: {mark}: {verdict['summary']}")
    for event in data["events"]:
        fleet.echo(f"  {clock(event['at'])}  {event['kind']:<18} {event['message']}")


def _simple_change(path: str, verb: str) -> Callable[..., None]:
    def command(node: str, reason: str, **kw: Any) -> None:
        fleet = _fleet(kw)
        change(fleet, node, path, {"reason": reason})
        fleet.echo(f"{node}: {verb}")

    return command


@remediation_group.command("mode")
@click.argument("mode", type=click.Choice(["off", "dry-run", "on", "local"]))
@click.option(
    "--node-match",
    "-n",
    "node_matchers",
    multiple=True,
    help='The nodes of this wave, by labels and name (cluster="eu1", rack="r12"); repeat '
    "for several; none: every node.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Store an `on` wave that newly enables more GPUs of a group than its cap (the audit "
    "trail keeps the numbers).",
)
@reason_option
@fleet_options
def remediation_mode(
    mode: str, node_matchers: tuple[str, ...], reason: str, force: bool, **kw: Any
) -> None:
    """A wave: set the remediation MODE of the nodes the matchers accept, through the registry
    (--db); agents take it at their next heartbeat. ``local``: back to each node's fleetd.yaml.
    A node whose fleetd.yaml says ``off`` stays off. An ``on`` wave that would newly enable more
    GPUs in a label group than the group's fleet cap is refused with the numbers."""
    set_wave(_fleet(kw), node_matchers, mode, reason=reason, actor=actor(), force=force)


@remediation_group.group("cap")
def remediation_cap() -> None:
    """Fleet caps per label group set through the registry (--db): add, list, remove."""


@remediation_cap.command("add")
@click.option(
    "--group-by",
    "-g",
    "group_by",
    multiple=True,
    help="A node label that forms the groups (cluster, rack, node, …); repeat for several; "
    "none: the whole fleet.",
)
@click.option(
    "--max", "max_", required=True, help="GPUs out per group: a count (16) or a share (10%)."
)
@reason_option
@fleet_options
def remediation_cap_add(group_by: tuple[str, ...], max_: str, reason: str, **kw: Any) -> None:
    """Cap the physical GPUs out of service at once in each label group (agents apply it at
    their next lease, besides their fleetd.yaml's caps)."""
    from fleetd.cli.fleetctl_caps import add_cap

    add_cap(_fleet(kw), group_by, max_, reason=reason, actor=actor())


@remediation_cap.command("list")
@click.option("--json", "as_json", is_flag=True)
@fleet_options
def remediation_cap_list(as_json: bool, **kw: Any) -> None:
    """The caps set through the registry."""
    from fleetd.cli.fleetctl_caps import list_caps

    list_caps(_fleet(kw), as_json=as_json)


@remediation_cap.command("remove")
@click.argument("cap_id")
@reason_option
@fleet_options
def remediation_cap_remove(cap_id: str, reason: str, **kw: Any) -> None:
    """Remove the cap CAP_ID (or a unique prefix of it)."""
    from fleetd.cli.fleetctl_caps import remove_cap

    remove_cap(_fleet(kw), cap_id, reason=reason, actor=actor())


@remediation_group.command("waves")
@click.option("--json", "as_json", is_flag=True)
@fleet_options
def remediation_waves(as_json: bool, **kw: Any) -> None:
    """The remediation waves in the registry, and the mode each node runs by them."""
    show_waves(_fleet(kw), as_json=as_json)


@remediation_group.command("cancel")
@click.argument("node")
@click.argument("run_id")
@reason_option
@fleet_options
def remediation_cancel(node: str, run_id: str, reason: str, **kw: Any) -> None:
    """Cancel RUN_ID on NODE (it concludes safely between two steps)."""
    _run_change(kw, node, f"/remediation/runs/{run_id}/cancel", reason)


remediation_group.command("pause", help="Pause automatic remediation on NODE.")(
    click.argument("node")(
        reason_option(fleet_options(_simple_change("/remediation/pause", "remediation paused")))
    )
)
remediation_group.command("resume", help="Resume automatic remediation on NODE.")(
    click.argument("node")(
        reason_option(fleet_options(_simple_change("/remediation/resume", "remediation resumed")))
    )
)
remediation_group.command(
    "reset-breaker", help="Close the circuit breaker NODE's remediation uses."
)(
    click.argument("node")(
        reason_option(
            fleet_options(_simple_change("/remediation/breaker/reset", "circuit breaker reset"))
        )
    )
)


# ---------------------------------------------------------------------------------- baseline
@click.group("baseline")
def baseline_group() -> None:
    """The readmission benchmark's baselines: capture on a healthy hive, show."""


BASELINE_COLUMNS = (
    Column("NODE"),
    Column("WORKER"),
    Column("MODEL"),
    Column("TOK/S", "right"),
    Column("TTFT P99", "right"),
    Column("TPOT P99", "right"),
    Column("CAPTURED"),
)


def _echo_baselines(fleet: Fleet, node: str, data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _echo_json(data)
        return
    rows = [
        [
            Cell(node),
            Cell(b["worker"]),
            Cell(b["model"]),
            Cell(f"{b['tokens_per_s']:.1f}"),
            Cell(f"{b['ttft_p99_s'] * 1000:.1f} ms"),
            Cell(f"{b['tpot_p99_s'] * 1000:.1f} ms"),
            Cell(clock(b["captured_at"])),
        ]
        for b in data["baselines"]
    ]
    fleet.echo(render_table(BASELINE_COLUMNS, rows, fleet.painter))


@baseline_group.command("capture")
@click.argument("node")
@reason_option
@click.option("--json", "as_json", is_flag=True)
@fleet_options
def baseline_capture(node: str, reason: str, as_json: bool, **kw: Any) -> None:
    """Probe every vLLM worker of NODE (a healthy hive: refused while a remediation run is
    active or GPUs are held) and store the figures re-admission compares against after a
    reset. The probe takes a while: give a --timeout long enough for it."""
    fleet = _fleet(kw)
    data = change(fleet, node, "/remediation/baseline/capture", {"reason": reason})
    _echo_baselines(fleet, node, data, as_json)


@baseline_group.command("show")
@click.argument("node")
@click.option("--json", "as_json", is_flag=True)
@fleet_options
def baseline_show(node: str, as_json: bool, **kw: Any) -> None:
    """The baselines NODE holds, one per worker."""
    fleet = _fleet(kw)
    data = read(fleet, node, "/remediation/baseline")
    _echo_baselines(fleet, node, data, as_json)


# ----------------------------------------------------------------------------------- history
EVENT_COLUMNS = (
    Column("TIME"),
    Column("GPU", "right"),
    Column("KIND"),
    Column("BY"),
    Column("WHAT"),
)


@click.command("history")
@click.argument("node")
@click.argument("gpu", type=click.IntRange(0), required=False)
@click.option("--since", default="24h", show_default=True, help="How far back (e.g. 1h, 7d).")
@click.option("--limit", type=click.IntRange(1, 5000), default=200, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@fleet_options
def history_command(
    node: str, gpu: int | None, since: str, limit: int, as_json: bool, **kw: Any
) -> None:
    """What happened on NODE (or one GPU): alerts, remediation, resets, actions; and, for a
    GPU, its key readings over the same window."""
    fleet = _fleet(kw)
    try:
        window = parse_duration(since)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    events = read(fleet, node, "/events", gpu=gpu, window=str(window), limit=limit)["events"]
    detail = None
    if gpu is not None:
        detail = read(fleet, node, f"/gpus/{gpu}", window=str(min(window, 7 * 86400)), points=120)
    if as_json:
        _echo_json({"events": events, "history": detail["history"] if detail else None})
        return
    rows = [
        [
            Cell(clock(e["ts"])),
            Cell("-" if e["gpu"] is None else str(e["gpu"])),
            Cell(e["kind"]),
            Cell(e["actor"] or "-"),
            Cell(e["message"]),
        ]
        for e in events
    ]
    fleet.echo(render_table(EVENT_COLUMNS, rows, fleet.painter))
    if detail is not None:
        fleet.echo("")
        fleet.echo(_history_table(detail["history"], fleet))


def _history_table(history: dict[str, Any], fleet: Fleet) -> str:
    columns = (
        Column("SERIES"),
        Column("LAST", "right"),
        Column("MIN", "right"),
        Column("AVG", "right"),
        Column("MAX", "right"),
        Column("SAMPLES", "right"),
    )
    rows = []
    summaries = history.get("summary") or {}
    for name, points in history["series"].items():
        stats = summaries.get(name) if name in summaries else _from_points(points)
        if stats is None or not stats.get("samples"):
            rows.append([Cell(name), Cell("-"), Cell("-"), Cell("-"), Cell("-"), Cell("0")])
            continue
        shown = [v for v in (stats["min"], stats["max"]) if v is not None and math.isfinite(v)]
        digits = 2 if shown and max(abs(v) for v in shown) < 10 else 0
        rows.append(
            [
                Cell(name),
                Cell(number(stats["last"], digits=digits)),
                Cell(number(stats["min"], digits=digits)),
                Cell(number(stats["avg"], digits=digits)),
                Cell(number(stats["max"], digits=digits)),
                Cell(str(stats["samples"])),
            ]
        )
    span = age(history["end"] - history["start"])
    return f"readings over the last {span}:\n" + render_table(columns, rows, fleet.painter)


def _from_points(points: list[list[float]]) -> dict[str, Any] | None:
    """The window's figures from stepped points: only for an agent that sends no summary
    (a spike between two points is missed, which is why agents send one)."""
    values = [v for _, v in points if v is not None and math.isfinite(v)]
    if not values:
        return None
    return {
        "min": min(values),
        "avg": sum(values) / len(values),
        "max": max(values),
        "last": values[-1],
        "samples": len(values),
    }


# ----------------------------------------------------------------------------------- explain
def as_typed(step: str, agent: str | None, node: str) -> str:
    """A suggested ``fleetctl`` command with the node as the engineer named it: the agent
    writes its own name, which does not resolve when fleetctl was given an address."""
    if not agent or agent == node:
        return step
    return re.sub(
        r"(`fleetctl [a-z -]*?)" + re.escape(agent) + r"(?= )", lambda m: m.group(1) + node, step
    )


@click.command("explain")
@click.argument("node")
@click.argument("gpu", type=click.IntRange(0))
@click.option("--json", "as_json", is_flag=True)
@fleet_options
def explain_command(node: str, gpu: int, as_json: bool, **kw: Any) -> None:
    """Why GPU on NODE is in its state: which rule, which readings, what was done, what next."""
    fleet = _fleet(kw)
    data = read(fleet, node, f"/gpus/{gpu}/explain")
    if as_json:
        _echo_json(data)
        return
    paint = fleet.painter.paint
    fleet.echo(paint(data["summary"], HEALTH_STYLES.get(data["health"]["state"])))
    fleet.echo(f"data age: {age(data['health']['data_age_s'])}")
    if data["alerts"]:
        fleet.echo(paint("\nwhich rule", "bold"))
        for a in data["alerts"]:
            mode = f", mode {a['mode']}" if a.get("mode") else ""  # an older agent: none
            fleet.echo(f"  {a['rule']} ({a['severity']}, {a['state']}{mode})")
            if a.get("expr"):
                condition = a["expr"]
                if a.get("op") and a.get("threshold") is not None:
                    condition += f" {a['op']} {a['threshold']:g}"
                fleet.echo(f"    when   {condition}")
                hold = f"for {age(a['for_s'])}" if a.get("for_s") else "at once"
                clear = f", clears at {a['clear']:g}" if a.get("clear") is not None else ""
                fleet.echo(f"    fires  {hold}{clear}")
            if a.get("value") is not None:
                fleet.echo(f"    value  {a['value']:g}")
            if a.get("summary"):
                fleet.echo(f"    says   {a['summary']}")
            if a.get("runbook"):
                fleet.echo(f"    runbook {a['runbook']}")
    fleet.echo(paint("\nwhich readings", "bold"))
    for r in data["readings"]:
        labels = ",".join(f'{k}="{v}"' for k, v in r["labels"].items())
        value = "missing" if r["value"] is None else f"{r['value']:g}"
        fleet.echo(f"  {r['metric']}{{{labels}}} = {value} ({age(r['age_s'])} old)")
    fleet.echo(paint("\nwhat has been done", "bold"))
    remediation = data["remediation"]
    fleet.echo(f"  remediation mode: {remediation['mode']}")
    for run in remediation["runs"][:5]:
        dry = " (dry-run)" if run["dry_run"] else ""
        fleet.echo(
            f"  run {run['run_id']} {run['plan']}{dry}: {run['state']} "
            f"(since {clock(run['created_at'])}; {run['trigger']['description']})"
        )
    milestones = remediation.get("milestones")
    shown: set[str] = set()
    if milestones and milestones["steps"]:
        dry = " (dry-run)" if milestones["dry_run"] else ""
        fleet.echo(f"  milestones of run {milestones['run_id']} ({milestones['plan']}{dry}):")
        for step in milestones["steps"]:
            fleet.echo(f"    {clock(step['at'])} {step['kind']}: {step['message']}")
            shown.add(step["message"])
    recent = [e for e in data["events"] if e["message"] not in shown][-10:]
    if recent:
        fleet.echo("  recent events:")
    for event in recent:
        fleet.echo(f"    {clock(event['ts'])} {event['kind']}: {event['message']}")
    if not remediation["runs"] and not data["events"]:
        fleet.echo("  nothing yet")
    resets = data.get("driver_resets") or []  # an older agent does not send them
    if resets:
        fleet.echo(paint("\nresets the driver made on its own (no fleetd run)", "bold"))
        for reset in resets:
            fleet.echo(f"  {clock(reset['at'])} {reset['message']}")
    _explain_trust(fleet, data)
    fleet.echo(paint("\nwhat happens next", "bold"))
    for step in data["next"]:
        fleet.echo(f"  {as_typed(step, data.get('node'), node)}")
    blind = data.get("blind_spots") or []  # an older agent does not send them
    if blind:
        fleet.echo(paint("\nwhat cannot be seen on this node", "bold"))
        for spot in blind:
            fleet.echo(f"  {spot['text']}")


def _explain_trust(fleet: Fleet, data: dict[str, Any]) -> None:
    """Shadow rules that would fire on the GPU, and the rules' precision (staged trust)."""
    paint = fleet.painter.paint
    shadow = data.get("shadow") or []  # an older agent does not send them
    if shadow:
        fleet.echo(paint("\nshadow rules (never notified, never remediated)", "bold"))
        for s in shadow:
            value = f" (value {s['value']:g})" if s.get("value") is not None else ""
            fleet.echo(f"  {s['rule']} {s['state']}{value}: would {s['would']}")
    trust = data.get("trust") or []
    if trust:
        fleet.echo(paint("\nrule precision (promotion is an operator's decision)", "bold"))
    for t in trust:
        precision = "-" if t["precision"] is None else f"{t['precision'] * 100:.0f}%"
        fleet.echo(
            f"  {t['rule']} [{t['mode']}]: {t['runs']} runs, {t['fault_found']} found a fault, "
            f"{t['nothing_found']} found nothing, {t['recurred']} recurred (precision "
            f"{precision}); {t['fired']} fired, {t['resolved_without_action']} resolved with no "
            f"action, {t['shadow_fired']} shadow firings"
        )


COMMANDS: Sequence[click.Command] = (
    alerts_command,
    ack_command,
    silence_group,
    drift_command,
    drain_command,
    undrain_command,
    remediation_group,
    baseline_group,
    history_command,
    explain_command,
    reload_command,
)

__all__ = ["COMMANDS", "EXIT_OK", "EXIT_UNHEALTHY", "EXIT_UNREACHABLE"]
