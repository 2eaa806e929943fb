"""How fast `raygang sim` replays a week, per policy, and whether it still decides the same.

    python bench/sim_speed.py                                    # shipped Philly week, 80 nodes
    python bench/sim_speed.py --nodes 48 --policies kueue        # an overloaded week
    python bench/sim_speed.py --save ref.json                    # keep every outcome ...
    python bench/sim_speed.py --check ref.json                   # ... and compare with it

Each policy is replayed alone (one process, one after the other) and timed: wall seconds
and CPU seconds of this process (on a shared machine the CPU time is the steadier of the
two). The target (issue 30 point 5) is a week of about 12,000 jobs in 60 s or less per
policy. `--save` writes, per policy, the summary (less its speed) and every job's ledger
(submitted, started, finished, running time, attempts, stops); `--check` replays again and
exits 1 at the first job or figure that differs: a speed-up must not change a decision.
`--walk-baseline` replays each policy a second time with every run of a line cut to one
gang (the walk gang by gang, before `core.backlog.Line.run_end`), side by side: the
ratio, and whether the two decided the same. `--config` sets the policy as `raygang sim
--config` does (`backfill: true`: best-effort lines, where the runs matter).
The trace is the week of the Microsoft Philly trace shipped in raygang/sim/data (Oct 2-9
2017, CC BY 4.0, see its SOURCE.txt) unless `--trace` names another.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout

from raygang.control.config import SchedulerConfig  # noqa: E402
from raygang.core.backlog import Line  # noqa: E402
from raygang.sim.api import simulate  # noqa: E402
from raygang.sim.philly import load_philly  # noqa: E402
from raygang.sim.settings import SimSettings  # noqa: E402

SHIPPED = ROOT / "raygang" / "sim" / "data" / "philly_2017-10-02_week.csv.gz"
TARGET_WALL_S = 60.0


def outcome(comparison: object, index: int) -> dict:
    """What one policy decided: its summary without timings, and every job's ledger."""
    summary = dict(comparison.summaries[index])  # type: ignore[attr-defined]
    summary.pop("speed", None)
    result = comparison.replays[index]  # type: ignore[attr-defined]
    jobs = {}
    for name, log in result.jobs.items():
        row = asdict(log)
        row.pop("job")
        jobs[name] = row
    return json.loads(json.dumps({"summary": summary, "jobs": jobs, "end_s": result.end_s,
                                  "cycles": result.cycles}, default=str),
                      parse_constant=lambda c: c)


def first_difference(a: object, b: object, where: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{where}/{key}: only on one side"
            found = first_difference(a[key], b[key], f"{where}/{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items against {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{where}[{i}]")
            if found:
                return found
        return None
    same = a == b or (isinstance(a, float) and isinstance(b, float)
                      and math.isnan(a) and math.isnan(b))
    return None if same else f"{where}: {a!r} against {b!r}"


class Sampler:
    """Which functions the replay is in, sampled every 5 ms of its CPU time (a SIGPROF
    timer, handled in the main thread between two steps of Python): the share of samples
    with each function on the stack (inclusive) and on top (own). A sampling thread would
    get the interpreter's lock where the main thread lets go of it, in calls into the
    system (`uuid4`'s `os.urandom`), and put half the samples there."""

    def __init__(self, every_s: float = 0.005):
        self.every_s = every_s
        self.inclusive: dict[str, int] = {}
        self.own: dict[str, int] = {}
        self.samples = 0

    def __enter__(self) -> Sampler:
        import signal

        self._before = signal.signal(signal.SIGPROF, self._sample)
        signal.setitimer(signal.ITIMER_PROF, self.every_s, self.every_s)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, self._before)

    def _sample(self, signum: int, frame: object) -> None:
        self.samples += 1
        seen, top = set(), True
        while frame is not None:
            code = frame.f_code  # type: ignore[attr-defined]
            where = f"{Path(code.co_filename).name}:{code.co_firstlineno}:{code.co_name}"
            if top:
                self.own[where] = self.own.get(where, 0) + 1
                top = False
            if where not in seen:
                seen.add(where)
                self.inclusive[where] = self.inclusive.get(where, 0) + 1
            frame = frame.f_back  # type: ignore[attr-defined]

    def report(self, n: int) -> None:
        total = max(self.samples, 1)
        for title, counts in (("inclusive", self.inclusive), ("own", self.own)):
            print(f"  {title} ({self.samples} samples):")
            for where, count in sorted(counts.items(), key=lambda kv: -kv[1])[:n]:
                print(f"    {100 * count / total:5.1f}%  {where}")


