"""A stress set of `raygang sim` slices, and the policies compared on every one of them.

    python bench/stress.py --out stress                       # every slice, the default policies
    python bench/stress.py --out stress --slices philly-oct09-40n --policies raygang-tbf
    python bench/stress.py --out stress --table               # the table of what was run
    python bench/stress.py --out stress --regret --plot fig.png  # the sweep that chose
    python bench/stress.py --out stress --regret --candidates raygang-no-tbf,backfill,trade1
    python bench/stress.py --out stress --seeds 3             # and two jittered copies each
    python bench/stress.py --out stress --regret --seeds 3    # a slice's figure: their mean
    python bench/stress.py --out stress --regret --held-out   # with the held-out slices

Built from ../shared/traces: the Philly job file (Microsoft, CC BY 4.0; see its
SOURCE.txt) and the Helios virtual-cluster sizes (SenseTime, SC'21; see its SOURCE.txt).
Each slice is written as a trace CSV and a scheduler config with its queues and quotas
(`<out>/<slice>/trace.csv`, `queues.yaml`), so that one slice is replayed again with a
plain `raygang sim` command (written to `<out>/<slice>/command.txt`); each policy's
report lands in `<out>/<slice>/<policy>.json` (read by `bench/stress_report.py`: the table
and the sweep). A week of Philly takes minutes per policy on this 2-core machine, so the
slices are 3 days on 40-56 nodes (and one compressed in time): the same loads as a week on
64-80 nodes, at a third of the cost.

Slices (quota shapes: every tenant's guarantee in whole nodes, adding up to the cluster):
- `philly-*`: Philly's virtual clusters, quotas from their node counts (the Helios
  authors' philly_vc_nodes.csv), as `raygang sim` maps Philly;
- `*-x2-*`: the same days with submissions twice as dense (half the gaps): overload;
- `helios-*`: the Helios Venus cluster's VC sizes on 2020-09-28 (one of 16 VCs has a
  quarter of the GPUs), given to Philly's tenants by rank of their demand in the slice;
- `skewed-*`: the same sizes given the other way round: the tenants that ask for most
  get the smallest guarantees;
- `demand-*`: quotas in proportion to each tenant's demand (GPU-hours) in the slice;
- `*-inf`: with a diurnal inference stream beside it (`--inference 64`).

Candidates beyond the named `raygang sim` policies are `VARIANTS`: raygang with a config
overlay (`<out>/<variant>.yaml`), e.g. `backfill` (a queue's line goes on past a head that
cannot start) and `trade1` (`preemption.reclaim_trade_ratio: 1`, core.preemption.trade).

Noise probes (`PROBES`, not part of the set): a slice of the set with every submission
moved by up to `jitter_s` either way (seeded). A policy's figures on a probe against the
slice's say how far its result moves for reasons nobody would call a policy's: a
difference between two policies smaller than that is not a difference (`--regret`).

Held-out slices (`HELD_OUT`, not part of the set the default was chosen on): other weeks
and loads of the same trace, replayed by name (`--slices philly-oct23-48n,...`) and swept
with the set by `--regret --held-out`. They check a default on days it was not tuned on.

Copies (`--seeds K`): one copy of each slice chooses a default partly by chance (a minute's
jitter moved one slice's gap between two policies by 16 points), so with K > 1 each slice
of the set named by `--slices` is also replayed on K - 1 copies, `<slice>~2` ...
`<slice>~K`: the slice with every submission moved by up to `JITTER_S`, seeded by the
copy's name. `--regret` then takes each slice's mean regret over its copies, and the
standard error across them as the noise margin instead of the probes'.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout

from bench import stress_report, stress_why  # noqa: E402  (the tables, the sweep, why)
from raygang.sim.api import json_safe  # noqa: E402
from raygang.sim.metrics import LARGE_GPUS  # noqa: E402
from raygang.sim.philly import ATTRIBUTION, load_philly, proportional_nodes  # noqa: E402
from raygang.sim.trace import Trace  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"
PHILLY = TRACES / "philly" / "philly_jobs_sep_oct.csv.gz"
HELIOS = TRACES / "helios-vc" / "venus_vc_gpu_number.csv"
HELIOS_DAY = "2020-09-28"
POLICIES = ("raygang-no-tbf", "raygang-tbf", "static", "kueue", "kai")
CANDIDATES = ("raygang-no-tbf", "raygang-tbf", "tbf-share", "tbf-order", "tbf-hl12h",
              "backfill", "trade1", "backfill-trade1")
# raygang with other settings (config overlays, merged into the slice's config), as
# `raygang sim` replays them: `--config <slice>/queues.yaml --config <out>/<variant>.yaml
# --policy raygang`.
# The rules the default had before issue 30's switch (2026-12-02): the SLA hold at 4 h and
# reclaim by its fixed delay and minimum runtime alone. The variants measured against them
# keep them, so that their figures in docs/simulator.md replay as they were made.
FIXED = {"sla_waiting_time_s": 14400.0}
# Reclaim as it was before 2026-12-03 (no wait for a victim's checkpoint): the variants
# measured before the default waited replay as they were made
NO_CHECKPOINT_WAIT = {"reclaim_checkpoint_ratio": None}
FIXED_RECLAIM = {"reclaim_trade_ratio": None, **NO_CHECKPOINT_WAIT}
VARIANTS = {
    # time-based fair share (`usage:`)
    "tbf-share": {"usage": {"enabled": True, "order_by_usage": False},  # KAI's rule alone
                  "preemption": NO_CHECKPOINT_WAIT},
    "tbf-order": {"usage": {"enabled": True, "k_value": 0.0},  # Kueue's order and penalty
                  "preemption": NO_CHECKPOINT_WAIT},
    "tbf-hl12h": {"usage": {"enabled": True, "half_life_s": 12 * 3600.0},  # halves in 12 h
                  "preemption": NO_CHECKPOINT_WAIT},
    # a queue's line goes on past a head that waits (Kueue's BestEffortFIFO), usage off
    "backfill": {"backfill": True, **FIXED, "preemption": FIXED_RECLAIM,
                 "usage": {"enabled": False}},
    # reclaim by what it trades (core.preemption.trade): before the delay and minimum
    # runtime when the wait costs at least as much as the work lost
    "trade1": {"backfill_lookahead": 4, **FIXED, "preemption": {"reclaim_trade_ratio": 1.0},
               "usage": {"enabled": False}},
    "backfill-trade1": {"backfill": True, **FIXED, "preemption": {"reclaim_trade_ratio": 1.0},
                        "usage": {"enabled": False}},
    # the same, bounded: a pass sets aside at most N + 1 gangs of a queue's line, and a gang
    # like one set aside without a try (core/cycle.py `_pass`); `strict`: none (strict
    # FIFO per queue, the default before issue 30's sweep chose `ahead4`)
    **{f"ahead{n}": {"backfill": False, "backfill_lookahead": n, **FIXED,
                     "preemption": FIXED_RECLAIM, "usage": {"enabled": False}}
       for n in (1, 4, 16, 64)},
    "strict": {"backfill": False, "backfill_lookahead": 0, **FIXED,
               "preemption": FIXED_RECLAIM, "usage": {"enabled": False}},
}


def overlay(base: dict, over: dict) -> dict:
    """`base` with `over` merged in, mappings key by key (as `--config` files merge)."""
    out = dict(base)
    for key, value in over.items():
        nested = isinstance(value, dict) and isinstance(base.get(key), dict)
        out[key] = overlay(base[key], value) if nested else value
    return out


# The default (`ahead4`) with one thing changed (issue 30, 2026-11-30): reclaim by what it
# trades, at two ratios; the SLA hold after 2 h or 1 h instead of 4 h, or none; preempt's
# victims the cheapest to stop instead of the newest.
VARIANTS.update({
    "a4-nohold": overlay(VARIANTS["ahead4"], {"sla_waiting_time_s": None}),
    "a4-pcheap": overlay(VARIANTS["ahead4"], {"preemption": {"preempt_victim_order": "cheapest"}}),
    **{f"a4-trade{name}": overlay(VARIANTS["ahead4"],
                                  {"preemption": {"reclaim_trade_ratio": ratio}})
       for name, ratio in (("1", 1.0), ("05", 0.5))},
    **{f"a4-sla{h}h": overlay(VARIANTS["ahead4"], {"sla_waiting_time_s": h * 3600.0})
       for h in (2, 1)},
    # reclaim waits for its victims' next checkpoint when that costs less (issue 30,
    # 2026-12-01: `preemption.reclaim_checkpoint_ratio`, core.preemption.trade)
    **{f"a4-ck{name}": overlay(VARIANTS["ahead4"],
                               {"preemption": {"reclaim_checkpoint_ratio": ratio}})
       for name, ratio in (("05", 0.5), ("1", 1.0), ("2", 2.0), ("4", 4.0))},
    # best-effort lines with no hold, the trade at 0.5, or both (issue 30, 2026-12-02: the
    # held-out slices)
    "bf-nohold": overlay(VARIANTS["backfill"], {"sla_waiting_time_s": None}),
    "bf-trade05": overlay(VARIANTS["backfill"], {"preemption": {"reclaim_trade_ratio": 0.5}}),
    **{f"bf-nohold-trade{name}": overlay(VARIANTS["backfill"], {
        "sla_waiting_time_s": None, "preemption": {"reclaim_trade_ratio": ratio}})
       for name, ratio in (("025", 0.25), ("05", 0.5), ("1", 1.0))},
    # the checkpoint wait again, on the default of 2026-12-02 (best-effort lines, no hold,
    # the trade at 0.5; issue 30, 2026-12-03: measured on `ahead4` only before); ck2 chose
    # today's default, `no-ck` is the one before it
    **{f"ck{name}": {"preemption": {"reclaim_checkpoint_ratio": ratio},
                     "usage": {"enabled": False}}
       for name, ratio in (("05", 0.5), ("1", 1.0), ("2", 2.0))},
    "no-ck": {"preemption": NO_CHECKPOINT_WAIT, "usage": {"enabled": False}},
    # preempt (inference) stops the gangs that lose least, as reclaim does, on today's
    # default (issue 30, 2026-12-04; `a4-pcheap` measured it on `ahead4`)
    "pcheap": {"preemption": {"preempt_victim_order": "cheapest"}, "usage": {"enabled": False}},
    # the hold (Volcano's sla-waiting-time) again, for wide gangs only: those that need at
    # least N nodes at once (`sla_min_nodes`), after H hours (issue 30, 2026-12-05: the
    # 32-GPU gangs' longest waits)
    **{f"hold{n}n-{h}h": {"sla_waiting_time_s": h * 3600.0, "sla_min_nodes": n,
                          "usage": {"enabled": False}}
       for n in (2, 4) for h in (1, 2, 4)},
    # several holds at once (`sla_max_holds`), for any gang, after H hours (issue 30,
    # 2026-12-05: the one-node gangs that wait days behind a best-effort line's small ones
    # make much of the p99)
    **{f"holds{k}-{h}h": {"sla_waiting_time_s": h * 3600.0, "sla_max_holds": k,
                          "usage": {"enabled": False}}
       for k in (1, 4, 16) for h in (4, 8)},
})
# Every job declares a max_runtime_s, K times its duration (`raygang sim --declared-runtime
# K`; no trace here records time limits), on the default's line or on a strict one (issue
# 30, 2026-12-02): variant -> (its config, K)
DECLARED = {f"{line}-decl{k}": (line, float(k))
            for line in ("ahead4", "strict") for k in (1, 2, 4)}
VARIANTS.update({name: VARIANTS[line] for name, (line, _) in DECLARED.items()})


@dataclass(frozen=True)
class Slice:
    name: str
    start: str
    nodes: int
    days: float = 3.0
    quotas: str = "philly"  # philly | helios | skewed | demand
    compress: float = 1.0  # submissions this many times denser
    inference: int = 0  # peak GPUs of the inference stream
    jitter_s: float = 0.0  # each submission moved by up to this either way (a probe)


SLICES = {s.name: s for s in (
    Slice("philly-oct02-48n", "2017-10-02", 48),
    Slice("philly-oct09-40n", "2017-10-09", 40),
    Slice("philly-oct16-48n", "2017-10-16", 48),
    Slice("philly-sep25-40n", "2017-09-25", 40),
    Slice("philly-oct02-x2-48n", "2017-10-02", 48, days=2.0, compress=2.0),
    Slice("helios-oct09-40n", "2017-10-09", 40, quotas="helios"),
    Slice("skewed-oct16-48n", "2017-10-16", 48, quotas="skewed"),
    Slice("demand-oct23-56n", "2017-10-23", 56, quotas="demand"),
    Slice("philly-oct02-48n-inf", "2017-10-02", 48, inference=64),
    Slice("helios-oct09-40n-inf", "2017-10-09", 40, quotas="helios", inference=64),
)}
# The slices where usage moved the mean JCT most, with submissions moved by up to 60 s.
PROBES = {s.name: s for s in (
    Slice("philly-oct02-48n-j60", "2017-10-02", 48, jitter_s=60.0),
    Slice("demand-oct23-56n-j60", "2017-10-23", 56, quotas="demand", jitter_s=60.0),
    Slice("helios-oct09-40n-inf-j60", "2017-10-09", 40, quotas="helios", inference=64,
          jitter_s=60.0),
)}
# Slices the default was not chosen on (issue 30's held-out check, 2026-12-02): other weeks
# and loads of the same trace, and the quota shapes on other weeks. `--regret --held-out`
# sweeps them with the set.
HELD_OUT = {s.name: s for s in (
    Slice("philly-oct23-48n", "2017-10-23", 48),
    Slice("philly-oct09-32n", "2017-10-09", 32),
    Slice("philly-oct16-x2-40n", "2017-10-16", 40, days=2.0, compress=2.0),
    Slice("helios-oct23-48n-inf", "2017-10-23", 48, quotas="helios", inference=64),
    Slice("demand-oct02-48n-inf", "2017-10-02", 48, quotas="demand", inference=64),
    Slice("skewed-sep25-32n", "2017-09-25", 32, quotas="skewed"),
    Slice("helios-oct16-x2-40n", "2017-10-16", 40, days=2.0, compress=2.0, quotas="helios"),
)}
BASES = {**SLICES, **HELD_OUT}  # the slices that have jittered copies
ALL = {**SLICES, **PROBES, **HELD_OUT}
JITTER_S = 60.0  # a copy's (`--seeds`): as the probes'


def copies(name: str, seeds: int) -> list[str]:
    """A slice's name and its K - 1 jittered copies' (`--seeds K`): `<slice>`, `<slice>~2`
    ... `<slice>~K`. A probe has none: it is a jittered copy already."""
    if name not in BASES:
        return [name]
    return [name] + [f"{name}~{k}" for k in range(2, seeds + 1)]


def named(name: str) -> Slice:
    """The slice, probe or copy of that name. A copy is its slice with every submission
    moved by up to `JITTER_S`, seeded by the copy's name (`build`): the same on every run."""
    if "~" not in name:
        return ALL[name]
    base, _, k = name.partition("~")
    if not k.isdigit() or name not in copies(base, int(k)):  # as `copies` names them
        raise KeyError(name)
    return replace(BASES[base], name=name, jitter_s=JITTER_S)


