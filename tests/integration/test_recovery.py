"""The scheduler actor dies and Ray restarts it: no gang is lost, none runs twice at once,
a cancelled one stays cancelled, and callers ride through the restart."""

from __future__ import annotations

import re
import time

import pytest
import ray
from ray.util.placement_group import placement_group_table

import raygang
from raygang import demo
from raygang.runtime.names import NAMESPACE
from tests.integration.helpers import restart_scheduler, scheduler


def raygang_pgs_by_gang() -> dict[str, int]:
    counts: dict[str, int] = {}
    for info in placement_group_table().values():
        if info["name"].startswith("raygang-") and info["state"] != "REMOVED":
            counts[info["name"]] = counts.get(info["name"], 0) + 1
    return counts


def member_actor_ids(status) -> list[str]:
    return [ray.get_actor(m.actor_name, namespace=NAMESPACE)._actor_id.hex()
            for m in status.members]


@raygang.gang_task(name="big", num_cpus=1)
def big_result() -> bytes:
    return b"x" * (2 << 20)  # over the 1 MiB kept in the store by default


@raygang.gang_task(name="slow-start", replicas=2, num_cpus=1)
class SlowStart:
    def __init__(self):
        time.sleep(3.0)  # the scheduler dies while members are being started

    def run(self):
        return raygang.get_context().rank


def test_a_restarted_scheduler_keeps_every_gang(ray_cluster):
    # One restart for every kind of gang it must keep (each restart costs a scheduler
    # process and a recovery): running, waiting, cancelled, acknowledged just before the
    # kill, finished with a small or a big result, and caught while its members start.
    from raygang.control.errors import ResultsLostError

    hold = raygang.gang_task(demo.sleep, name="hold", replicas=2, num_gpus=4, num_cpus=0,
                             strategy="SPREAD")  # every GPU of the cluster
    small = raygang.gang_task(demo.sleep, name="small", num_gpus=1, num_cpus=0)
    finished = raygang.gang_task(demo.sleep, name="done-before", replicas=2, num_cpus=1)
    kept = finished.remote(seconds=0.1)
    expected = kept.result(timeout=60)
    lost = big_result.remote()
    assert len(lost.result(timeout=60)[0]) == 2 << 20
    # Long enough to outlast the start below, the restart and the adoption on a loaded
    # machine (two test workers).
    running = hold.remote(seconds=14.0)
    members = member_actor_ids(running.ready(timeout=60))
    waiting = small.remote(seconds=0.1)
    cancelled = small.remote(seconds=0.1)
    assert cancelled.cancel().state.value == "CANCELLED"
    assert waiting.status().state.value == "PENDING"
    stored = [small.options(name="stored").remote(seconds=0.1) for _ in range(3)]
    # On CPUs (the GPUs are all held), in a queue of its own: in `default` it would wait
    # behind `waiting` until `hold` ends.
    starting = SlowStart.options(queue="team-b").remote()
    deadline = time.monotonic() + 60
    while starting.status().state.value != "STARTING":
        assert time.monotonic() < deadline, starting.status()
        time.sleep(0.05)

    # The process dies at once after those acknowledgements; Ray starts it again.
    restart_scheduler()

    # The running gang was adopted, not restarted: same member actors, same run (calls made
    # during a restart are retried by the Python API: tests/e2e/test_chaos.py).
    status = running.status()
    assert status.state.value == "RUNNING", status
    assert member_actor_ids(status) == members
    # Results: the small one from the store, the big one said to be lost.
    assert kept.result(timeout=60) == expected
    with pytest.raises(ResultsLostError, match="kept only up to 1048576 bytes"):
        lost.result(timeout=60)
    assert [r["rank"] for r in running.result(timeout=60)] == [0, 1]
    done = running.status()
    assert done.state.value == "SUCCEEDED"
    assert any("adopted by the restarted scheduler" in e.reason for e in done.events)
    assert done.restarts == 0 and done.preemptions == 0
    # Every acknowledged gang was written before its acknowledgement: all of them run.
    for ref in (waiting, *stored):
        assert ref.wait(timeout=90).state.value == "SUCCEEDED"
    assert cancelled.status().state.value == "CANCELLED"  # not re-admitted
    # Caught starting: torn down and requeued, then run whole (not counted as a restart).
    assert starting.result(timeout=120) == [0, 1]
    started = starting.status()
    # (What the store held when the process died: STARTING, or a step before it if that
    # change was still being written.)
    assert any(re.search(r"restarted while the gang was (ADMITTED|RESERVED|STARTING)",
                         e.reason) for e in started.events), [e.reason for e in started.events]
    assert started.restarts == 0
    # Each gang once, same ids; never two placement groups of one gang.
    ids = [g.gang_id for g in raygang.list_gangs()]
    for ref in (running, waiting, cancelled, starting, *stored):
        assert ids.count(ref.gang_id) == 1
    assert all(n == 1 for n in raygang_pgs_by_gang().values())
    recovery = ray.get(scheduler().ping.remote())["recovery"]
    assert recovery["adopted"] == 1 and recovery["pending"] == 4, recovery
    assert recovery["requeued"] == 1 and recovery["cancelled"] == 0, recovery
    assert recovery["finished"] >= 3, recovery


