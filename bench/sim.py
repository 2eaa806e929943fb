"""Benchmark `raygang sim`: how fast a replay runs, and what the policies do on Philly.

    python bench/sim.py                 # the Philly week of Oct 2-9 2017, 80 and 64 nodes
    python bench/sim.py --quick         # six hours of it on 40 nodes (for tests)
    python bench/sim.py --policies raygang,fifo,static,kueue,kai --nodes 80

Reads ../shared/traces/philly/philly_jobs_sep_oct.csv.gz when present (the whole
Sept-Oct file, for other weeks), else the week shipped in raygang/sim/data. Prints, per
cluster size, the comparison table and the replay speed in simulated hours per wall
second; the target is one week (about 11,000 jobs) on 80 x 8 GPUs in under 2 minutes of
wall time. Every table carries the trace's attribution (CC BY 4.0, see SOURCE.txt).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout

from raygang.sim.api import simulate  # noqa: E402
from raygang.sim.philly import load_philly  # noqa: E402
from raygang.sim.settings import SimSettings  # noqa: E402

SHARED = ROOT.parent / "shared" / "traces" / "philly" / "philly_jobs_sep_oct.csv.gz"
SHIPPED = ROOT / "raygang" / "sim" / "data" / "philly_2017-10-02_week.csv.gz"
TARGET_WEEK_WALL_S = 120.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="six hours, 40 nodes")
    parser.add_argument("--start", default="2017-10-02")
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--nodes", default="80,64", help="cluster sizes, comma-separated")
    parser.add_argument("--policies", default="raygang,fifo")
    parser.add_argument("--json", type=Path, help="also write the summaries here")
    args = parser.parse_args(argv)
    days, sizes = (0.25, [40]) if args.quick else (args.days, [int(n) for n in
                                                                 args.nodes.split(",")])
    source = SHARED if SHARED.exists() else SHIPPED
    out = {}
    for nodes in sizes:
        trace = load_philly(source, start=args.start, days=days, nodes=nodes)
        comparison = simulate(trace, args.policies.split(","), SimSettings(nodes=nodes))
        print(comparison.table())
        for summary in comparison.summaries:
            speed = summary["speed"]
            line = (f"{summary['policy']:>8} on {nodes} nodes: {len(trace.jobs)} jobs in "
                    f"{speed['wall_s']:.1f} s wall, {speed['simulated_h_per_wall_s']:,.0f} "
                    f"simulated h / wall s, {speed['cycles']} cycles")
            if days == 7.0 and nodes == 80:
                verdict = "ok" if speed["wall_s"] < TARGET_WEEK_WALL_S else "SLOW"
                line += f" [{verdict}: target < {TARGET_WEEK_WALL_S:g} s]"
            print(line)
        out[nodes] = comparison.to_json()
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
