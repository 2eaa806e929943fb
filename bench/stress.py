"""A stress set of `raygang sim` slices, and the policies compared on every one of them.

    python bench/stress.py --out stress                       # every slice, the default policies
    python bench/stress.py --out stress --slices philly-oct09-40n --policies raygang-tbf
    python bench/stress.py --out stress --table               # the table of what was run
    python bench/stress.py --out stress --regret --plot fig.png  # the sweep that chose
    python bench/stress.py --out stress --regret --candidates raygang-no-tbf,backfill,trade1

Built from ../shared/traces: the Philly job file (Microsoft, CC BY 4.0; see its
SOURCE.txt) and the Helios virtual-cluster sizes (SenseTime, SC'21; see its SOURCE.txt).
Each slice is written as a trace CSV and a scheduler config with its queues and quotas
(`<out>/<slice>/trace.csv`, `queues.yaml`), so that one slice is replayed again with a
plain `raygang sim` command (written to `<out>/<slice>/command.txt`); each policy's
report lands in `<out>/<slice>/<policy>.json`. A week of Philly takes minutes per policy
on this 2-core machine, so the slices are 3 days on 40-56 nodes (and one compressed in
time): the same loads as a week on 64-80 nodes, at a third of the cost.

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
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout

from raygang.sim.api import json_safe  # noqa: E402
from raygang.sim.philly import ATTRIBUTION, load_philly, proportional_nodes  # noqa: E402
from raygang.sim.trace import Trace  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"
PHILLY = TRACES / "philly" / "philly_jobs_sep_oct.csv.gz"
HELIOS = TRACES / "helios-vc" / "venus_vc_gpu_number.csv"
HELIOS_DAY = "2020-09-28"
HELIOS_ATTRIBUTION = ("Helios VC sizes: SenseTime HeliosData / HeliosArtifact, Hu et al., "
                      "SC'21, CC BY 4.0 / MIT")
POLICIES = ("raygang-no-tbf", "raygang-tbf", "static", "kueue", "kai")
CANDIDATES = ("raygang-no-tbf", "raygang-tbf", "tbf-share", "tbf-order", "tbf-hl12h",
              "backfill", "trade1", "backfill-trade1")
BASELINES = ("kueue", "kai")
# raygang with other settings (config overlays, merged into the slice's config), as
# `raygang sim` replays them: `--config <slice>/queues.yaml --config <out>/<variant>.yaml
# --policy raygang`.
VARIANTS = {
    # time-based fair share (`usage:`)
    "tbf-share": {"usage": {"enabled": True, "order_by_usage": False}},  # KAI's rule alone
    "tbf-order": {"usage": {"enabled": True, "k_value": 0.0}},  # Kueue's order and penalty
    "tbf-hl12h": {"usage": {"enabled": True, "half_life_s": 12 * 3600.0}},  # halves in 12 h
    # a queue's line goes on past a head that waits (Kueue's BestEffortFIFO), usage off
    "backfill": {"backfill": True, "usage": {"enabled": False}},
    # reclaim by what it trades (core.preemption.trade): before the delay and minimum
    # runtime when the wait costs at least as much as the work lost
    "trade1": {"preemption": {"reclaim_trade_ratio": 1.0}, "usage": {"enabled": False}},
    "backfill-trade1": {"backfill": True, "preemption": {"reclaim_trade_ratio": 1.0},
                        "usage": {"enabled": False}},
    # the same, bounded: a pass sets aside at most N + 1 gangs of a queue's line, and a gang
    # like one set aside without a try (core/cycle.py `_pass`); `strict`: none (strict
    # FIFO per queue, the default before issue 30's sweep chose `ahead4`)
    **{f"ahead{n}": {"backfill": False, "backfill_lookahead": n, "usage": {"enabled": False}}
       for n in (1, 4, 16, 64)},
    "strict": {"backfill": False, "backfill_lookahead": 0, "usage": {"enabled": False}},
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
})


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
ALL = {**SLICES, **PROBES}


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
    s, where = ALL[name], Path(out) / name
    config = SchedulerConfig.from_files([where / "queues.yaml"])
    if policy in VARIANTS:
        config = SchedulerConfig.model_validate(overlay(config.model_dump(),
                                                        VARIANTS[policy]))
    trace = load_csv(where / "trace.csv", 8,
                     queues=[q.name for q in config.queues if q.name != "default"]
                     + ["default"])  # as `raygang sim` reads it
    settings = SimSettings(nodes=s.nodes, inference_gpus=s.inference)
    comparison = simulate(trace, ["raygang" if policy in VARIANTS else policy], settings,
                          config)
    comparison.summaries[0]["policy"] = policy
    data = comparison.to_json()
    data["jobs"] = {log.job.name: [log.job.queue, None if log.skipped else log.jct_s]
                    for log in comparison.replays[0].jobs.values()}
    (where / f"{policy}.json").write_text(json.dumps(json_safe(data), indent=1))
    return f"{name} {policy}: {comparison.summaries[0]['speed']['wall_s']:.0f} s"


# The table ------------------------------------------------------------------------------
def summaries(out: Path, name: str) -> dict[str, dict]:
    found = {}
    for path in sorted((out / name).glob("*.json")):
        data = json.loads(path.read_text())
        found[path.stem] = {**data["policies"][0], "jobs": data["jobs"]}
    return found


def tenant_vs_static(policy: dict, static: dict | None) -> dict[str, float]:
    """Each tenant's mean JCT over its mean JCT alone in its partition, on the jobs done
    under both (as `raygang sim` compares them, `sim.api`)."""
    if static is None:
        return {}
    pairs: dict[str, list[tuple[float, float]]] = {}
    for name, (queue, jct) in policy["jobs"].items():
        alone = static["jobs"].get(name, [queue, None])[1]
        if jct is not None and alone is not None:
            pairs.setdefault(queue, []).append((jct, alone))
    return {q: sum(a for a, _ in v) / max(sum(b for _, b in v), 1e-9)
            for q, v in pairs.items()}


def worst_vs_static(policy: dict, static: dict | None) -> float | None:
    return max(tenant_vs_static(policy, static).values(), default=None)


def table(out: Path, policies: list[str]) -> str:
    head = (f"{'slice':<22}{'policy':<16}{'JCT mean':>9}{'p99':>7}{'worst/st':>9}"
            f"{'preempt':>8}{'GPU-h lost':>11}{'32-GPU wait':>12}")
    lines = [head, "-" * len(head)]
    for name in ALL:
        found = summaries(out, name)
        for policy in policies:
            p = found.get(policy)
            if p is None:
                continue
            worst = worst_vs_static(p, found.get("static"))
            wait = p["large_gangs"]["queueing_max_h"]
            lines.append(
                f"{name:<22}{policy:<16}{p['jct_h']['mean']:>9.2f}{p['jct_h']['p99']:>7.1f}"
                f"{'-' if worst is None else f'{worst:.2f}':>9}"
                f"{p['preemptions']['count']:>8}{p['preemptions']['gpu_hours_lost']:>11.1f}"
                f"{'-' if wait is None else f'{wait:.1f}':>12}")
    lines.append(f"data: {ATTRIBUTION}")
    lines.append(f"quota shapes: {HELIOS_ATTRIBUTION}")
    return "\n".join(lines)


# The sweep that chooses ----------------------------------------------------------------
def _metric(p: dict, key: str) -> float:
    return {"jct": p["jct_h"]["mean"], "p99": p["jct_h"]["p99"],
            "lost": p["preemptions"]["gpu_hours_lost"]}[key]


def regrets(out: Path, candidates: list[str], key: str = "jct") -> dict[str, dict[str, float]]:
    """Per candidate, per slice: its `key` over the best of every candidate and baseline
    replayed on the slice, less 1 (0: it was the best)."""
    found: dict[str, dict[str, float]] = {c: {} for c in candidates}
    for name in SLICES:
        ran = summaries(out, name)
        best = min((_metric(ran[p], key) for p in (*candidates, *BASELINES) if p in ran),
                   default=None)
        for c in candidates:
            if c in ran and best is not None:
                found[c][name] = _metric(ran[c], key) / max(best, 1e-9) - 1.0
    return found


def noise(out: Path, policies: list[str]) -> dict[str, float]:
    """Per probe and policy: how far its mean JCT moved from the slice's, a share."""
    moved = {}
    for probe in PROBES:
        base, again = summaries(out, probe.rsplit("-j", 1)[0]), summaries(out, probe)
        for policy in policies:
            if policy in base and policy in again:
                moved[f"{probe} {policy}"] = (_metric(again[policy], "jct")
                                              / _metric(base[policy], "jct") - 1.0)
    return moved