def test_the_gcs_store_keeps_the_contract(ray_cluster):
    from raygang.runtime.scheduler.gcs_store import GcsStore
    from tests.unit.test_store import contract

    contract(GcsStore(namespace=f"raygang-test-{time.time_ns()}"))


def test_the_sqlite_store_carries_gangs_across_a_restart(ray_cluster, tmp_path):
    from tests.conftest import SCHEDULER_CONFIG, _scheduler_with

    config = SCHEDULER_CONFIG.model_copy(update={"state": raygang.SchedulerConfig.model_validate(
        {"state": {"store": "sqlite", "path": str(tmp_path / "raygang.db")}}).state})
    try:
        raygang.shutdown()
        raygang.start(config)
        hold = raygang.gang_task(demo.sleep, name="hold", replicas=2, num_gpus=4, num_cpus=0,
                                 strategy="SPREAD")
        blocker = hold.remote(seconds=3.0)
        blocker.ready(timeout=60)
        waiting = raygang.gang_task(demo.sleep, name="waits", num_gpus=1,
                                    num_cpus=0).remote(seconds=0.1)
        restart_scheduler()
        assert waiting.wait(timeout=90).state.value == "SUCCEEDED"
        assert blocker.wait(timeout=60).state.value == "SUCCEEDED"
        recovery = ray.get(scheduler().ping.remote())["recovery"]
        assert recovery["adopted"] == 1 and recovery["pending"] == 1, recovery
        assert (tmp_path / "raygang.db").exists()
    finally:
        _scheduler_with(SCHEDULER_CONFIG)


def test_a_running_deployment_is_adopted_and_keeps_serving(ray_cluster, http_port):
    import httpx

    ref = raygang.deploy("kept", "raygang.demo:echo", replicas=1, num_cpus=0.5)
    # An elastic one, grown beyond its minimum: its surplus replicas are adopted too.
    grown = raygang.deploy("grown", "raygang.demo:echo", replicas=(1, 2), num_cpus=0.5,
                           strategy="STRICT_PACK")
    try:
        ref.ready(timeout=180)
        grown.ready(timeout=180)
        deadline = time.time() + 60
        while not any(e.reason.startswith("grew to 2") for e in grown.status().events):
            assert time.time() < deadline, grown.status().events
            time.sleep(0.2)
        url = f"http://127.0.0.1:{http_port}/kept"
        assert httpx.get(url, timeout=30).status_code == 200
        restart_scheduler()
        status = raygang.list_deployments()[0]
        assert status.state.value == "RUNNING", status
        assert any("adopted by the restarted scheduler" in e.reason for e in status.events)
        assert httpx.get(url, timeout=30).status_code == 200  # never redeployed
        recovery = ray.get(scheduler().ping.remote())["recovery"]
        assert recovery["adopted"] == 2 and recovery["requeued"] == 0, recovery
        after = grown.status()
        assert after.state.value == "RUNNING" and after.world_size == 2, after
        adopted = [e.reason for e in after.events]
        adopted = adopted[next(i for i, r in enumerate(adopted) if "adopted by" in r):]
        assert not any(r.startswith("grew") for r in adopted), adopted  # it was found at 2
    finally:
        assert raygang.undeploy("kept").state.value == "CANCELLED"
        assert raygang.undeploy("grown").state.value == "CANCELLED"
