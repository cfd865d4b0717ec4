"""How long ``fleetctl status`` takes for a large fleet, by fan-out and from the registry.

1. 1,000 agents: lightweight stand-ins (one separate process, one listening socket per
   agent on loopback) serve ``/api/v1/status`` with a realistic 8-GPU status document;
   ``fleetctl status --inventory`` (a real process, from interpreter start to exit) asks
   all of them. Target: ≤ 3 s.
2. 10,000 nodes in the fleet registry on the local PostgreSQL (a private schema, dropped
   afterwards), each row with its versions (MI355X and MI300X groups, 0.5 % of nodes on an
   older driver) and its firing alerts (1 % of nodes with one): ``fleetctl status --db``,
   ``fleetctl drift --db`` and ``fleetctl alerts --db`` read them, one query each; and each
   node's reliability KPI summary (``fleet_reports``: 8 GPUs, the shipped rules' precision,
   5 % of nodes with a remediation run) for ``fleetctl report --db``, one query too.
   Target: ≤ 1 s each.
3. Fleet caps on that registry (each node's fleetd.yaml caps its cluster at 10 %): the wave
   check of ``fleetctl remediation mode on`` (accepted for a rack, refused for a cluster) and
   an agent's lease under the percentage cap.
4. Fleet-silence propagation on that registry: ``fleetctl silence add --fleet`` (a real
   process), then an agent's heartbeat pull (the query and the node-matcher filter, among
   50 other live fleet silences) until it holds the silence. An agent pulls once per
   ``registry.heartbeat_interval`` (15 s by default), so the worst case adds one interval.

Prints ONE JSON line: wall seconds of each (median of --runs), node counts, and whether each
run saw every node.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's fleetd, not an installed one
PG_BASE_URL = os.environ.get("FLEETD_TEST_PG", "postgresql+psycopg2://root@127.0.0.1:5432/test")


# ------------------------------------------------------------------------- stand-in agents
def status_document(node: str, now: float, index: int) -> dict[str, Any]:
    """A status document shaped like an agent's (see docs/api/openapi.yaml, NodeStatus)."""
    gpus = []
    for g in range(8):
        gpus.append(
            {
                "gpu": g,
                "uuid": f"{index:08x}-0000-1000-8000-{g:012x}",
                "bdf": f"0000:{0x05 + 0x20 * g:02x}:00.0",
                "model": "MI355X",
                "product": "AMD Instinct MI355X OAM",
                "serial": f"69361{index:05d}{g}",
                "hive_id": f"0x{index:016x}",
                "present": True,
                "responsive": True,
                "error": None,
                "missing_readings": 1,
                "health": {"state": "healthy", "data_age_s": 1.2, "reasons": []},
                "readings": {
                    "temperature_hotspot_c": 62.0 + g,
                    "temperature_hbm_c": 55.0 + g,
                    "temperature_hotspot_limit_c": 110.0,
                    "power_w": 950.0 + g,
                    "power_cap_w": 1400.0,
                    "utilization_gfx": 0.93,
                    "memory_used_bytes": 2.6e11,
                    "memory_total_bytes": 3.09e11,
                    "ecc_correctable_total": 0.0,
                    "ecc_uncorrectable_total": 0.0,
                    "ecc_deferred_total": 0.0,
                    "retired_pages": 0.0,
                    "pcie_width": 16.0,
                    "pcie_max_width": 16.0,
                    "pcie_speed_gts": 32.0,
                    "pcie_max_speed_gts": 32.0,
                    "xgmi_links_up": 7.0,
                    "xgmi_links_down": 0.0,
                },
                "alerts": {"critical": 0, "warning": 0, "info": 0},
                "remediation": None,
            }
        )
    return {
        "node": node,
        "version": "0.1.0",
        "now": now,
        "started_at": now - 86400,
        "health": {"state": "healthy", "data_age_s": 1.2, "reasons": []},
        "last_poll_at": now - 1.2,
        "data_age_s": 1.2,
        "gpus_total": 8,
        "gpus_healthy": 8,
        "hottest_junction_c": 69.0,
        "power_w": 7628.0,
        "alerts": {"critical": 0, "warning": 0, "info": 0, "pending": 0, "firing": []},
        "remediation": {
            "available": True,
            "mode": "dry-run",
            "pause": {"paused": False, "by": None, "reason": None, "at": None},
            "breaker": {"tripped": False, "reason": None, "tripped_at": None},
            "lease_scope": "fleet",
            "gpus_out_of_service": 0,
            "in_progress": False,
            "active": [],
            "held": [],
        },
        "rules": {
            "loaded": 18,
            "failing": [],
            "last_eval_at": now - 1.2,
            "last_reload_ok": True,
            "last_reload_problems": [],
        },
        "gpus": gpus,
    }


