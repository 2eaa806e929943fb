"""Scheduler metrics, exported through Ray's own Prometheus endpoint (`ray.util.metrics`).

Names follow Kueue's (`kueue_pending_workloads`, `kueue_admission_wait_time_seconds`, ...)
with `raygang_` for `kueue_` and gangs for workloads. Ray's exporter puts its namespace in
front of every user metric, so Prometheus shows them as `ray_raygang_*`:

    ray_raygang_pending_gangs{queue}                       gauge
    ray_raygang_running_gangs{queue}                       gauge   (admitted .. running)
    ray_raygang_queue_resource_usage{queue, resource}      gauge   (leaf and parent queues)
    ray_raygang_admitted_gangs_total{queue}                counter
    ray_raygang_preempted_gangs_total{queue, reason, preemptor_kind}   counter
    ray_raygang_gangs_finished_total{queue, state}         counter
    ray_raygang_admission_wait_time_seconds{queue}         histogram (_bucket, _count, _sum)
    ray_raygang_admission_cycle_duration_seconds{result}   histogram (_bucket, _count, _sum)
    ray_raygang_surplus_members{queue}                     gauge   (elastic gangs' members
                                                                    beyond their minimum)
    ray_raygang_gang_resizes_total{queue, direction}       counter (grow / shrink, by member)

Ray adds its own labels to every series: Component="core_worker", NodeAddress, SessionName,
Version, WorkerId (the scheduler actor's worker: a restarted scheduler starts new series)
and, with OpenTelemetry on (the 2.60 default), otel_scope_*.

Labels are bounded: queue names come from the configuration, resource names from the
cluster's nodes (a gang asking for any other is refused at submission), `reason` is the
preemption action (`preempt` or `reclaim`), `preemptor_kind` is `gang` or `deployment`,
`state` a finished GangState, `result` `success` (the cycle admitted a gang) or
`inadmissible`. Never a gang id.

How Ray 2.60 exports (read in `ray/_private/telemetry/open_telemetry_metric_recorder.py`,
checked by `tests/integration/test_metrics.py`): each worker pushes its metrics to its
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

from raygang.core.gang import GangState
from raygang.core.plan import Plan, Preemption
from raygang.core.queues import QueueSpec
from raygang.control.records import GangRecord

log = logging.getLogger(__name__)

# Seconds to hours: a gang may wait behind a multi-hour job (Kueue uses 1 s .. ~2.3 h).
WAIT_BUCKETS = [0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400,
                28800, 86400]
# A cycle is milliseconds of work plus GCS calls to observe the cluster.
CYCLE_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

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
            NAMES.preempted, "Gangs told to stop so that another fits, per victim's queue "
            "and action (preempt: lower priority; reclaim: queue over its share)",
            tag_keys=("queue", "reason", "preemptor_kind"))
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
        self._usage_seen: set[tuple[str, str]] = set()  # reported once: 0 when released

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
        self._preempted.inc(tags={
            "queue": victim.spec.queue, "reason": preemption.action,
            "preemptor_kind": preemptor.kind,
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

    def cycle_started(self) -> float:
        return self._timer()

    @_quiet
    def cycle_done(self, started: float, plan: Plan) -> None:
        result = "success" if plan.admissions else "inadmissible"
        self._cycle.observe(max(0.0, self._timer() - started), tags={"result": result})

    # Gauges, from the book --------------------------------------------------------------
    @_quiet
    def refresh(self, records: Iterable[GangRecord], queues: Iterable[QueueSpec],
                counts: Mapping[tuple[GangState, str], int] | None = None) -> None:
        """Set every gauge from the gangs as they are now; zero for queues with none.
        With `counts` (gangs per state and queue, as the registry keeps them), `records`
        need only hold the gangs that hold resources: no walk over every gang."""
        queues = list(queues)
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


def _self_and_ancestors(queue: str, parents: dict[str, str | None]) -> list[str]:
    chain = [queue]
    while (parent := parents.get(chain[-1])) and len(chain) <= len(parents):  # bounded if
        chain.append(parent)  # misconfigured
    return chain
