"""The scheduler's metrics reach Ray's Prometheus endpoints with their labels and values.

Ray's workers push metrics to their node's agent every `metrics_report_interval_ms` (10 s
by default, as on the test session's cluster), so every check polls the endpoints until it
holds or a deadline passes.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

import ray
from prometheus_client.parser import text_string_to_metric_families

import raygang
from raygang import GangState
from tests.integration.helpers import wait_state

DEADLINE_S = 60  # several report intervals

Samples = list[tuple[str, dict[str, str], float]]


@raygang.gang_task(replicas=2, num_cpus=1, queue="team-a")
def rank():
    return raygang.get_context().rank


@raygang.gang_task(replicas=2, num_cpus=1, queue="team-a")
class Held:
    """No run(): the gang holds its resources until cancelled."""

    def ping(self):
        return True


@raygang.gang_task(replicas=2, num_cpus=1, num_gpus=4, priority="batch",
                   preemption_grace_s=0)
class Hog:
    """Every GPU of both workers, at the lowest priority, until cancelled."""

    def ping(self):
        return True


@raygang.gang_task(replicas=1, num_cpus=1, num_gpus=1, priority="training")
def urgent():
    return raygang.get_context().rank


def scrape() -> Samples:
    """raygang's samples from the metrics endpoint of every alive node."""
    samples: Samples = []
    for node in ray.nodes():
        port = node.get("MetricsExportPort")
        if not node["Alive"] or not port:
            continue
        url = f"http://{node['NodeManagerAddress']}:{port}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        samples += [
            (s.name, s.labels, s.value)
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name.startswith("ray_raygang_")
        ]
    return samples


def values(samples: Samples, name: str, **labels: str) -> list[float]:
    return [v for n, l, v in samples if n == name and labels.items() <= l.items()]


def poll(check: Callable[[Samples], bool], what: str) -> Samples:
    deadline = time.time() + DEADLINE_S
    while True:
        samples = scrape()
        if check(samples):
            return samples
        if time.time() > deadline:
            seen = "\n".join(f"{n}{ {k: v for k, v in l.items() if k in _OURS} } {v}"
                             for n, l, v in samples)
            raise AssertionError(f"no {what} after {DEADLINE_S}s; raygang samples:\n{seen}")
        time.sleep(1)


_OURS = {"queue", "resource", "action", "reason", "preemptor_kind", "state", "result", "le",
         "phase", "kind", "status"}


def _series(samples: Samples, name: str, **labels: str) -> dict[tuple, float]:
    """Per series (Ray labels included: one per scheduler worker), its value."""
    return {tuple(sorted(l.items())): v for n, l, v in samples
            if n == name and labels.items() <= l.items()}


def test_scheduler_metrics_are_scraped_from_ray(ray_cluster):
    admitted = "ray_raygang_admitted_gangs_total"
    before = _series(scrape(), admitted, queue="team-a")

    assert rank.remote().result(timeout=60) == [0, 1]
    held = Held.remote()
    wait_state(held, GangState.RUNNING)

    def admitted_and_held(samples: Samples) -> bool:
        after = _series(samples, admitted, queue="team-a")
        return (
            any(v >= before.get(k, 0) + 2 for k, v in after.items())  # both gangs
            and any(v >= 1 for v in values(
                samples, "ray_raygang_admission_wait_time_seconds_count", queue="team-a"))
            and any(v >= 1 for v in values(
                samples, "ray_raygang_admission_cycle_duration_seconds_count",
                result="success"))
            and 1 in values(samples, "ray_raygang_running_gangs", queue="team-a")
            and bool(values(samples, "ray_raygang_pending_gangs", queue="team-a"))
            and 2 in values(samples, "ray_raygang_queue_resource_usage",
                            queue="team-a", resource="CPU")
        )

    try:
        samples = poll(admitted_and_held, "admission, wait, cycle, gauges for team-a")
    finally:
        held.cancel()
    # Every configured queue is reported, the idle ones as 0.
    assert 0 in values(samples, "ray_raygang_running_gangs", queue="team-b")
    # The wait is measured in seconds: a gang admitted at once waits under a minute.
    assert any(v >= 1 for v in values(samples, "ray_raygang_admission_wait_time_seconds_bucket",
                                      queue="team-a", le="60.0"))

    def released(samples: Samples) -> bool:
        return (
            set(values(samples, "ray_raygang_running_gangs", queue="team-a")) == {0}
            and set(values(samples, "ray_raygang_queue_resource_usage",
                           queue="team-a", resource="CPU")) == {0}
            and any(v >= 1 for v in values(samples, "ray_raygang_gangs_finished_total",
                                           queue="team-a", state="CANCELLED"))
            and any(v >= 1 for v in values(samples, "ray_raygang_gangs_finished_total",
                                           queue="team-a", state="SUCCEEDED"))
        )

    poll(released, "zeroed gauges and finished counts for team-a after cancelling")


def test_a_preemption_is_counted_by_reason(ray_cluster):
    preempted = "ray_raygang_preempted_gangs_total"
    labels = {"queue": "default", "action": "preempt", "reason": "in_queue",
              "preemptor_kind": "gang"}
    before = _series(scrape(), preempted, **labels)

    hog = Hog.remote()
    try:
        wait_state(hog, GangState.RUNNING)
        assert urgent.remote().result(timeout=60) == [0]  # it ran: the hog made room
        status = hog.status()
        assert status.preemptions == 1
        assert GangState.PREEMPTED in [e.to_state for e in status.events]

        def counted(samples: Samples) -> bool:
            after = _series(samples, preempted, **labels)
            return any(v >= before.get(k, 0) + 1 for k, v in after.items())

        poll(counted, f"{preempted} for the default queue's preempted gang")
    finally:
        hog.cancel()