def build(s: Slice, gpus_per_node: int = 8) -> tuple[Trace, dict[str, int]]:
    """The slice's jobs and each tenant's quota in GPUs."""
    trace = load_philly(PHILLY, start=s.start, days=s.days, nodes=s.nodes,
                        gpus_per_node=gpus_per_node)
    jobs = [j.model_copy(update={"submit_s": j.submit_s / s.compress}) for j in trace.jobs]
    if s.jitter_s:
        moved = random.Random(s.name)
        jobs = sorted((j.model_copy(update={"submit_s": max(0.0, j.submit_s + moved.uniform(
            -s.jitter_s, s.jitter_s))}) for j in jobs), key=lambda j: j.submit_s)
    demand = {q: 0.0 for q in trace.quotas}
    for job in jobs:
        demand[job.queue] = demand.get(job.queue, 0.0) + job.gpu_seconds
    if s.quotas == "philly":
        quotas = dict(trace.quotas)
    elif s.quotas == "demand":
        weights = {q: max(1, round(d / 3600)) for q, d in demand.items()}
        quotas = {q: n * gpus_per_node for q, n in proportional_nodes(weights, s.nodes).items()}
    else:
        sizes = sorted(_helios_sizes(), reverse=True)
        by_demand = sorted(demand, key=lambda q: (-demand[q], q))
        if s.quotas == "skewed":
            by_demand.reverse()
        sizes = (sizes + [min(sizes)] * len(by_demand))[:len(by_demand)]
        weights = dict(zip(by_demand, sizes))
        quotas = {q: n * gpus_per_node for q, n in proportional_nodes(weights, s.nodes).items()}
    return Trace(tuple(jobs), source=str(PHILLY), attribution=ATTRIBUTION,
                 start=trace.start, notes=trace.notes, quotas=quotas), quotas