def sweep(out: Path, candidates: list[str]) -> str:
    """The table that chose the default: each candidate's mean-JCT regret per slice, its
    worst case and mean, and the other goals' worst cases; then the choice."""
    jct, p99 = regrets(out, candidates), regrets(out, candidates, "p99")
    candidates = [c for c in candidates if jct[c]]  # replayed on some slice
    names = [n for n in SLICES if any(n in jct[c] for c in candidates)]
    lines = ["mean JCT regret (% over the best policy on the slice):", "",
             "| candidate | " + " | ".join(names) + " | worst | mean |",
             "|---" * (len(names) + 3) + "|"]
    for c in candidates:
        cells = [f"{100 * jct[c][n]:.1f}" if n in jct[c] else "-" for n in names]
        worst = max(jct[c].values(), default=math.nan)
        mean = sum(jct[c].values()) / max(len(jct[c]), 1)
        lines.append(f"| {c} | " + " | ".join(cells) + f" | **{100 * worst:.1f}** | "
                     f"{100 * mean:.1f} |")
    lines += ["", ("| candidate | worst JCT regret | worst p99 regret | GPU-h lost / best "
                   "peer's, worst | worst tenant / static, worst |"), "|---|---|---|---|---|"]
    for c in candidates:
        lost, tenant = [], []
        for n in names:
            ran = summaries(out, n)
            peers = [_metric(ran[b], "lost") for b in BASELINES if b in ran]
            if c in ran and peers:
                lost.append(_metric(ran[c], "lost") / max(min(peers), 1e-9))
            worst_t = worst_vs_static(ran[c], ran.get("static")) if c in ran else None
            if worst_t is not None:
                tenant.append(worst_t)
        w = max(jct[c], key=jct[c].__getitem__)
        lines.append(f"| {c} | {100 * jct[c][w]:.1f} % ({w}) | "
                     f"{100 * max(p99[c].values()):.1f} % | "
                     f"{f'{max(lost):.2f}' if lost else '-'} | "
                     f"{f'{max(tenant):.2f}' if tenant else '-'} |")
    moved = noise(out, candidates)
    paired = paired_noise(moved)
    margin = max((abs(v) for v in paired.values()), default=0.0)
    lines += ["", "noise: mean JCT on a probe (submissions moved by up to 60 s) against the "
              "slice: " + ", ".join(f"{k} {100 * v:+.1f} %" for k, v in moved.items()),
              "the difference between two policies moved by: "
              + ", ".join(f"{k} {100 * v:+.1f} points" for k, v in paired.items()),
              "", choose(jct, margin, candidates[0])]  # the first: the default to beat
    return "\n".join(lines)


