"""Record golden logs: the durable log of a simulated run, as the coordinator would write it.

    python -m tools.sim.golden [--seeds 3,7,11] [--out tests/golden]

Each seed gives `sim_seed_N.log` (one base64 log record per line, encoded by the real log
codec) and `sim_seed_N.expected.json` (the summary and the durable fingerprint that replaying
the log must reproduce). Regenerate only on purpose: a changed golden file means the log
format or the core's decisions changed, and old data directories would replay differently.
"""
from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path

from coordinator.core import durable_fingerprint, summarize
from coordinator.logcodec import encode_record
from tools.sim.simulation import Simulation


def summary_dict(state, run_id) -> dict:
    s = summarize(state, run_id)
    return {"state": s.state, "selected": [[r.cell_id, r.attempt_id, r.score, r.worker_id, r.generation,
                                            r.dispatch_order] for r in s.selected],
            "incomplete": [[i.cell_id, i.reason, i.attempts] for i in s.incomplete],
            "observed_cost_usd": s.observed_cost_usd, "usage_complete": s.usage_complete,
            "late_reports": s.late_reports}


def record(seed: int, out: Path) -> None:
    sim = Simulation(seed, check=True)
    sim.run()
    lines = [base64.b64encode(encode_record(i, cmd)).decode() for i, cmd in enumerate(sim.log, start=1)]
    (out / f"sim_seed_{seed}.log").write_text("\n".join(lines) + "\n")
    expected = {"seed": seed, "records": len(lines), "fingerprint": durable_fingerprint(sim.state),
                "run_id": sim.run_id, "summary": summary_dict(sim.state, sim.run_id)}
    (out / f"sim_seed_{seed}.expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.sim.golden")
    ap.add_argument("--seeds", default="3,7,11")
    ap.add_argument("--out", type=Path, default=Path("tests/golden"))
    args = ap.parse_args(argv)
    for seed in (int(s) for s in args.seeds.split(",")):
        record(seed, args.out)
        print(f"recorded seed {seed} into {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