def _helios_sizes() -> list[int]:
    with HELIOS.open() as text:
        for row in csv.DictReader(text):
            if row["date"] == HELIOS_DAY:
                return [int(v) for k, v in row.items()
                        if k not in ("date", "total") and int(v) > 0]
    raise ValueError(f"{HELIOS}: no row for {HELIOS_DAY}")


def write(s: Slice, out: Path) -> Path:
    """The slice as `raygang sim` reads it: trace.csv, queues.yaml, command.txt."""
    trace, quotas = build(s)
    where = out / s.name
    where.mkdir(parents=True, exist_ok=True)
    with (where / "trace.csv").open("w", newline="") as f:
        rows = csv.writer(f)
        rows.writerow(["submit_s", "duration_s", "shape", "queue", "priority", "name"])
        for job in trace.jobs:
            rows.writerow([f"{job.submit_s:g}", f"{job.duration_s:g}",
                           f"{job.members}x{job.gpus_per_member}", job.queue, "training",
                           job.name])
    lines = ["queues:"] + [f"  - {{name: '{q}', quota: {{GPU: {g}}}}}"
                           for q, g in sorted(quotas.items())]
    (where / "queues.yaml").write_text("\n".join(lines) + "\n")
    inference = f" --inference {s.inference}" if s.inference else ""
    (where / "command.txt").write_text(
        f"raygang sim {where}/trace.csv --config {where}/queues.yaml --nodes {s.nodes}"
        f"{inference} --policy {','.join(POLICIES)} -q\n")
    return where