def serve(count: int) -> None:
    """Run ``count`` stand-in agents until stdin closes; print their ports as one JSON line."""

    async def main() -> None:
        now = time.time()
        servers = []
        ports: list[int] = []
        for index in range(count):
            node = f"gpu-node-{index + 1:04d}"
            body = json.dumps(status_document(node, now, index)).encode()
            answer = (
                b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )

            async def handle(
                reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answer: bytes = answer
            ) -> None:
                try:
                    await reader.readuntil(b"\r\n\r\n")
                    writer.write(answer)
                    await writer.drain()
                except (ConnectionError, asyncio.IncompleteReadError):
                    pass
                finally:
                    writer.close()

            server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=256)
            servers.append(server)
            ports.append(server.sockets[0].getsockname()[1])
        print(json.dumps(ports), flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
        for server in servers:
            server.close()

    asyncio.run(main())


def fleetctl(args: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "fleetd.cli.fleetctl_main", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    return time.perf_counter() - started, done


def bench_fanout(count: int, runs: int, timeout: float) -> dict[str, Any]:
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert server.stdout is not None
        ports = json.loads(server.stdout.readline())
        with tempfile.TemporaryDirectory() as tmp:
            inventory = Path(tmp) / "inventory.yaml"
            inventory.write_text(
                "".join(
                    f"- {{name: gpu-node-{i + 1:04d}, address: '127.0.0.1:{port}'}}\n"
                    for i, port in enumerate(ports)
                )
            )
            walls, complete = [], True
            for _ in range(runs):
                wall, done = fleetctl(
                    ["status", "--inventory", str(inventory), "--timeout", str(timeout)]
                )
                walls.append(wall)
                complete = complete and done.returncode == 0
                complete = complete and f"{count} nodes: {count} healthy" in done.stdout
        return {"seconds": statistics.median(walls), "all_runs": walls, "complete": complete}
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=30)


# ------------------------------------------------------------------------------ registry
def registry_rows(count: int, now: float) -> list[dict[str, Any]]:
    """Registry rows as agents publish them, with versions and a few firing alerts."""
    from fleetd.registry.drift import NodeVersions
    from fleetd.registry.store import summary_row, version_columns
    from fleetd.registry.summary import summarize

    rows = []
    for index in range(count):
        node = f"gpu-node-{index + 1:05d}"
        status = status_document(node, now, index)
        row = summary_row(summarize(status), now - 5, f"http://{node}:9477")
        sku = "MI300X" if index % 4 == 0 else "MI355X"
        driver = "6.12.1" if index % 200 == 7 else "6.14.14"
        versions = NodeVersions(sku, driver, "7.0.2/26.1.0", "022.050.000.011", None, "0.1.0")
        row.update(version_columns(versions))
        row["labels"] = json.dumps({"cluster": f"c{index % 10}", "rack": f"r{index % 500:03d}"})
        firing = []
        if index % 100 == 3:
            firing.append(
                {"rule": "GpuEccCorrectableErrorRate", "severity": "warning", "gpu": 3,
                 "since": now - 300, "value": 2.5, "summary": "ECC errors", "silenced": False,
                 "acknowledged": False, "fingerprint": f"{index:016x}"}
            )  # fmt: skip
        row["alerts_firing"] = json.dumps(firing)
        row["gpus_physical"] = 8
        row["caps"] = json.dumps(CAPS)  # what each node's fleetd.yaml sets (the wave check)
        rows.append(row)
    return rows


FRESH = ["--stale-after", "3600"]  # the rows were written minutes ago on a loaded machine
CAPS = [{"group_by": [], "max": "10000"}, {"group_by": ["cluster"], "max": "10%"}]
"""Each registry node's caps: 10 % of its cluster (1,000 nodes, 8,000 GPUs: 800)."""


def bench_caps(url: str, runs: int) -> dict[str, Any]:
    """The fleet caps on 10,000 registry nodes: ``fleetctl remediation mode on`` checking a
    wave (a real process: one rack of 20 nodes accepted, a cluster of 1,000 refused), and an
    agent's lease under a 10 % cluster cap (the group's size read in the lease's transaction)."""
    from fleetd.remedy.config import FleetConfig
    from fleetd.remedy.lease import SqlFleetLease

    waves, accepted_ok = [], True
    for run in range(runs):  # a new rack each run: a rack already on is not newly enabled
        rack = f'rack="r{7 + run:03d}"'
        wall, done = fleetctl(
            ["remediation", "mode", "on", "--db", url, "-n", rack, "-r", "b", *FRESH]
        )
        waves.append(wall)
        accepted_ok = accepted_ok and done.returncode == 0
        accepted_ok = accepted_ok and "20 of 20 named nodes newly on, 160 GPUs" in done.stdout
    accepted = {"seconds": statistics.median(waves), "complete": accepted_ok}
    refused = timed(
        ["remediation", "mode", "on", "--db", url, "-n", 'cluster="c3"', "-r", "bench", *FRESH],
        runs,
        lambda d: d.returncode == 1 and "cap 10% of cluster=c3 (800 of 8000 GPUs)" in d.stderr,
    )
    config = FleetConfig.model_validate({"max_gpus_out": 10_000, "caps": CAPS[1:]})
    lease = SqlFleetLease.shared(
        url, config, node="gpu-node-00004", labels={"cluster": "c3"}, stale_after=3600
    )
    walls, complete = [], True
    try:
        for run in range(runs):
            started = time.perf_counter()
            decision = lease.acquire(
                node="gpu-node-00004", run_id=f"bench{run}", gpus=range(8), manual=False,
                now=time.time(),
            )  # fmt: skip
            walls.append(time.perf_counter() - started)
            complete = complete and decision.granted
            lease.release(f"bench{run}")
    finally:
        lease.dispose()
    return {
        "wave_accepted_s": accepted["seconds"],
        "wave_refused_s": refused["seconds"],
        "lease_s": statistics.median(walls),
        "complete": accepted["complete"] and refused["complete"] and complete,
    }


def report_rows(count: int, now: float) -> list[dict[str, Any]]:
    """Each node's KPI summary as its heartbeat publishes it (``fleetd.registry.report``)."""
    from fleetd.model import GpuIdentity
    from fleetd.registry.report import report_row
    from fleetd.remedy.kpi import build_report
    from fleetd.rules.config import RulesConfig, load_rules
    from fleetd.rules.trust import rule_modes

    modes = rule_modes(load_rules(RulesConfig(local_dir=None)))
    rows = []
    for index in range(count):
        node = f"gpu-node-{index + 1:05d}"
        gpus = [
            GpuIdentity(i, f"{node}-{i}", f"0000:{i:02x}:00.0", serial=f"SN{index:05d}{i}",
                        hive_id=f"{node}-hive")
            for i in range(8)
        ]  # fmt: skip
        report = build_report(
            node=node, runs=[], events={}, history=[], identities=gpus, rules=modes,
            now=now, window_s=7 * 86400, probation_s=7200,
        )  # fmt: skip
        summary = report.summary(compact=True)
        if index % 20 == 0:  # a node that remediated once this week
            stages = dict.fromkeys(("queued", "drain", "capture", "reset", "verify"), 12.0)
            summary["success"] = {"succeeded": 1, "failed": 0, "ratio": 1.0}
            summary["readmission"] = {"runs": 1, "mean_s": 240.0, "stages": stages}
            summary["incidents"]["gpus"] = [
                {"gpu": 3, "serial": f"SN{index:05d}3", "incidents": 1, "mean_between_s": None}
            ]
            summary["rules"] = [
                {"rule": "GpuEccUncorrectableError", "mode": "remediate", "plan": "reset",
                 "runs": 1, "fault_found": 0, "nothing_found": 1, "recurred": 0,
                 "precision": 0.0, "fired": 1, "resolved_without_action": 0,
                 "shadow_fired": 0, "shadow_would": None}
            ]  # fmt: skip
        rows.append({"node": node, **report_row(summary, now - 5)})
    return rows


def timed(args: list[str], runs: int, ok: Any, *, before: Any = None) -> dict[str, Any]:
    """Median wall of ``fleetctl args`` over ``runs``, and whether every run was right
    (``before`` is called ahead of each run, outside the time measured)."""
    walls, complete = [], True
    for _ in range(runs):
        if before is not None:
            before()
        wall, done = fleetctl(args)
        walls.append(wall)
        try:
            complete = complete and bool(ok(done))
        except (ValueError, KeyError):
            complete = False
    return {"seconds": statistics.median(walls), "all_runs": walls, "complete": complete}


def bench_silence(url: str, runs: int, now: float) -> dict[str, Any]:
    """fleetctl adds a fleet silence; one agent's heartbeat pull then holds it."""
    from fleetd.registry.silences import FleetSilenceBook, for_node, parse_matchers

    book = FleetSilenceBook(url)
    try:
        for i in range(50):  # other live fleet silences the pull reads too
            book.add(
                parse_matchers([f'rack="r{i:03d}"'], "node"),
                (),
                starts_at=now,
                ends_at=now + 3600,
                created_by="bench",
                comment="other",
                actor="bench",
                now=now,
            )
        labels = {"cluster": "c3", "rack": "r003"}
        propagation, adds, pulls, complete = [], [], [], True
        for run in range(runs):
            started = time.perf_counter()
            add_wall, done = fleetctl(
                ["silence", "add", "--fleet", "--db", url, "-n", 'cluster="c3"',
                 f'alertname="Bench{run}"', "-r", "bench", "--duration", "1h"]
            )  # fmt: skip
            pulled = time.perf_counter()
            held = for_node(book.current(time.time()), "gpu-node-00004", labels)
            end = time.perf_counter()
            complete = complete and done.returncode == 0
            complete = complete and any(f"Bench{run}" in repr(s.matchers) for s in held)
            propagation.append(end - started)
            adds.append(add_wall)
            pulls.append(end - pulled)
    finally:
        book.close()
    return {
        "seconds": statistics.median(propagation),
        "add_s": statistics.median(adds),
        "pull_s": statistics.median(pulls),
        "complete": complete,
    }


def bench_registry(count: int, runs: int) -> dict[str, Any]:
    from sqlalchemy import create_engine, text

    from fleetd.registry.report import reports_table
    from fleetd.registry.store import REGISTRY_METADATA, nodes_table

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_BASE_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = f"{PG_BASE_URL}?options=-csearch_path%3D{schema}"
    engine = create_engine(url)
    try:
        REGISTRY_METADATA.create_all(engine)
        now = time.time()
        with engine.begin() as conn:
            conn.execute(nodes_table.insert(), registry_rows(count, now))
            conn.execute(reports_table.insert(), report_rows(count, now))
        minority = sum(1 for i in range(count) if i % 200 == 7)
        firing = sum(1 for i in range(count) if i % 100 == 3)
        remediated = sum(1 for i in range(count) if i % 20 == 0)
        report_at = text("UPDATE fleet_reports SET at = :now")  # fresh when fleetctl reads

        def fresh_reports() -> None:
            with engine.begin() as conn:
                conn.execute(report_at, {"now": time.time()})

        return {
            "status": timed(
                ["status", "--db", url],
                runs,
                lambda d: d.returncode == 0 and f"{count} nodes: {count} healthy" in d.stdout,
            ),
            "drift": timed(
                ["drift", "--db", url, "--json"],
                runs,
                lambda d: (
                    d.returncode == 1
                    and sum(len(m["nodes"]) for m in json.loads(d.stdout)["drift"]) == minority
                ),
            ),
            "alerts": timed(
                ["alerts", "--db", url, "--json"],
                runs,
                lambda d: d.returncode == 0 and len(json.loads(d.stdout)["alerts"]) == firing,
            ),
            "report": timed(
                ["report", "--db", url, "--json"],
                runs,
                lambda d: (
                    d.returncode == 0
                    and json.loads(d.stdout)["fleet"]["nodes"] == count
                    and json.loads(d.stdout)["fleet"]["success"]["succeeded"] == remediated
                ),
                before=fresh_reports,
            ),
            "report_text": timed(
                ["report", "--db", url],
                runs,
                lambda d: d.returncode == 0 and f"reliability of {count} of {count}" in d.stdout,
                before=fresh_reports,
            ),
            "silence": bench_silence(url, runs, now),
            "caps": bench_caps(url, runs),
        }
    finally:
        engine.dispose()
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--registry-nodes", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--heartbeat-interval", type=float, default=15.0)
    parser.add_argument("--skip-fanout", action="store_true", help="Only the registry part.")
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return
    fanout = (
        {"seconds": None, "complete": None}
        if args.skip_fanout
        else bench_fanout(args.agents, args.runs, args.timeout)
    )
    registry = bench_registry(args.registry_nodes, args.runs)
    print(
        json.dumps(
            {
                "bench": "fanout",
                "fanout_agents": args.agents,
                "fanout_wall_s": None if fanout["seconds"] is None else round(fanout["seconds"], 3),
                "fanout_complete": fanout["complete"],
                "fanout_target_s": 3.0,
                "registry_nodes": args.registry_nodes,
                "registry_wall_s": round(registry["status"]["seconds"], 3),
                "registry_complete": registry["status"]["complete"],
                "registry_target_s": 1.0,
                "drift_wall_s": round(registry["drift"]["seconds"], 3),
                "drift_complete": registry["drift"]["complete"],
                "drift_target_s": 1.0,
                "registry_alerts_wall_s": round(registry["alerts"]["seconds"], 3),
                "registry_alerts_complete": registry["alerts"]["complete"],
                "report_wall_s": round(registry["report_text"]["seconds"], 3),
                "report_json_wall_s": round(registry["report"]["seconds"], 3),
                "report_complete": registry["report"]["complete"]
                and registry["report_text"]["complete"],
                "report_target_s": 1.0,
                "silence_propagation_s": round(registry["silence"]["seconds"], 3),
                "silence_add_s": round(registry["silence"]["add_s"], 3),
                "silence_pull_s": round(registry["silence"]["pull_s"], 4),
                "silence_complete": registry["silence"]["complete"],
                "wave_check_accepted_s": round(registry["caps"]["wave_accepted_s"], 3),
                "wave_check_refused_s": round(registry["caps"]["wave_refused_s"], 3),
                "lease_under_percentage_cap_s": round(registry["caps"]["lease_s"], 4),
                "caps_complete": registry["caps"]["complete"],
                "silence_propagation_worst_s": round(
                    registry["silence"]["seconds"] + args.heartbeat_interval, 3
                ),
                "heartbeat_interval_s": args.heartbeat_interval,
                "runs": args.runs,
            }
        )
    )


if __name__ == "__main__":
    main()
