"""The comparison as a text table (rich), with the trace's attribution under it."""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from raygang.sim.settings import SimSettings
from raygang.sim.trace import Trace

Row = tuple[str, Callable[[dict], object], str]  # label, value of a summary, format

ROWS: list[Row] = [
    ("jobs completed / skipped", lambda s: f"{s['jobs']['completed']} / {s['jobs']['skipped']}",
     "s"),
    ("JCT mean (h)", lambda s: s["jct_h"]["mean"], ".2f"),
    ("JCT p50 (h)", lambda s: s["jct_h"]["p50"], ".2f"),
    ("JCT p99 (h)", lambda s: s["jct_h"]["p99"], ".1f"),
    ("queueing mean (h)", lambda s: s["queueing_h"]["mean"], ".2f"),
    ("queueing p99 (h)", lambda s: s["queueing_h"]["p99"], ".1f"),
    ("first start mean (h)", lambda s: s["first_start_h"]["mean"], ".2f"),
    ("makespan (h)", lambda s: s["makespan_h"], ".1f"),
    ("GPU allocation (arrivals)", lambda s: s["gpu_allocation"], ".1%"),
    ("preemptions", lambda s: s["preemptions"]["count"], "d"),
    ("  of them reclaims", lambda s: s["preemptions"]["by_action"].get("reclaim", 0), "d"),
    ("  victims run < checkpoint", lambda s: s["preemptions"]["victims_ran_under_checkpoint"],
     "d"),
    ("  stops < 10 min after a restart",
     lambda s: s["preemptions"]["stopped_within_10min_of_restart"], "d"),
    ("  most stops of one job", lambda s: s["preemptions"]["most_stops_of_one_job"], "d"),
    ("GPU-hours lost", lambda s: s["preemptions"]["gpu_hours_lost"], ".1f"),
    ("  share from victims > preemptor",
     lambda s: s["preemptions"]["oversized_victims_share_of_lost"], ".0%"),
    ("resize restarts", lambda s: s["preemptions"].get("resize_restarts", 0), "d"),
    ("  GPU-hours they cost",
     lambda s: s["preemptions"].get("gpu_hours_lost_to_resize_restarts", 0.0), ".1f"),
    ("Jain (share of guarantee)", lambda s: s["fairness"]["jain_share_of_guarantee"], ".3f"),
    ("worst tenant JCT / static", lambda s: s.get("worst_tenant_jct_vs_static", math.nan),
     ".2f"),
    (">=32-GPU gangs: longest wait (h)", lambda s: s["large_gangs"]["queueing_max_h"], ".1f"),
    ("multi-node jobs: queueing mean (h)", lambda s: _racks(s, "queueing_mean_h"), ".2f"),
    ("  run across racks", lambda s: _racks(s, "across_racks_share"), ".1%"),
    ("inference: deployments", lambda s: _inference(s, "deployments"), "d"),
    ("  wait to run, mean (s)", lambda s: _inference(s, "wait_mean_s"), ",.0f"),
    ("  wait to run, max (s)", lambda s: _inference(s, "wait_max_s"), ",.0f"),
    ("simulated h / wall s", lambda s: s["speed"]["simulated_h_per_wall_s"], ",.0f"),
    ("wall s", lambda s: s["speed"]["wall_s"], ".1f"),
]


INFERENCE_ROWS = {"inference: deployments", "  wait to run, mean (s)",
                  "  wait to run, max (s)"}
RACK_ROWS = {"multi-node jobs: queueing mean (h)", "  run across racks"}


def _racks(summary: dict, key: str) -> object:
    return (summary.get("racks") or {}).get(key, math.nan)


def _inference(summary: dict, key: str) -> object:
    return (summary.get("inference") or {}).get(key, math.nan)


def cell(value: object, fmt: str) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "-"
    return format(value, fmt) if fmt != "s" else str(value)


def text_table(trace: Trace, settings: SimSettings, summaries: Sequence[dict]) -> str:
    title = (f"{len(trace.jobs)} jobs of {Path(trace.source).name}"
             f"{f' from {trace.start}' if trace.start else ''}, {settings.nodes} x "
             f"{settings.gpus_per_node} GPUs, checkpoint {settings.checkpoint_s:g} s"
             + (f", inference stream peak {settings.inference_gpus} GPUs"
                if settings.inference_gpus else "")
             + (f", multi-member jobs elastic from {settings.elastic_min:g} of their members"
                f" (resize: {settings.elastic_resize.value}"
                + (f", {settings.elastic_restart_s:g} s each"
                   if settings.elastic_resize.value == "restart" else "") + ")"
                if settings.elastic_min is not None else "")
             + (f", racks of {settings.rack_nodes} nodes" if settings.rack_nodes else "")
             + (f", multi-member jobs ask topology {settings.topology} (rack)"
                if settings.topology else ""))
    table = Table(title=title, title_justify="left")
    table.add_column("")
    for summary in summaries:
        table.add_column(summary["policy"], justify="right")
    for label, value, fmt in ROWS:
        if label in INFERENCE_ROWS and not settings.inference_gpus:
            continue
        if label in RACK_ROWS and settings.rack_nodes is None:
            continue
        table.add_row(label, *(cell(value(s), fmt) for s in summaries))
    buffer = io.StringIO()
    console = Console(file=buffer, width=max(60, 36 + 14 * len(summaries)),
                      force_terminal=False, color_system=None)
    console.print(table)
    for note in trace.notes:
        console.print(f"trace: {note}", soft_wrap=True)
    for summary in summaries:
        for line in _no_partition(summary):
            console.print(line, soft_wrap=True)
        if (summary.get("inference") or {}).get("note"):
            console.print(f"{summary['policy']}: {summary['inference']['note']}",
                          soft_wrap=True)
    if trace.attribution:
        console.print(f"data: {trace.attribution}", soft_wrap=True)
    return buffer.getvalue().rstrip()


def _no_partition(summary: dict) -> list[str]:
    """Why a policy of partitions (`static`) skipped jobs: their queues had none."""
    counts = summary["jobs"].get("no_partition") or {}
    if not counts:
        return []
    named = ", ".join(list(counts)[:4]) + (f" and {len(counts) - 4} more" if len(counts) > 4
                                           else "")
    return [f"{summary['policy']}: {sum(counts.values())} jobs skipped: no partition for "
            f"queue(s) {named} (a partition is a queue's GPU quota in whole nodes: give "
            f"quotas with --config, or the VCs' sizes with --vc-nodes)"]
