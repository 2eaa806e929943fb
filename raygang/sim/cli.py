"""`raygang sim`: the command. Only click is imported here (the `raygang` command loads
this module for its help); the simulator is imported when the command runs."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import click

EXIT_USAGE = 2
SHIPPED_WEEK = Path(__file__).parent / "data" / "philly_2017-10-02_week.csv.gz"


class SimUsageError(click.ClickException):
    exit_code = EXIT_USAGE


def _policies(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
              ) -> list[str]:
    names = [n.strip() for v in value for n in v.split(",") if n.strip()]
    return names or ["raygang"]


@click.command("sim")
@click.argument("trace", required=False)
@click.option("--replay-cycle", "cycle_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Instead of a trace: rerun the scheduling cycle dumped in this file "
              "(GET /v1/debug/cycle), print its plan, and exit 0 if it is the plan the "
              "scheduler made, 1 if not (with the first difference).")
@click.option("--config", "config_paths", type=click.Path(exists=True, dir_okay=False,
              path_type=Path), multiple=True,
              help="Scheduler config (YAML) whose policy is replayed: queues, priority "
              "classes, actions, backfill. Its queues must name the trace's tenants.")
@click.option("--nodes", type=click.IntRange(1), default=80, show_default=True,
              help="Nodes in the simulated cluster.")
@click.option("--gpus-per-node", type=click.IntRange(1), default=8, show_default=True)
@click.option("--policy", "policies", multiple=True, callback=_policies,
              help="Policies to compare, comma-separated or repeated: raygang, fifo, "
              "static, sjf, kueue, kai, kai-tbf, raygang-tbf, raygang-no-tbf [default: raygang].")
@click.option("--start", help="Philly and Helios traces: first submission time kept "
              "(YYYY-MM-DD[ HH:MM:SS]).")
@click.option("--end", help="Philly and Helios traces: submissions before this time are "
              "kept.")
@click.option("--days", type=click.FloatRange(0, min_open=True),
              help="Philly and Helios traces: keep this many days from --start (instead "
              "of --end).")
@click.option("--vc-nodes", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The VC sizes, for quotas: Philly's nodes per VC [default: "
              "philly_vc_nodes.csv beside the trace]; Helios's GPUs per VC per day [default: "
              "cluster_gpu_number.csv beside the log].")
@click.option("--checkpoint", "checkpoint_s", type=click.FloatRange(0), default=1800.0,
              show_default=True, help="Seconds of running between a job's checkpoints.")
@click.option("--grace", "grace_s", type=click.FloatRange(0), default=30.0,
              show_default=True, help="Each gang's preemption grace period (seconds).")
@click.option("--inference", "inference_gpus", type=click.IntRange(0), default=0,
              show_default=True, help="Peak GPUs of a diurnal stream of inference "
              "deployments beside the trace (raygang.sim.inference; 0: none).")
@click.option("--inference-gpus", "inference_gang_gpus", type=click.IntRange(1), default=8,
              show_default=True, help="GPUs of one inference deployment.")
@click.option("--elastic", "elastic_min", type=click.FloatRange(0, 1, min_open=True),
              help="Make every job of more than one member elastic, running between this "
              "share of its members (rounded up) and all of them; its work progresses in "
              "proportion to the members it runs (default: every job rigid).")
@click.option("--elastic-resize", type=click.Choice(["live", "restart"]), default="live",
              show_default=True, help="With --elastic: how a job lives through a resize "
              "(restart: back to its last checkpoint, and idle while its members start "
              "again, as Ray Train V2 restarts its worker group).")
@click.option("--restart-s", "elastic_restart_s", type=click.FloatRange(0), default=120.0,
              show_default=True, help="With --elastic-resize restart: seconds a resized "
              "job does no work while it starts again (an assumption).")
@click.option("--rack-nodes", type=click.IntRange(1),
              help="Label the nodes with racks of this many nodes (rack=r0, r1...; a static "
              "partition's racks are its own) [default: no racks].")
@click.option("--topology", type=click.STRING,
              help="With --rack-nodes: what every job of more than one member asks of the "
              "racks: required (all in one rack), preferred (as few racks as it can) or "
              "segment:N (N members of consecutive ranks in one rack) [default: nothing].")
@click.option("--declared-runtime", type=click.FloatRange(1),
              help="Every job declares a max_runtime_s of this many times its duration "
              "(rounded up to the next minute), as if its users gave time limits; none "
              "of the traces records them [default: no job declares one].")
@click.option("--one-cycle-per-instant", is_flag=True,
              help="One scheduling cycle per simulated instant, after all of its events "
              "(a quarter fewer cycles on a busy week; ties at an instant break otherwise, "
              "so decisions differ: a probe of how much a result hangs on them; "
              "docs/simulator.md).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Write report.json, report.txt and the plots here.")
@click.option("--no-plots", is_flag=True, help="With --out: no PNG plots.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
def sim(trace: str | None, cycle_file: Path | None, config_paths: tuple[Path, ...], nodes: int, gpus_per_node: int,
        policies: list[str], start: str | None, end: str | None, days: float | None,
        vc_nodes: Path | None, checkpoint_s: float, grace_s: float, inference_gpus: int,
        inference_gang_gpus: int, elastic_min: float | None, elastic_resize: str,
        elastic_restart_s: float, rack_nodes: int | None, topology: str | None,
        declared_runtime: float | None, one_cycle_per_instant: bool, out: Path | None, no_plots: bool, quiet: bool) -> None:
    """Replay TRACE through raygang's scheduler in simulated time and compare policies.

    TRACE is a trace CSV (submit_s, duration_s, gpus or shape, queue, priority, name:
    see raygang.sim.trace), the Philly job file (philly_jobs_sep_oct.csv.gz) or a Helios
    job log (HeliosData's cluster_log.csv: raygang.sim.helios), gzipped or not;
    `philly-week` is the week of Philly shipped with raygang (Oct 2-9 2017, CC BY 4.0,
    see raygang/sim/data/SOURCE.txt). Prints a table of JCT, queueing, allocation,
    preemptions and fairness per policy; with --out also writes it as JSON and draws plots.
    """
    if cycle_file is not None:
        if trace is not None:
            raise SimUsageError("give a TRACE or --replay-cycle FILE, not both")
        click.get_current_context().exit(_replay_cycle(cycle_file))
    if trace is None:
        raise SimUsageError("missing TRACE (a trace file, or philly-week), or "
                            "--replay-cycle FILE")
    from pydantic import ValidationError

    from raygang.sim.api import simulate
    from raygang.sim.policies import POLICIES
    from raygang.sim.settings import SimSettings
    from raygang.sim.trace import TraceError

    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise SimUsageError(f"unknown policy {unknown[0]!r} (known: {', '.join(POLICIES)})")
    path = SHIPPED_WEEK if trace == "philly-week" else Path(trace)
    if not path.is_file():
        raise SimUsageError(f"{trace}: no such trace file")
    try:
        config = _config(config_paths)
        loaded = _trace(path, config, nodes, gpus_per_node, start, end, days, vc_nodes)
        settings = SimSettings(nodes=nodes, gpus_per_node=gpus_per_node,
                               checkpoint_s=checkpoint_s, preemption_grace_s=grace_s,
                               inference_gpus=inference_gpus,
                               inference_gang_gpus=inference_gang_gpus,
                               elastic_min=elastic_min, elastic_resize=elastic_resize,
                               elastic_restart_s=elastic_restart_s, rack_nodes=rack_nodes,
                               topology=topology, declared_runtime=declared_runtime,
                               one_cycle_per_instant=one_cycle_per_instant)
    except TraceError as error:
        raise SimUsageError(str(error)) from None
    except (ValidationError, ValueError, OSError) as error:
        raise SimUsageError(" ".join(str(error).split())) from None
    with _progress(quiet, policies) as tick:
        comparison = simulate(loaded, policies, settings, config, tick)
    click.echo(comparison.table())
    if out is not None:
        for path in comparison.write(out, plots=not no_plots):
            click.echo(f"wrote {path}")


def _replay_cycle(path: Path) -> int:
    from raygang.core.cycle_dump import CycleDumpError
    from raygang.sim.replay import read_dump, replay

    try:
        dump = read_dump(path)
    except OSError as error:
        raise SimUsageError(f"cannot read {path}: {error.strerror or error}") from None
    except CycleDumpError as error:
        raise SimUsageError(f"{path}: {' '.join(str(error).split())}") from None
    return replay(dump, click.echo)


def _config(paths: tuple[Path, ...]) -> Any:
    from raygang.control.config import SchedulerConfig

    return SchedulerConfig.from_files(list(paths)) if paths else SchedulerConfig()


def _header(path: Path) -> list[str]:
    from raygang.sim.trace import open_text

    with open_text(path) as text:
        return next(csv.reader(text), [])


def _trace(path: Path, config: Any, nodes: int, gpus_per_node: int, start: str | None,
           end: str | None, days: float | None, vc_nodes: Path | None) -> Any:
    from raygang.sim.helios import is_helios, load_helios
    from raygang.sim.philly import is_philly, load_philly
    from raygang.sim.trace import load_csv

    header = _header(path)
    if is_philly(header):
        return load_philly(path, vc_nodes, start=start, end=end, days=days, nodes=nodes,
                           gpus_per_node=gpus_per_node)
    if is_helios(header):
        return load_helios(path, vc_nodes, start=start, end=end, days=days, nodes=nodes,
                           gpus_per_node=gpus_per_node)
    if start or end or days or vc_nodes:
        raise SimUsageError("--start, --end, --days and --vc-nodes are for Philly and Helios "
                            "traces; a trace CSV is replayed whole")
    named = [q.name for q in config.queues if q.name != "default"]
    return load_csv(path, gpus_per_node, queues=(named + ["default"]) if named else None)


class _progress:
    """One rich progress bar per policy (jobs finished), or nothing when quiet."""

    def __init__(self, quiet: bool, policies: list[str]):
        self.quiet, self.policies = quiet, policies
        self.bars: Any = None
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> Any:
        if self.quiet:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.bars = Progress(TextColumn("{task.description:>10}"), BarColumn(),
                             MofNCompleteColumn(), TextColumn("jobs, {task.fields[at]}"),
                             transient=False)
        self.bars.__enter__()
        return self.tick

    def tick(self, policy: str, now: float, done: int, total: int) -> None:
        if policy not in self.tasks:
            self.tasks[policy] = self.bars.add_task(policy, total=total, at="")
        self.bars.update(self.tasks[policy], completed=done,
                         at=f"{now / 3600:,.0f} h simulated")

    def __exit__(self, *exc: object) -> None:
        if self.bars is not None:
            self.bars.__exit__(*exc)
