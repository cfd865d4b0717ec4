"""Record the amdsmi answers a whole daemon gets from the simulator, for the replay backend.

Runs the real daemon over the simulated node with a fake clock (fleetd.replay_wiring) and
writes the recording (gzip JSON, fleetd.sim.replay) — by default the shipped one,
fleetd/data/replay/mi355x-healthy.json.gz. Prints one JSON line: what was recorded.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # record with this checkout

from fleetd.logs import configure_logging
from fleetd.replay_wiring import DEFAULT_RECORDING, RecordPlan, record_daemon


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_RECORDING)
    parser.add_argument("--model", choices=["MI355X", "MI300X"], default="MI355X")
    parser.add_argument("--compute-partition", default="SPX")
    parser.add_argument("--memory-partition", default="NPS1")
    parser.add_argument("--ticks", type=int, default=RecordPlan.ticks)
    parser.add_argument("--load", type=float, default=RecordPlan.load)
    parser.add_argument("--seed", type=int, default=RecordPlan.seed)
    args = parser.parse_args()
    configure_logging("json", "warning", stream=sys.stderr)
    plan = RecordPlan(
        model=args.model,
        seed=args.seed,
        load=args.load,
        ticks=args.ticks,
        compute_partition=args.compute_partition,
        memory_partition=args.memory_partition,
    )
    recording = record_daemon(plan)
    recording.save(args.out)
    answers = sum(len(v) for v in recording.calls.values())
    print(
        json.dumps(
            {
                "recording": str(args.out),
                "bytes": args.out.stat().st_size,
                "keys": len(recording.calls),
                "answers": answers,
                **recording.meta,
            }
        )
    )


if __name__ == "__main__":
    main()
