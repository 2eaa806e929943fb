"""SchedulerMetrics without Ray: names, bounded labels, and gauges that go back to zero."""

from __future__ import annotations

import re
from types import SimpleNamespace


from raygang.control.ports import Tallies
from raygang.control.records import GangRecord
from raygang.control.status import GangEvent
from raygang.core import QueueSpec
from raygang.core.gang import GangState
from raygang.core.plan import Admission, Plan, Preemption
from raygang.core.report import QueueReport
from raygang.core.resources import Resources
from raygang.runtime.scheduler.metrics import NAMES, SchedulerMetrics
from tests.unit.builders import spec

PROMETHEUS_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
QUEUES = [QueueSpec(name="org"), QueueSpec(name="team-a", parent="org"), QueueSpec(name="b")]
CAPPED = [QueueSpec(name="a", quota={"GPU": 4}, limit={"GPU": 6}), QueueSpec(name="b")]


class FakeMetric:
    def __init__(self, name, description="", boundaries=None, tag_keys=()):
        self.name, self.tag_keys, self.boundaries = name, tag_keys, boundaries
        self.values: dict[tuple, float] = {}
        self.observed: list[tuple[float, tuple]] = []

    def _key(self, tags):
        assert set(tags) == set(self.tag_keys), (self.name, tags)
        return tuple(sorted(tags.items()))

    def set(self, value, tags):
        self.values[self._key(tags)] = value

    def inc(self, value=1.0, tags=None):
        key = self._key(tags)
        self.values[key] = self.values.get(key, 0) + value

    def observe(self, value, tags):
        self.observed.append((value, self._key(tags)))


def _fake_metrics():
    made: dict[str, FakeMetric] = {}

    def maker(name, description="", **kwargs):
        made[name] = FakeMetric(name, description, **kwargs)
        return made[name]

    return made, SimpleNamespace(Gauge=maker, Counter=maker, Histogram=maker)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _record(gang_id, shape, queue, state=GangState.PENDING, kind="gang"):
    r = GangRecord(gang_id=gang_id, spec=spec(gang_id, shape, queue=queue), programs={},
                   priority=0, seq=0, submitted_at=10.0, kind=kind)
    r.events.append(GangEvent(at=10.0, from_state=None, to_state=GangState.PENDING,
                              reason="submitted"))
    r.state = state
    return r


def test_names_follow_prometheus_conventions():
    made, fake = _fake_metrics()
    SchedulerMetrics(fake)
    assert set(made) == set(vars(NAMES).values())
    for name, metric in made.items():
        assert PROMETHEUS_NAME.match(name) and name.startswith("raygang_"), name
        assert "gang_id" not in metric.tag_keys and "id" not in metric.tag_keys
    assert [n for n in made if n.endswith("_total")] == [
        NAMES.admitted, NAMES.preempted, NAMES.finished, NAMES.resizes, NAMES.restarts]
    assert made[NAMES.wait].boundaries[-1] >= 3600  # hours
    assert made[NAMES.cycle].boundaries[0] <= 0.001  # milliseconds


def test_wait_runs_from_the_last_requeue():
    made, fake = _fake_metrics()
    m = SchedulerMetrics(fake)
    r = _record("g", "2xCPU=1", "team-a")
    m.admitted(r, now=25.0)
    r.events.append(GangEvent(at=40.0, from_state=GangState.PREEMPTED,
                              to_state=GangState.PENDING, reason="preempted"))
    m.admitted(r, now=45.0)
    assert [v for v, _ in made[NAMES.wait].observed] == [15.0, 5.0]
    assert made[NAMES.admitted].values == {(("queue", "team-a"),): 2}


def test_preemption_and_cycle_are_counted_with_bounded_labels():
    made, fake = _fake_metrics()
    clock = Clock()
    m = SchedulerMetrics(fake, timer=clock)
    victim = _record("v", "1xGPU=1", "b")
    llm = _record("s", "1xGPU=1", "team-a", kind="deployment")
    m.preempted(victim, llm, Preemption("v", "s", "reclaim", "over its share"))
    m.preempted(victim, _record("t", "1xGPU=1", "b"), Preemption("v", "t", "preempt", "low"))
    assert made[NAMES.preempted].values == {
        (("action", "reclaim"), ("preemptor_kind", "deployment"), ("queue", "b"),
         ("reason", "other_queue")): 1,
        (("action", "preempt"), ("preemptor_kind", "gang"), ("queue", "b"),
         ("reason", "in_queue")): 1}
    started = m.cycle_started()
    clock.now += 0.25
    m.cycle_done(started, Plan(admissions=(Admission("s", ("n1",)),)))
    m.cycle_done(m.cycle_started(), Plan())
    assert made[NAMES.cycle].observed == [
        (0.25, (("result", "success"),)), (0.0, (("result", "inadmissible"),))]
    at = m.cycle_started()
    clock.now += 0.5
    at = m.phase_done("observe", at)
    clock.now += 0.125
    m.phase_done("decide", at)
    assert made[NAMES.phase].observed == [(0.5, (("phase", "observe"),)),
                                          (0.125, (("phase", "decide"),))]


def q(name):
    return (("queue", name),)