def goals(out: Path, candidates: list[str]) -> str:
    """Issue 30's "Done means", per candidate and slice: mean JCT <= the best of Kueue-style
    and KAI-style; p99 within 1 % of the best of them and of FIFO (where replayed);
    GPU-hours lost <= half the best peer's; worst tenant <= 1.05 of static; 32-GPU gangs'
    longest wait <= FIFO's (where replayed and there are any). Compared at the table's
    precision (hours to 0.01, p99, GPU-hours and waits to 0.1), as some baselines' figures
    are the table's. A cell lists the goals missed ('-': every goal measured is met)."""
    names = list(SLICES)
    lines = ["| candidate | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for c in candidates:
        cells = []
        for n in names:
            ran = summaries(out, n)
            peers = [ran[b] for b in BASELINES if b in ran]
            if c not in ran or not peers:
                cells.append("")
                continue
            p, missed = ran[c], []

            def at(q: dict, key: str) -> float:
                return round(_metric(q, key), 2 if key == "jct" else 1)

            if at(p, "jct") > min(at(b, "jct") for b in peers):
                missed.append("JCT")
            floor = min(at(b, "p99") for b in peers + ([ran["fifo"]] if "fifo" in ran
                                                       else []))
            if at(p, "p99") > 1.01 * floor:
                missed.append("p99")
            if at(p, "lost") > 0.5 * min(at(b, "lost") for b in peers):
                missed.append("lost")
            worst = worst_vs_static(p, ran.get("static"))
            if worst is not None and worst > 1.05:
                missed.append("tenant")
            wait, fifo = p["large_gangs"]["queueing_max_h"], ran.get("fifo")
            limit = fifo["large_gangs"]["queueing_max_h"] if fifo else None
            if wait is not None and limit is not None and round(wait, 1) > round(limit, 1):
                missed.append("32-GPU")
            cells.append(", ".join(missed) or "-")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_noise(moved: dict[str, float]) -> dict[str, float]:
    """Per probe and pair of policies replayed on it: how far the difference between the
    two moved (the noise that matters when two policies are compared on one slice)."""
    by_probe: dict[str, dict[str, float]] = {}
    for key, value in moved.items():
        probe, policy = key.split(" ")
        by_probe.setdefault(probe, {})[policy] = value
    paired = {}
    for probe, found in by_probe.items():
        names = sorted(found)
        for i, first in enumerate(names):
            for second in names[i + 1:]:
                paired[f"{probe} {second} - {first}"] = found[second] - found[first]
    return paired


def choose(jct: dict[str, dict[str, float]], margin: float,
           default: str = "raygang-no-tbf") -> str:
    """The candidate of least worst-case mean-JCT regret, among those replayed on every
    slice any candidate was; the default stays unless one beats it by more than `margin`
    (how far moving submissions by a minute moves the difference between two policies)."""
    every = set().union(*(v.keys() for v in jct.values()))
    worst = {c: max(v.values()) for c, v in jct.items() if v and set(v) == every}
    best = min(worst, key=lambda c: (worst[c], c != default, c))
    if best != default and worst[default] - worst[best] <= margin:
        return (f"choice: {default} (worst case {100 * worst[default]:.1f} %); {best}'s "
                f"{100 * worst[best]:.1f} % is within the noise ({100 * margin:.1f} %)")
    return f"choice: {best} (worst case {100 * worst[best]:.1f} %)"


def plot(out: Path, path: Path, policies: list[str]) -> None:
    """Each policy's mean JCT over the best on each slice, as bars (those replayed on every
    slice, on the slices that all of them were)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jct = regrets(out, policies)
    most = max(len(v) for v in jct.values())
    policies = [p for p in policies if len(jct[p]) == most]
    names = [n for n in SLICES if all(n in jct[p] for p in policies)]
    fig, ax = plt.subplots(figsize=(10, 3.8))
    width = 0.8 / len(policies)
    for i, p in enumerate(policies):
        ax.bar([k + i * width for k in range(len(names))], [100 * jct[p][n] for n in names],
               width, label=p)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(names))], names, rotation=30,
                  ha="right", fontsize=8)
    ax.set_ylabel("mean JCT over the best (%)")
    ax.set_title("Stress set: mean JCT regret per slice (lower is better)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.text(0.01, 0.01, "Philly trace: Microsoft, CC BY 4.0 (Jeon et al., ATC'19); quota "
             "shapes: Helios VC sizes (Hu et al., SC'21)", fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--slices", default=",".join(SLICES))
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--jobs", type=int, default=2, help="replays at once")
    parser.add_argument("--table", action="store_true", help="only print the table")
    parser.add_argument("--regret", action="store_true",
                        help="only print the sweep that chose the default (markdown)")
    parser.add_argument("--plot", type=Path, help="with --regret: the figure, as PNG")
    parser.add_argument("--candidates", default=",".join(CANDIDATES),
                        help="with --regret: the candidates for the default")
    args = parser.parse_args(argv)
    names, policies = args.slices.split(","), args.policies.split(",")
    if args.regret:
        candidates = args.candidates.split(",")
        print(sweep(args.out, candidates))
        print("\ngoals missed (issue 30's Done means):\n")
        print(goals(args.out, candidates))
        if args.plot:
            plot(args.out, args.plot, [*candidates, *BASELINES])
        return 0
    if not args.table:
        for name in names:
            write(ALL[name], args.out)
        for variant, settings in VARIANTS.items():
            (args.out / f"{variant}.yaml").write_text(
                "".join(f"{k}: {json.dumps(v)}\n" for k, v in settings.items()))
        work = [(n, p, str(args.out)) for n in names for p in policies
                if not (args.out / n / f"{p}.json").exists()]
        with ProcessPoolExecutor(args.jobs) as pool:
            for line in pool.map(run_one, work):
                print(line, flush=True)
    print(table(args.out, policies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