def walk_baseline(trace: object, name: str, settings: SimSettings,
                  config: SchedulerConfig | None, outcome_: dict, wall: float,
                  cpu: float) -> bool:
    """Replay `name` again walking every line gang by gang; print the times side by side.
    Whether it decided the same as the replay that jumped over runs."""
    run_end = Line.run_end
    Line.run_end = lambda line, i: i + 1  # type: ignore[method-assign]
    try:
        base_wall, base_cpu = time.perf_counter(), time.process_time()
        comparison = simulate(trace, [name], settings, config)  # type: ignore[arg-type]
        base_wall, base_cpu = time.perf_counter() - base_wall, time.process_time() - base_cpu
    finally:
        Line.run_end = run_end  # type: ignore[method-assign]
    diff = first_difference({k: v for k, v in outcome(comparison, 0).items() if k != "cycles"},
                            {k: v for k, v in outcome_.items() if k != "cycles"})
    print(f"{'':>8}  gang by gang: {base_wall:7.1f} s wall, {base_cpu:7.1f} s CPU; runs "
          f"jumped: {base_cpu / cpu:.2f}x less CPU, "
          + ("same outcome" if diff is None else f"DIFFERS at {diff}"), flush=True)
    return diff is None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=SHIPPED)
    parser.add_argument("--start", default="2017-10-02")
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--nodes", type=int, default=80)
    parser.add_argument("--policies", default="raygang,fifo,static,kueue,kai")
    parser.add_argument("--save", type=Path, help="write every policy's outcome here")
    parser.add_argument("--check", type=Path, help="compare with outcomes saved here")
    parser.add_argument("--profile", type=Path, help="cProfile each policy to PATH.POLICY")
    parser.add_argument("--sample", type=int, default=0, metavar="N",
                        help="print the N functions most often on the stack, sampled every "
                        "5 ms of CPU (cheap, unlike cProfile, which inflates small calls)")
    parser.add_argument("--one-cycle-per-instant", action="store_true",
                        help="SimSettings.one_cycle_per_instant (decides otherwise at ties)")
    parser.add_argument("--config", type=Path, action="append", default=[],
                        help="a scheduler config file over the defaults (as `raygang sim`)")
    parser.add_argument("--walk-baseline", action="store_true",
                        help="replay each policy again walking its lines gang by gang")
    args = parser.parse_args(argv)
    config = SchedulerConfig.from_files(args.config) if args.config else None
    trace = load_philly(args.trace, start=args.start, days=args.days, nodes=args.nodes)
    settings = SimSettings(nodes=args.nodes, one_cycle_per_instant=args.one_cycle_per_instant)
    reference = json.loads(args.check.read_text()) if args.check else {}
    saved, failed = {}, False
    policies = args.policies.split(",")
    print(f"{len(trace.jobs)} jobs, {args.nodes} nodes x 8 GPUs, from {args.start} for "
          f"{args.days:g} days ({trace.attribution})")
    for name in policies:
        wall, cpu = time.perf_counter(), time.process_time()
        if args.profile:
            import cProfile

            profiler = cProfile.Profile()
            comparison = profiler.runcall(simulate, trace, [name], settings, config)
            profiler.dump_stats(f"{args.profile}.{name}")
        elif args.sample:
            with Sampler() as sampler:
                comparison = simulate(trace, [name], settings, config)
            sampler.report(args.sample)
        else:
            comparison = simulate(trace, [name], settings, config)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        verdict = "ok" if wall <= TARGET_WALL_S else "SLOW"
        line = (f"{name:>8}: {wall:7.1f} s wall, {cpu:7.1f} s CPU, "
                f"{comparison.replays[0].cycles:>7} cycles [{verdict}: target "
                f"<= {TARGET_WALL_S:g} s]")
        saved[name] = outcome(comparison, 0)
        if name in reference:  # the cycles it took are its cost, not what it decided
            was = {k: v for k, v in reference[name].items() if k != "cycles"}
            diff = first_difference(was, {k: v for k, v in saved[name].items()
                                          if k != "cycles"})
            line += "  same outcome" if diff is None else f"  DIFFERS at {diff}"
            failed |= diff is not None
        print(line, flush=True)
        if args.walk_baseline:
            failed |= not walk_baseline(trace, name, settings, config, saved[name], wall, cpu)
    if args.save:
        args.save.write_text(json.dumps(saved, sort_keys=True) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
