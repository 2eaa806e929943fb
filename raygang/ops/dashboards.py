"""Grafana dashboards over raygang's metrics: the scheduler, the queues, the workloads.

They are built the way Ray builds its own (`ray/dashboard/modules/metrics/dashboards/`):
panels are Ray's `Panel`/`Target`/`Row` descriptions, laid out and rendered by Ray's own
generator (two columns, rows of panels, Ray's graph template, `${datasource}`), every
query filtered by `{global_filters}` (the `SessionName` variable, as Ray's are), so that
they sit beside Ray's dashboards in the same Grafana and read the same way. The generator
is Ray's private `_generate_grafana_panels`: Ray is pinned, and a Ray upgrade that changes
its output shows as a diff of the committed files (`python -m raygang.ops --check`).

Grafana variables the queries use: `$SessionName` (Ray's), `$Queue`, `$Resource` (queues
dashboard) and Grafana's `$__rate_interval`.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

# Series drawn as dotted lines, not stacked areas (Ray's graph template does the same
# for its "MAX" lines): what a queue may hold, beside what it holds.
LINES = ("guarantee", "fair share", "limit")


@dataclass(frozen=True)
class Board:
    name: str  # file name: raygang-<name>.json
    uid: str
    title: str
    variables: tuple[str, ...]  # besides datasource and SessionName


def _panels() -> dict[str, list[Any]]:
    """Rows of panels per board (Ray's dataclasses: imported here, when generating)."""
    from ray.dashboard.modules.metrics.dashboards.common import Panel, Row, Target

    f = "{global_filters}"
    q = 'queue=~"$Queue"'
    r = 'resource=~"$Resource"'

    def panel(pid: int, title: str, description: str, unit: str,
              targets: list[tuple[str, str]], stack: bool = True) -> Panel:
        return Panel(id=pid, title=title, description=description, unit=unit,
                     targets=[Target(expr=e, legend=legend) for e, legend in targets],
                     fill=10 if stack else 0, stack=stack)

    def quantiles(metric: str, by: str, selector: str = f) -> list[tuple[str, str]]:
        return [(f"histogram_quantile({p}, sum(rate({metric}_bucket{{{{{selector}}}}}"
                 f"[$__rate_interval])) by ({by}, le))",
                 f"p{int(p * 100)} " + " ".join(f"{{{{{b}}}}}" for b in by.split(", ")))
                for p in (0.5, 0.99)]

    scheduler = [
        Row(title="Scheduling cycle", id=100, panels=[
            panel(1, "Cycle duration", "How long one scheduling cycle takes (observe the "
                  "cluster, decide, apply), by whether it admitted a gang (success) or not "
                  "(inadmissible).", "seconds",
                  quantiles("ray_raygang_admission_cycle_duration_seconds", "result"),
                  stack=False),
            panel(2, "Cycle phases (p99)", "Where a cycle's time goes: observe (reads of "
                  "the cluster through the GCS), decide (every action of the core: "
                  "allocate, reclaim, preempt, grow), apply (placement groups, stops).",
                  "seconds", [(
                      "histogram_quantile(0.99, sum(rate("
                      f"ray_raygang_cycle_phase_duration_seconds_bucket{{{{{f}}}}}"
                      "[$__rate_interval])) by (phase, le))", "{{phase}}")], stack=False),
            panel(3, "Cycles per second", "Scheduling cycles run, by result.", "cps", [(
                "sum(rate(ray_raygang_admission_cycle_duration_seconds_count"
                f"{{{{{f}}}}}[$__rate_interval])) by (result)", "{{result}}")]),
            panel(4, "GCS reachable", "1 while the GCS answers the scheduler (its cluster "
                  "reads within 5 s, a key read within 2 s when none read it for 5 s); 0 means no "
                  "scheduling decision is taken.", "short", [(
                      f"min(ray_raygang_gcs_reachable{{{{{f}}}}})", "reachable")],
                  stack=False),
            panel(10, "Actions (p99)", "What each action of decide takes (KAI's per-action "
                  "latency): allocate, reclaim, preempt, grow, as the core's cycle measures "
                  "them.", "seconds", [(
                      "histogram_quantile(0.99, sum(rate("
                      f"ray_raygang_action_duration_seconds_bucket{{{{{f}}}}}"
                      "[$__rate_interval])) by (action, le))", "{{action}}")], stack=False),
        ]),
        Row(title="Backlog", id=101, panels=[
            panel(5, "Pending gangs", "Gangs waiting for admission, per queue.", "gangs",
                  [(f"sum(ray_raygang_pending_gangs{{{{{q}, {f}}}}}) by (queue)",
                    "{{queue}}")]),
            panel(6, "Waiting gangs by reason", "Why pending gangs wait, as the last cycle "
                  "explained: NO_FIT (no room of that shape now), BEHIND (behind a blocked "
                  "queue head), LIMIT (a queue limit), UNSCHEDULABLE (never fits as the "
                  "cluster is).", "gangs",
                  [(f"sum(ray_raygang_waiting_gangs{{{{{q}, {f}}}}}) by (reason)",
                    "{{reason}}")]),
            panel(7, "Admission wait", "Seconds from submission (or requeue) to admission, "
                  "per queue.", "seconds",
                  quantiles("ray_raygang_admission_wait_time_seconds", "queue",
                            f"{q}, {f}"), stack=False),
            panel(8, "Longest pending", "How long the longest-waiting gang of each queue "
                  "has been pending (what the RaygangGangPendingTooLong alert watches).",
                  "seconds", [(f"max(ray_raygang_longest_pending_seconds{{{{{q}, {f}}}}}) "
                               "by (queue)", "{{queue}}")], stack=False),
            panel(9, "Admissions per second", "Gangs admitted (a requeued gang again), per "
                  "queue.", "ops", [(f"sum(rate(ray_raygang_admitted_gangs_total{{{{{q}, "
                                     f"{f}}}}}[$__rate_interval])) by (queue)",
                                     "{{queue}}")]),
        ]),
    ]
    queues = [
        Row(title="Resources", id=200, panels=[
            panel(1, "Usage against guarantee and fair share", "What each queue holds "
                  "(stacked), its guarantee (quota) and its fair share at this moment "
                  "(quota first, the rest by weight), per resource.", "short", [
                      (f"sum(ray_raygang_queue_resource_usage{{{{{q}, {r}, {f}}}}}) "
                       "by (queue, resource)", "{{queue}} {{resource}}"),
                      (f"sum(ray_raygang_queue_guarantee{{{{{q}, {r}, {f}}}}}) "
                       "by (queue, resource)", "guarantee {{queue}} {{resource}}"),
                      (f"sum(ray_raygang_queue_fair_share{{{{{q}, {r}, {f}}}}}) "
                       "by (queue, resource)", "fair share {{queue}} {{resource}}"),
                  ]),
            panel(2, "Usage / fair share", "Each queue's usage over its fair share: below "
                  "1 it is owed capacity (its gangs go first, and may reclaim), above 1 it "
                  "borrows.", "percentunit", [(
                      f"sum(ray_raygang_queue_resource_usage{{{{{q}, {r}, {f}}}}}) by "
                      f"(queue, resource) / sum(ray_raygang_queue_fair_share{{{{{q}, {r}, "
                      f"{f}}}}}) by (queue, resource)", "{{queue}} {{resource}}")],
                  stack=False),
            panel(3, "Limits", "The hard cap of each queue that has one.", "short", [(
                f"sum(ray_raygang_queue_limit{{{{{q}, {r}, {f}}}}}) by (queue, resource)",
                "limit {{queue}} {{resource}}")], stack=False),
            panel(4, "Elastic surplus", "Members elastic gangs run beyond their minimum: "
                  "borrowed, taken back first.", "short", [(
                      f"sum(ray_raygang_surplus_members{{{{{q}, {f}}}}}) by (queue)",
                      "{{queue}}")]),
        ]),
        Row(title="Gangs", id=201, panels=[
            panel(5, "Pending gangs", "Gangs waiting, per queue.", "gangs", [(
                f"sum(ray_raygang_pending_gangs{{{{{q}, {f}}}}}) by (queue)", "{{queue}}")]),
            panel(6, "Running gangs", "Gangs holding resources (admitted .. running), per "
                  "queue.", "gangs", [(
                      f"sum(ray_raygang_running_gangs{{{{{q}, {f}}}}}) by (queue)",
                      "{{queue}}")]),
        ]),
    ]
    workloads = [
        Row(title="Workloads", id=300, panels=[
            panel(1, "Workloads by kind", "Pending and running workloads per kind: gangs, "
                  "Serve deployments, Ray Jobs, Train runs.", "short", [(
                      f"sum(ray_raygang_workloads{{{{{f}}}}}) by (kind, status)",
                      "{{kind}} {{status}}")]),
            panel(2, "Finished", "Gangs ending, per final state.", "ops", [(
                f"sum(rate(ray_raygang_gangs_finished_total{{{{{q}, {f}}}}}"
                "[$__rate_interval])) by (state)", "{{state}}")]),
        ]),
        Row(title="Disruptions", id=301, panels=[
            panel(3, "Preemptions by action and reason", "Gangs stopped so that another "
                  "fits: action (preempt: priority, reclaim: queue over its share, shrink: "
                  "elastic surplus) and reason (in_queue: the preemptor's own queue, "
                  "other_queue).", "ops", [(
                      f"sum(rate(ray_raygang_preempted_gangs_total{{{{{q}, {f}}}}}"
                      "[$__rate_interval])) by (action, reason)", "{{action}} {{reason}}")]),
            panel(4, "Preemptions by queue", "Per victim's queue and the preemptor's kind.",
                  "ops", [(f"sum(rate(ray_raygang_preempted_gangs_total{{{{{q}, {f}}}}}"
                           "[$__rate_interval])) by (queue, preemptor_kind)",
                           "{{queue}} by {{preemptor_kind}}")]),
            panel(5, "Resizes", "Members added to (grow) or removed from (shrink) running "
                  "elastic gangs.", "ops", [(
                      f"sum(rate(ray_raygang_gang_resizes_total{{{{{q}, {f}}}}}"
                      "[$__rate_interval])) by (queue, direction)",
                      "{{queue}} {{direction}}")]),
            panel(6, "Restarts", "Whole-gang restarts after a member failed or its node "
                  "was lost.", "ops", [(
                      f"sum(rate(ray_raygang_gang_restarts_total{{{{{q}, {f}}}}}"
                      "[$__rate_interval])) by (queue, kind)", "{{queue}} {{kind}}")]),
        ]),
    ]
    return {"scheduler": scheduler, "queues": queues, "workloads": workloads}


BOARDS = (
    Board("scheduler", "raygangScheduler", "raygang: scheduler", ("Queue",)),
    Board("queues", "raygangQueues", "raygang: queues", ("Queue", "Resource")),
    Board("workloads", "raygangWorkloads", "raygang: workloads", ("Queue",)),
)


# Variable -> (its label, a metric with a series for every value of it).
VARIABLES = {"SessionName": ("SessionName", "ray_raygang_pending_gangs"),
             "Queue": ("queue", "ray_raygang_pending_gangs"),
             "Resource": ("resource", "ray_raygang_queue_fair_share")}


def _variable(name: str) -> dict[str, Any]:
    """A query variable as Ray's base dashboards write theirs (`SessionName`)."""
    label, metric = VARIABLES[name]
    session = "" if name == "SessionName" else '{SessionName=~"$SessionName"}'
    query = f"label_values({metric}{session}, {label})"
    return {
        "name": name, "label": name, "type": "query", "datasource": "${datasource}",
        "description": f"Filter queries to specific {label} values.",
        "definition": query, "query": {"query": query, "refId": "StandardVariableQuery"},
        "refresh": 1, "hide": 0, "includeAll": True, "multi": name != "SessionName",
        "allValue": ".+", "sort": 2, "options": [],
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }


def _base(board: Board) -> dict[str, Any]:
    datasource = {"name": "datasource", "type": "datasource", "query": "prometheus",
                  "description": "Filter queries of a specific Prometheus type.",
                  "refresh": 1, "hide": 2, "includeAll": False, "multi": False,
                  "current": {"selected": False}}
    return {
        "title": board.title, "uid": board.uid, "version": 1, "schemaVersion": 27,
        "style": "dark", "editable": True, "graphTooltip": 1, "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"}, "timezone": "",
        "annotations": {"list": [{
            "builtIn": 1, "datasource": "-- Grafana --", "enable": True, "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
            "type": "dashboard"}]},
        "templating": {"list": [datasource] + [
            _variable(v) for v in ("SessionName", *board.variables)]},
        "tags": ["raygang"],
    }


