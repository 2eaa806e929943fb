"""Alert rules over raygang's metrics: one group, as a plain Prometheus rules file and as
the `spec` of a Prometheus Operator `PrometheusRule`.

Each alert is written as what it watches (`watched`: a query that returns a series for
every queue or scheduler it is about, whatever their values) and the condition on it: a
test evaluates `watched` against a real Prometheus, which a threshold that is not crossed
in a test would hide. Thresholds are where an operator starts; they are meant to be
changed (the rules file is plain YAML).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RULE_GROUP = "raygang"


@dataclass(frozen=True)
class Alert:
    name: str
    watched: str
    condition: str  # `{watched}` is replaced by the query above
    for_: str
    severity: str
    summary: str
    description: str

    @property
    def expr(self) -> str:
        return self.condition.format(watched=self.watched)


ALERTS: tuple[Alert, ...] = (
    Alert(
        name="RaygangGangPendingTooLong",
        watched="max by (queue) (ray_raygang_longest_pending_seconds)",
        condition="{watched} > 1800",
        for_="5m", severity="warning",
        summary="A gang of queue {{ $labels.queue }} has waited more than 30 minutes",
        description=("The longest-waiting gang of queue {{ $labels.queue }} has been pending "
                     "for {{ $value | humanizeDuration }}. `raygang queues` and the gang's "
                     "reason (`raygang status`) say what it waits for: capacity (NO_FIT), "
                     "a blocked queue head (BEHIND) or a queue limit (LIMIT)."),
    ),
    Alert(
        name="RaygangAdmissionCycleSlow",
        watched=("histogram_quantile(0.99, sum by (le) (rate("
                 "ray_raygang_admission_cycle_duration_seconds_bucket[5m])))"),
        condition="{watched} > 2.5",
        for_="10m", severity="warning",
        summary="raygang's scheduling cycles take more than 2.5 s (p99)",
        description=("The 99th percentile of a scheduling cycle is {{ $value | "
                     "humanize }} s. ray_raygang_cycle_phase_duration_seconds says which "
                     "phase is slow: observe (reading the cluster from the GCS), decide, "
                     "or apply."),
    ),
    Alert(
        name="RaygangPreemptionStorm",
        watched="sum(increase(ray_raygang_preempted_gangs_total[10m]))",
        condition="{watched} > 20",
        for_="5m", severity="warning",
        summary="More than 20 gangs preempted in 10 minutes",
        description=("{{ $value | humanize }} gangs were stopped for others in the last 10 "
                     "minutes: work is being lost. ray_raygang_preempted_gangs_total by "
                     "action and reason says whether priorities (preempt) or quotas "
                     "(reclaim) cause it."),
    ),
    Alert(
        name="RaygangSchedulerDown",
        watched="ray_raygang_running_gangs",
        # The scheduler sets its gauges every second; Ray drops a gauge nobody set for two
        # report intervals (20 s by default): no series means no scheduler.
        condition="absent({watched})",
        for_="2m", severity="critical",
        summary="raygang's scheduler exports no metrics",
        description=("No scheduler has reported ray_raygang_running_gangs for 2 minutes: "
                     "the scheduler actor is gone or cannot run (`raygang status`, the Ray "
                     "dashboard's actor list). Gangs already running go on; nothing new is "
                     "admitted."),
    ),
    Alert(
        name="RaygangGcsUnreachable",
        watched="min(ray_raygang_gcs_reachable)",
        condition="{watched} == 0",
        for_="1m", severity="critical",
        summary="raygang's scheduler cannot reach the GCS",
        description=("The scheduler's GCS probe has failed for a minute. No decision is "
                     "taken meanwhile (state lives in the GCS); with GCS fault tolerance "
                     "the cluster resumes once the head's GCS is back."),
    ),
)


def rule_groups() -> list[dict[str, Any]]:
    """The rules, as Prometheus's rule file format lists them (`groups:`)."""
    return [{
        "name": RULE_GROUP,
        "rules": [{
            "alert": a.name, "expr": a.expr, "for": a.for_,
            "labels": {"severity": a.severity},
            "annotations": {"summary": a.summary, "description": a.description},
        } for a in ALERTS],
    }]


def prometheus_rule() -> dict[str, Any]:
    """The same rules as a Prometheus Operator resource. Its Prometheus picks rules by
    label (`ruleSelector`; kube-prometheus-stack's matches `release: <its release>`):
    add that label in an overlay."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "raygang", "labels": {"app.kubernetes.io/name": "raygang",
                                                   "role": "alert-rules"}},
        "spec": {"groups": rule_groups()},
    }