def test_refresh_sets_every_queue_and_zeroes_what_was_released():
    made, fake = _fake_metrics()
    m = SchedulerMetrics(fake)
    held = _record("h", "2xCPU=1,GPU=1", "team-a", GangState.RUNNING)
    gangs = [held, _record("p", "1xCPU=1", "team-a"), _record("q", "1xCPU=1", "b")]
    m.refresh(gangs, QUEUES)
    assert made[NAMES.pending].values == {q("org"): 0, q("team-a"): 1, q("b"): 1}
    assert made[NAMES.running].values == {q("org"): 0, q("team-a"): 1, q("b"): 0}
    usage = made[NAMES.usage].values
    assert usage[(("queue", "team-a"), ("resource", "GPU"))] == 2
    assert usage[(("queue", "org"), ("resource", "CPU"))] == 2  # the parent counts it too
    held.state = GangState.SUCCEEDED
    m.finished(held)  # the scheduler calls it once, when the gang finishes
    m.refresh(gangs, QUEUES)
    m.refresh(gangs, QUEUES)  # refreshing counts no finished gang again
    assert made[NAMES.running].values[q("team-a")] == 0
    assert set(usage.values()) == {0}
    assert made[NAMES.finished].values == {(("queue", "team-a"), ("state", "SUCCEEDED")): 1}


def test_a_failing_metric_never_raises():
    made, fake = _fake_metrics()
    m = SchedulerMetrics(fake)
    made[NAMES.pending].set = None  # not callable: TypeError inside refresh
    m.refresh([_record("p", "1xCPU=1", "b")], QUEUES)
    m.refresh([_record("p", "1xCPU=1", "b")], QUEUES)


def test_an_elastic_gang_counts_what_it_holds_its_surplus_and_its_resizes():
    from raygang.core.spec import GangSpec, RoleSpec

    made, fake = _fake_metrics()
    m = SchedulerMetrics(fake)
    r = GangRecord(gang_id="e", spec=GangSpec(name="e", queue="b", roles=(RoleSpec(
        name="w", replicas=(2, 4), resources={"GPU": 1}),)), programs={}, priority=0,
        seq=0, submitted_at=10.0)
    r.state, r.nodes, r.live.surplus = GangState.RUNNING, ("n1", "n1"), {"w-2": "n2"}
    m.refresh([r], QUEUES)
    assert made[NAMES.usage].values[(("queue", "b"), ("resource", "GPU"))] == 3  # not 4
    assert made[NAMES.surplus].values == {q("org"): 0, q("team-a"): 0, q("b"): 1}
    m.resized(r, 1, 0)
    m.resized(r, 0, 2)
    assert made[NAMES.resizes].values == {
        (("direction", "grow"), ("queue", "b")): 1, (("direction", "shrink"), ("queue", "b")): 2}


def test_tallies_set_kinds_wait_codes_guarantees_limits_and_fair_shares():
    made, fake = _fake_metrics()
    m = SchedulerMetrics(fake)
    row = QueueReport(name="a", parent=None, leaf=True, weight=1.0, quota=Resources(GPU=4),
                      limit=Resources(GPU=6), usage=Resources(GPU=2),
                      fair_share={"GPU": 5.0, "CPU": 8.0}, share_ratio=0.4, pending=3,
                      running=1)
    tallies = Tallies(
        kinds={(GangState.PENDING, "gang"): 2, (GangState.RUNNING, "deployment"): 1,
               (GangState.STARTING, "deployment"): 1, (GangState.SUCCEEDED, "job"): 7},
        waits={("a", "NO_FIT"): 1, ("a", "BEHIND"): 2},
        queues=lambda: [row], longest_wait={"a": 42.0})
    m.refresh([], CAPPED, {}, tallies)
    workloads = made[NAMES.workloads].values
    assert len(workloads) == 10  # five kinds, pending and running: zeros included
    assert workloads[(("kind", "gang"), ("status", "pending"))] == 2
    assert workloads[(("kind", "deployment"), ("status", "running"))] == 2
    assert workloads[(("kind", "job"), ("status", "running"))] == 0  # finished: neither
    waiting = made[NAMES.waiting].values
    assert len(waiting) == 8  # every queue, every code
    assert waiting[(("queue", "a"), ("reason", "BEHIND"))] == 2
    assert waiting[(("queue", "b"), ("reason", "LIMIT"))] == 0
    assert made[NAMES.longest].values == {q("a"): 42.0, q("b"): 0.0}
    assert made[NAMES.fair_share].values == {
        (("queue", "a"), ("resource", "GPU")): 5.0, (("queue", "a"), ("resource", "CPU")): 8.0}
    assert made[NAMES.guarantee].values == {  # beside each resource it has a share of
        (("queue", "a"), ("resource", "GPU")): 4, (("queue", "a"), ("resource", "CPU")): 0}
    assert made[NAMES.limit].values == {(("queue", "a"), ("resource", "GPU")): 6}
    m.refresh([], CAPPED, {}, Tallies(queues=lambda: [row]))  # the next cycle: none wait
    assert set(made[NAMES.waiting].values.values()) == {0}


def test_the_gcs_gauge_says_what_the_loop_sees():
    """The loop's view of the cluster (control/sight.py: its reads and probes) is the one
    answer to whether the GCS answers: 1, then 0 during an outage."""
    made, fake = _fake_metrics()
    m = SchedulerMetrics(fake)
    m.refresh([], QUEUES)  # without the loop's tallies: nothing said yet
    assert made[NAMES.gcs].values == {}
    m.refresh([], QUEUES, {}, Tallies())
    assert made[NAMES.gcs].values == {(): 1}
    m.refresh([], QUEUES, {}, Tallies(reachable=False))
    assert made[NAMES.gcs].values == {(): 0}
