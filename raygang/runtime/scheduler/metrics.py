"""Scheduler metrics, exported through Ray's own Prometheus endpoint (`ray.util.metrics`).

Names follow Kueue's (`kueue_pending_workloads`, `kueue_admission_wait_time_seconds`, ...)
with `raygang_` for `kueue_` and gangs for workloads. Ray's exporter puts its namespace in
front of every user metric, so Prometheus shows them as `ray_raygang_*`:

    ray_raygang_pending_gangs{queue}                       gauge
    ray_raygang_running_gangs{queue}                       gauge   (admitted .. running)
    ray_raygang_queue_resource_usage{queue, resource}      gauge   (leaf and parent queues)
    ray_raygang_admitted_gangs_total{queue}                counter
    ray_raygang_preempted_gangs_total{queue, action, reason, preemptor_kind}   counter
    ray_raygang_gangs_finished_total{queue, state}         counter
    ray_raygang_admission_wait_time_seconds{queue}         histogram (_bucket, _count, _sum)
    ray_raygang_admission_cycle_duration_seconds{result}   histogram (_bucket, _count, _sum)
    ray_raygang_surplus_members{queue}                     gauge   (elastic gangs' members
                                                                    beyond their minimum)
    ray_raygang_gang_resizes_total{queue, direction}       counter (grow / shrink, by member)
    ray_raygang_gang_restarts_total{queue, kind}           counter (whole-gang restarts after
                                                                    a failure)
    ray_raygang_cycle_phase_duration_seconds{phase}        histogram (observe, decide, apply)
    ray_raygang_action_duration_seconds{action}            histogram (each action of decide)
    ray_raygang_waiting_gangs{queue, reason}               gauge   (pending gangs by wait code)
    ray_raygang_longest_pending_seconds{queue}             gauge   (how long the longest-waiting
                                                                    gang has been pending)
    ray_raygang_workloads{kind, status}                    gauge   (pending / running, by kind)
    ray_raygang_queue_fair_share{queue, resource}          gauge   (this moment's fair share)
    ray_raygang_queue_guarantee{queue, resource}           gauge   (the queue's quota)
    ray_raygang_queue_limit{queue, resource}               gauge   (its hard cap, if it has one)
    ray_raygang_gcs_reachable                              gauge   (1: the GCS answers the
                                                                    scheduler; control/sight.py)

Ray adds its own labels to every series: Component="core_worker", NodeAddress, SessionName,
Version, WorkerId (the scheduler actor's worker: a restarted scheduler starts new series)
and, with OpenTelemetry on (the 2.60 default), otel_scope_*.

Labels are bounded: queue names come from the configuration, resource names from the
cluster's nodes (a gang asking for any other is refused at submission) or the queues'
quotas and limits; a preemption's `action` is the core's action that stopped the victim
(`preempt`: lower priority, `reclaim`: its queue over its share, `shrink`: surplus of an
elastic gang) and its `reason` where the victim was, as Kueue's `reason` says it
(`in_queue`: the preemptor's own queue, `other_queue`); `kind` and `preemptor_kind` a
workload kind (`gang`, `deployment`, `job`, `train`); a waiting gang's `reason` a wait code
(`NO_FIT`, `BEHIND`, `LIMIT`, `UNSCHEDULABLE`); `state` a finished GangState; `result`
`success` (the cycle admitted a gang) or `inadmissible`; `phase` `observe`, `decide` or
`apply`. Never a gang id.

The time each action of a cycle takes (KAI's per-action latency) comes from the core's
plan (`Plan.timings`, measured by `core.cycle`); `decide` is their sum and the reasons'.

How Ray 2.60 exports (read in `ray/_private/telemetry/open_telemetry_metric_recorder.py`,
checked by `tests/integration/test_metrics.py`, and through a real Prometheus by
`tests/e2e/test_prometheus.py`): each worker pushes its metrics to its
node's agent every `metrics_report_interval_ms` (10 s by default), so a scrape lags up to
that long. A gauge is dropped from the endpoint when it has not been set for two report
intervals, so `refresh()` sets every gauge on every loop iteration (at least once per
`resync_interval_s`), zero included. Histogram sums are approximated from bucket midpoints.

The metric objects are made when `SchedulerMetrics` is made, i.e. in the scheduler actor's
`__init__`, never at import. Nothing here may stop scheduling: a failing metric call is
logged once and ignored.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from types import SimpleNamespace
from typing import Any

from raygang.control import kinds
from raygang.control.ports import Tallies
from raygang.control.records import GangRecord
from raygang.core.gang import GangState
from raygang.core.plan import Plan, Preemption, WaitCode
from raygang.core.queues import QueueSpec

log = logging.getLogger(__name__)

# Seconds to hours: a gang may wait behind a multi-hour job (Kueue uses 1 s .. ~2.3 h).
WAIT_BUCKETS = [0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400,
                28800, 86400]
# A cycle is milliseconds of work plus GCS calls to observe the cluster.
CYCLE_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
# A GCS that does not answer a key read in this long is down for the scheduler: its own
# calls time out after 30 s, which is too late to page anyone. Probed this often.

NAMES = SimpleNamespace(
    pending="raygang_pending_gangs",
    running="raygang_running_gangs",
    usage="raygang_queue_resource_usage",
    admitted="raygang_admitted_gangs_total",
    preempted="raygang_preempted_gangs_total",
    finished="raygang_gangs_finished_total",
    wait="raygang_admission_wait_time_seconds",
    cycle="raygang_admission_cycle_duration_seconds",
    surplus="raygang_surplus_members",
    resizes="raygang_gang_resizes_total",
    restarts="raygang_gang_restarts_total",
    phase="raygang_cycle_phase_duration_seconds",
    action="raygang_action_duration_seconds",
    waiting="raygang_waiting_gangs",
    longest="raygang_longest_pending_seconds",
    workloads="raygang_workloads",
    fair_share="raygang_queue_fair_share",
    guarantee="raygang_queue_guarantee",
    limit="raygang_queue_limit",
    gcs="raygang_gcs_reachable",
)


def _quiet(method: Callable) -> Callable:
    """Metrics never stop the scheduler: log the first failure of each method, go on."""

    @functools.wraps(method)
    def wrapper(self: SchedulerMetrics, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception:
            if method.__name__ not in self._failed:
                self._failed.add(method.__name__)
                log.exception("metrics: %s failed (further failures not logged)",
                              method.__name__)
            return None

    return wrapper


class SchedulerMetrics:
    """The scheduler's metric objects and the few calls that update them.

    `metrics` is the module that makes metric objects (`ray.util.metrics` by default; a
    fake in unit tests); `timer` measures cycle durations (monotonic seconds)."""

    def __init__(self, metrics: Any = None, timer: Callable[[], float] = time.perf_counter):
        if metrics is None:
            from ray.util import metrics  # in the actor's process, when the actor is made
        self._timer = timer
        self._failed: set[str] = set()
        self._pending = metrics.Gauge(
            NAMES.pending, "Gangs waiting for admission, per queue", tag_keys=("queue",))
        self._running = metrics.Gauge(
            NAMES.running, "Gangs admitted and holding resources (admitted, reserved, "
            "starting or running), per queue", tag_keys=("queue",))
        self._usage = metrics.Gauge(
            NAMES.usage, "Resources held by the gangs of a queue and of the queues under "
            "it", tag_keys=("queue", "resource"))
        self._admitted = metrics.Counter(
            NAMES.admitted, "Admissions (a requeued gang counts again), per queue",
            tag_keys=("queue",))
        self._preempted = metrics.Counter(
            NAMES.preempted, "Gangs told to stop so that another fits, per victim's queue, "
            "action (preempt: lower priority; reclaim: queue over its share; shrink: "
            "elastic surplus) and reason (in_queue: the preemptor's queue; other_queue)",
            tag_keys=("queue", "action", "reason", "preemptor_kind"))
        self._finished = metrics.Counter(
            NAMES.finished, "Gangs that ended, per queue and final state",
            tag_keys=("queue", "state"))
        self._wait = metrics.Histogram(
            NAMES.wait, "Seconds from submission or requeue to admission, per queue",
            boundaries=WAIT_BUCKETS, tag_keys=("queue",))
        self._cycle = metrics.Histogram(
            NAMES.cycle, "Seconds one scheduling cycle took (observe, schedule, apply)",
            boundaries=CYCLE_BUCKETS, tag_keys=("result",))
        self._surplus = metrics.Gauge(
            NAMES.surplus, "Members elastic gangs run beyond their minimum (borrowed: "
            "taken back first), per queue", tag_keys=("queue",))
        self._resizes = metrics.Counter(
            NAMES.resizes, "Members added to (grow) or removed from (shrink) running "
            "elastic gangs, per queue", tag_keys=("queue", "direction"))
        self._restarts = metrics.Counter(
            NAMES.restarts, "Whole-gang restarts after a member failed or its node was "
            "lost (within max_restarts), per queue and kind", tag_keys=("queue", "kind"))
        self._phase = metrics.Histogram(
            NAMES.phase, "Seconds each phase of a scheduling cycle took: observe (read the "
            "cluster), decide (every action of core.schedule), apply (carry out the plan)",
            boundaries=CYCLE_BUCKETS, tag_keys=("phase",))
        self._action = metrics.Histogram(
            NAMES.action, "Seconds each action of a scheduling cycle took (allocate, "
            "reclaim, preempt, grow: its passes over the queues and the running gangs)",
            boundaries=CYCLE_BUCKETS, tag_keys=("action",))
        self._waiting = metrics.Gauge(
            NAMES.waiting, "Pending gangs the last cycle explained, per queue and wait code "
            "(NO_FIT, BEHIND, LIMIT, UNSCHEDULABLE)", tag_keys=("queue", "reason"))
        self._longest = metrics.Gauge(
            NAMES.longest, "Seconds the longest-waiting gang of a queue has been pending "
            "(since its submission or last requeue), among those the last cycle explained: "
            "the heads of the queue's lines and every gang it tried (the gangs behind a "
            "blocked head, younger at their priority, are not walked)", tag_keys=("queue",))
        self._workloads = metrics.Gauge(
            NAMES.workloads, "Workloads pending or running (admitted .. running), per kind "
            "(gang, deployment, job, train)", tag_keys=("kind", "status"))
        self._fair_share = metrics.Gauge(
            NAMES.fair_share, "What a queue would hold now if every queue got its fair "
            "share (quota first, the rest by weight), per resource",
            tag_keys=("queue", "resource"))
        self._guarantee = metrics.Gauge(
            NAMES.guarantee, "A queue's guaranteed resources (its quota), per resource",
            tag_keys=("queue", "resource"))
        self._limit = metrics.Gauge(
            NAMES.limit, "A queue's hard cap, per resource it caps",
            tag_keys=("queue", "resource"))
        self._gcs = metrics.Gauge(
            NAMES.gcs, "1 if the cluster's GCS answers the scheduler, 0 while it does not "
            "(its last read or probe timed out: no scheduling decision meanwhile)",
            tag_keys=())
        self._usage_seen: set[tuple[str, str]] = set()  # reported once: 0 when released
        self._waits_seen: set[tuple[str, str]] = set()

    # Events ---------------------------------------------------------------------------
    @_quiet
    def admitted(self, record: GangRecord, now: float) -> None:
        """Call before the gang leaves PENDING: its wait runs from its last PENDING."""
        since = next((e.at for e in reversed(record.events)
                      if e.to_state is GangState.PENDING), record.submitted_at)
        tags = {"queue": record.spec.queue}
        self._admitted.inc(tags=tags)
        self._wait.observe(max(0.0, now - since), tags=tags)

    @_quiet
    def preempted(self, victim: GangRecord, preemptor: GangRecord,
                  preemption: Preemption) -> None:
        same = victim.spec.queue == preemptor.spec.queue
        self._preempted.inc(tags={
            "queue": victim.spec.queue, "action": preemption.action,
            "reason": "in_queue" if same else "other_queue", "preemptor_kind": preemptor.kind,
        })

    @_quiet
    def finished(self, record: GangRecord) -> None:
        """Call once, when the gang reaches its final state."""
        self._finished.inc(tags={"queue": record.spec.queue, "state": record.state.value})

    @_quiet
    def resized(self, record: GangRecord, added: int, removed: int) -> None:
        for direction, n in (("grow", added), ("shrink", removed)):
            if n:
                self._resizes.inc(n, tags={"queue": record.spec.queue, "direction": direction})

    @_quiet
    def restarted(self, record: GangRecord) -> None:
        self._restarts.inc(tags={"queue": record.spec.queue, "kind": record.kind})

    def cycle_started(self) -> float:
        return self._timer()

    def phase_done(self, phase: str, since: float) -> float:
        """Observe the phase that began at `since` (a timer reading); returns now, when
        the next phase begins."""
        now = self._timer()
        self._observe_phase(phase, now - since)
        return now

    @_quiet
    def _observe_phase(self, phase: str, seconds: float) -> None:
        self._phase.observe(max(0.0, seconds), tags={"phase": phase})

    @_quiet
    def cycle_done(self, started: float, plan: Plan) -> None:
        result = "success" if plan.admissions else "inadmissible"
        self._cycle.observe(max(0.0, self._timer() - started), tags={"result": result})
        for action, seconds in plan.timings.items():
            self._action.observe(max(0.0, seconds), tags={"action": action})

    # Gauges, from the book --------------------------------------------------------------
    @_quiet
    def refresh(self, records: Iterable[GangRecord], queues: Iterable[QueueSpec],
                counts: Mapping[tuple[GangState, str], int] | None = None,
                tallies: Tallies | None = None) -> None:
        """Set every gauge from the gangs as they are now; zero for queues with none.
        With `counts` (gangs per state and queue, as the registry keeps them), `records`
        need only hold the gangs that hold resources: no walk over every gang; with
        `tallies`, the gauges by kind, by wait code and of fair shares too."""
        queues = list(queues)
        self._set_books(records, queues, counts)
        if tallies is not None:
            self._set_tallies(tallies, queues)
            self._gcs.set(1 if tallies.reachable else 0, tags={})

    def _set_books(self, records: Iterable[GangRecord], queues: list[QueueSpec],
                   counts: Mapping[tuple[GangState, str], int] | None) -> None:
        pending = {q.name: 0 for q in queues}
        running = dict(pending)
        surplus = dict(pending)
        usage: dict[tuple[str, str], float] = {}
        parents = {q.name: q.parent for q in queues}
        for (state, queue), n in (counts or {}).items():
            if state is GangState.PENDING and n:
                pending[queue] = pending.get(queue, 0) + n
            elif state.holds_resources and n:
                running[queue] = running.get(queue, 0) + n
        for r in records:
            queue = r.spec.queue
            if r.state is GangState.PENDING and counts is None:
                pending[queue] = pending.get(queue, 0) + 1
            elif r.state.holds_resources:
                if counts is None:
                    running[queue] = running.get(queue, 0) + 1
                if r.live.surplus:
                    surplus[queue] = surplus.get(queue, 0) + len(r.live.surplus)
                if r.parent is not None:
                    continue  # inside a job: the job's usage counts it already
                for name, amount in r.held_total.items():
                    for q in _self_and_ancestors(queue, parents):
                        usage[q, name] = usage.get((q, name), 0.0) + amount
        for queue, n in pending.items():
            self._pending.set(n, tags={"queue": queue})
        for queue, n in running.items():
            self._running.set(n, tags={"queue": queue})
        for queue, n in surplus.items():
            self._surplus.set(n, tags={"queue": queue})
        self._usage_seen |= usage.keys()
        for queue, resource in self._usage_seen:
            value = usage.get((queue, resource), 0.0)
            self._usage.set(value, tags={"queue": queue, "resource": resource})

    def _set_tallies(self, tallies: Tallies, queues: list[QueueSpec]) -> None:
        by_kind = {(kind, status): 0 for kind in kinds.KINDS for status in ("pending",
                                                                            "running")}
        for (state, kind), n in tallies.kinds.items():
            status = ("pending" if state is GangState.PENDING
                      else "running" if state.holds_resources else None)
            if status is not None and (kind, status) in by_kind:
                by_kind[kind, status] += n
        for (kind, status), n in by_kind.items():
            self._workloads.set(n, tags={"kind": kind, "status": status})
        # Every queue says every code (0 included): a panel stacks them without holes.
        self._waits_seen |= {(q.name, c.value) for q in queues for c in WaitCode}
        self._waits_seen |= tallies.waits.keys()
        for queue, code in self._waits_seen:
            self._waiting.set(tallies.waits.get((queue, code), 0),
                              tags={"queue": queue, "reason": code})
        for q in queues:
            self._longest.set(tallies.longest_wait.get(q.name, 0.0), tags={"queue": q.name})
        fair = {row.name: row.fair_share
                for row in (tallies.queues() if tallies.queues is not None else [])}
        for q in queues:
            named = (set(q.quota) | set(fair.get(q.name, {}))
                     | {r for name, r in self._usage_seen if name == q.name})
            for resource in named:
                tags = {"queue": q.name, "resource": resource}
                self._guarantee.set(q.quota.get(resource, 0), tags=tags)
                if q.name in fair:
                    self._fair_share.set(fair[q.name].get(resource, 0.0), tags=tags)
            for resource, cap in (q.limit or {}).items():
                self._limit.set(cap, tags={"queue": q.name, "resource": resource})


def _self_and_ancestors(queue: str, parents: dict[str, str | None]) -> list[str]:
    chain = [queue]
    while (parent := parents.get(chain[-1])) and len(chain) <= len(parents):  # bounded if
        chain.append(parent)  # misconfigured
    return chain