def run_one(args: tuple[str, str, str]) -> str:
    """Replay one slice under one policy; writes `<policy>.json` beside the slice."""
    from raygang.control.config import SchedulerConfig
    from raygang.sim.api import simulate
    from raygang.sim.settings import SimSettings
    from raygang.sim.trace import load_csv

    name, policy, out = args
    s, where = named(name), Path(out) / name
    config = SchedulerConfig.from_files([where / "queues.yaml"])
    if policy in VARIANTS:
        config = SchedulerConfig.model_validate(overlay(config.model_dump(),
                                                        VARIANTS[policy]))
    trace = load_csv(where / "trace.csv", 8,
                     queues=[q.name for q in config.queues if q.name != "default"]
                     + ["default"])  # as `raygang sim` reads it
    settings = SimSettings(nodes=s.nodes, inference_gpus=s.inference,
                           declared_runtime=DECLARED[policy][1] if policy in DECLARED else None)
    comparison = simulate(trace, ["raygang" if policy in VARIANTS else policy], settings,
                          config)
    comparison.summaries[0]["policy"] = policy
    data = comparison.to_json()
    logs = comparison.replays[0].jobs.values()
    data["jobs"] = {log.job.name: [log.job.queue, None if log.skipped else log.jct_s]
                    for log in logs}
    # For `--why`: each stop (action, seconds run, seconds of work lost, GPUs), and each
    # completed large gang's queueing in all and before its first start (seconds)
    data["stops"] = {log.job.name: [[s.action, s.ran_s, s.lost_s, s.gpus] for s in log.stops]
                     for log in logs if log.stops}
    data["large"] = {log.job.name: [log.queued_s, log.first_start - log.submitted_at]
                     for log in logs if log.job.gpus >= LARGE_GPUS and log.jct_s is not None
                     and log.first_start is not None and log.submitted_at is not None}
    (where / f"{policy}.json").write_text(json.dumps(json_safe(data), indent=1))
    return f"{name} {policy}: {comparison.summaries[0]['speed']['wall_s']:.0f} s"