def dashboard(board: Board) -> dict[str, Any]:
    """The dashboard's JSON model, as Grafana imports it."""
    from ray.dashboard.modules.metrics.dashboards.common import DashboardConfig
    from ray.dashboard.modules.metrics.grafana_dashboard_factory import (
        _generate_grafana_panels)

    config = DashboardConfig(name=f"RAYGANG_{board.name.upper()}", default_uid=board.uid,
                             standard_global_filters=['SessionName=~"$SessionName"'],
                             base_json_file_name="", rows=_panels()[board.name])
    model = _base(board)
    model["panels"] = _panels_with_lines(_generate_grafana_panels(config, [], ""))
    return model


def _panels_with_lines(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ray's graph template draws a series called MAX dotted and unstacked, and hides
    series named FAILED and the like (Ray's cumulative counts of dead tasks). Ours: the
    lines a queue is measured against are dotted and unstacked, by a regular expression
    (one per queue), and nothing is hidden (a FAILED gang is what an operator looks for)."""
    out = copy.deepcopy(panels)
    for p in out:
        if "seriesOverrides" not in p:
            continue  # a row
        p["seriesOverrides"] = [o for o in p["seriesOverrides"] if not o.get("hiddenSeries")
                                and o.get("alias") not in ("MAX", "MAX + PENDING")]
        if any(t["legendFormat"].startswith(LINES) for t in p["targets"]):
            p["seriesOverrides"].append({"alias": f"/^({'|'.join(LINES)}) /",
                                         "dashes": True, "fill": 0, "stack": False})
    return out


def render(board: Board) -> str:
    return json.dumps(dashboard(board), indent=2) + "\n"


def queries(model: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of a dashboard model, rows' panels included."""
    found = []
    for p in model["panels"]:
        for inner in [p, *p.get("panels", [])]:
            found += [(inner["title"], t["expr"]) for t in inner.get("targets", [])]
    return found
