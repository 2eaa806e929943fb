"""A stress set of `raygang sim` slices, and the policies compared on every one of them.

    python bench/stress.py --out stress                       # every slice, the default policies
    python bench/stress.py --out stress --slices philly-oct09-40n --policies raygang-tbf
    python bench/stress.py --out stress --table               # the table of what was run

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
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout

from raygang.sim.philly import ATTRIBUTION, load_philly, proportional_nodes  # noqa: E402
from raygang.sim.trace import Trace  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"
PHILLY = TRACES / "philly" / "philly_jobs_sep_oct.csv.gz"
HELIOS = TRACES / "helios-vc" / "venus_vc_gpu_number.csv"
HELIOS_DAY = "2020-09-28"
HELIOS_ATTRIBUTION = ("Helios VC sizes: SenseTime HeliosData / HeliosArtifact, Hu et al., "
                      "SC'21, CC BY 4.0 / MIT")
POLICIES = ("raygang-no-tbf", "raygang-tbf", "static", "kueue", "kai")
# raygang with other time-based fair share settings (`usage:`), as `raygang sim` replays
# them: `--config <slice>/queues.yaml --config <out>/<variant>.yaml --policy raygang`.
VARIANTS = {
    "tbf-share": {"enabled": True, "order_by_usage": False},  # KAI's rule alone
    "tbf-order": {"enabled": True, "k_value": 0.0},  # Kueue's order and penalty alone
    "tbf-hl12h": {"enabled": True, "half_life_s": 12 * 3600.0},  # usage halves in 12 h
}


@dataclass(frozen=True)
class Slice:
    name: str
    start: str
    nodes: int
    days: float = 3.0
    quotas: str = "philly"  # philly | helios | skewed | demand
    compress: float = 1.0  # submissions this many times denser
    inference: int = 0  # peak GPUs of the inference stream


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


def build(s: Slice, gpus_per_node: int = 8) -> tuple[Trace, dict[str, int]]:
    """The slice's jobs and each tenant's quota in GPUs."""
    trace = load_philly(PHILLY, start=s.start, days=s.days, nodes=s.nodes,
                        gpus_per_node=gpus_per_node)
    jobs = [j.model_copy(update={"submit_s": j.submit_s / s.compress}) for j in trace.jobs]
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
    s, where = SLICES[name], Path(out) / name
    config = SchedulerConfig.from_files([where / "queues.yaml"])
    if policy in VARIANTS:
        config = SchedulerConfig.model_validate({**config.model_dump(),
                                                 "usage": VARIANTS[policy]})
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
    (where / f"{policy}.json").write_text(json.dumps(_finite(data), indent=1))
    return f"{name} {policy}: {comparison.summaries[0]['speed']['wall_s']:.0f} s"


def _finite(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


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
    for name in SLICES:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--slices", default=",".join(SLICES))
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--jobs", type=int, default=2, help="replays at once")
    parser.add_argument("--table", action="store_true", help="only print the table")
    args = parser.parse_args(argv)
    names, policies = args.slices.split(","), args.policies.split(",")
    if not args.table:
        for name in names:
            write(SLICES[name], args.out)
        for variant, usage in VARIANTS.items():
            (args.out / f"{variant}.yaml").write_text(f"usage: {json.dumps(usage)}\n")
        work = [(n, p, str(args.out)) for n in names for p in policies
                if not (args.out / n / f"{p}.json").exists()]
        with ProcessPoolExecutor(args.jobs) as pool:
            for line in pool.map(run_one, work):
                print(line, flush=True)
    print(table(args.out, policies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