def replay(names: list[str], policies: list[str], out: Path, jobs: int) -> None:
    """Write each slice (or copy) and the variants' overlays, and replay every policy not
    replayed there yet (its report present: skipped)."""
    for name in names:
        write(named(name), out)
    for variant, settings in VARIANTS.items():
        (out / f"{variant}.yaml").write_text(
            "".join(f"{k}: {json.dumps(v)}\n" for k, v in settings.items()))
    work = [(n, p, str(out)) for n in names for p in policies
            if not (out / n / f"{p}.json").exists()]
    with ProcessPoolExecutor(jobs) as pool:
        for line in pool.map(run_one, work):
            print(line, flush=True)


def regret(out: Path, candidates: list[str], grouped: dict[str, list[str]],
           figure: Path | None) -> None:
    """Print the sweep that chooses the default and the goals missed; draw the figure."""
    print(stress_report.sweep(out, candidates, grouped, list(PROBES)))
    print("\ngoals missed (issue 30's Done means):\n")
    print(stress_report.goals(out, candidates, grouped))
    if figure:
        stress_report.plot(out, figure, [*candidates, *stress_report.BASELINES], grouped)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--slices", default=",".join(SLICES))
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--jobs", type=int, default=2, help="replays at once")
    parser.add_argument("--seeds", type=int, default=1,
                        help="each slice of the set and K - 1 jittered copies (<slice>~2 ...)")
    parser.add_argument("--table", action="store_true", help="only print the table")
    parser.add_argument("--regret", action="store_true",
                        help="only print the sweep that chose the default (markdown)")
    parser.add_argument("--plot", type=Path, help="with --regret: the figure, as PNG")
    parser.add_argument("--held-out", action="store_true",
                        help="with --regret: the held-out slices (HELD_OUT) with the set's")
    parser.add_argument("--candidates", default=",".join(CANDIDATES),
                        help="with --regret: the candidates for the default")
    parser.add_argument("--waits", metavar="TENANT",
                        help="only print, per slice of --slices, the mean wait of TENANT's "
                             "jobs (all: every tenant's) by submission window, per policy")
    parser.add_argument("--window-h", type=float, default=6.0, help="with --waits")
    parser.add_argument("--why", metavar="CANDIDATE",
                        help="only print, per slice of the set (with --held-out, and the "
                             "held-out ones), where CANDIDATE's missed goals come from")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds: 1 or more")
    policies = args.policies.split(",")
    if args.waits:  # where a slice's gap comes from, from what was replayed
        for name in args.slices.split(","):
            print(stress_report.waits(args.out, name, args.waits, policies, args.window_h))
        return 0
    swept = BASES if args.held_out else SLICES
    if args.why:  # the whole set, as --regret
        print(stress_why.why(args.out, args.why, {n: copies(n, args.seeds) for n in swept}))
        return 0
    if args.regret:  # the whole set, whatever --slices names: what was not replayed is skipped
        regret(args.out, args.candidates.split(","), {n: copies(n, args.seeds) for n in swept},
               args.plot)
        return 0
    if not args.table:
        replay([c for n in args.slices.split(",") for c in copies(n, args.seeds)], policies,
               args.out, args.jobs)
    print(stress_report.table(args.out, [c for n in ALL for c in copies(n, args.seeds)],
                              policies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
