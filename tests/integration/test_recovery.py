"""The scheduler actor dies and Ray restarts it: no gang is lost, none runs twice at once,
a cancelled one stays cancelled, and callers ride through the restart."""

from __future__ import annotations

import time

import ray
from ray.util.placement_group import placement_group_table

import raygang
from raygang import demo
from raygang.runtime.launcher import NAMESPACE
from raygang.runtime.scheduler import SCHEDULER_NAME


def scheduler():
    return ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE)


def raygang_pgs_by_gang() -> dict[str, int]:
    counts: dict[str, int] = {}
    for info in placement_group_table().values():
        if info["name"].startswith("raygang-") and info["state"] != "REMOVED":
            counts[info["name"]] = counts.get(info["name"], 0) + 1
    return counts


def member_actor_ids(status) -> list[str]:
    return [ray.get_actor(m.actor_name, namespace=NAMESPACE)._actor_id.hex()
            for m in status.members]


def test_a_restarted_scheduler_keeps_every_gang(ray_cluster):
    hold = raygang.gang_task(demo.sleep, name="hold", replicas=2, num_gpus=4, num_cpus=0,
                             strategy="SPREAD")  # every GPU of the cluster
    small = raygang.gang_task(demo.sleep, name="small", num_gpus=1, num_cpus=0)
    running = hold.remote(seconds=6.0)
    members = member_actor_ids(running.ready(timeout=60))
    waiting = small.remote(seconds=0.1)
    cancelled = small.remote(seconds=0.1)
    assert cancelled.cancel().state.value == "CANCELLED"
    assert waiting.status().state.value == "PENDING"

    ray.kill(scheduler(), no_restart=False)  # the process dies; Ray starts it again

    # Callers ride through the restart (the Python API retries on the new actor). The
    # running gang is adopted, not restarted: same member actors, same run.
    status = running.status()
    assert status.state.value == "RUNNING", status
    assert member_actor_ids(status) == members
    assert [r["rank"] for r in running.result(timeout=60)] == [0, 1]
    done = running.status()
    assert done.state.value == "SUCCEEDED"
    assert any("adopted by the restarted scheduler" in e.reason for e in done.events)
    assert done.restarts == 0 and done.preemptions == 0
    assert waiting.wait(timeout=90).state.value == "SUCCEEDED"
    assert cancelled.status().state.value == "CANCELLED"  # not re-admitted
    # Each gang once, same ids; never two placement groups of one gang.
    ids = [g.gang_id for g in raygang.list_gangs()]
    for ref in (running, waiting, cancelled):
        assert ids.count(ref.gang_id) == 1
    assert all(n == 1 for n in raygang_pgs_by_gang().values())
    recovery = ray.get(scheduler().ping.remote())["recovery"]
    assert recovery["adopted"] == 1 and recovery["pending"] == 1, recovery
    assert recovery["requeued"] == 0 and recovery["cancelled"] == 0, recovery
    assert recovery["finished"] >= 1, recovery


def test_a_submission_is_stored_before_it_is_acknowledged(ray_cluster):
    small = raygang.gang_task(demo.sleep, name="stored", num_gpus=1, num_cpus=0)
    hold = raygang.gang_task(demo.sleep, name="hold", replicas=2, num_gpus=4, num_cpus=0,
                             strategy="SPREAD")
    blocker = hold.remote(seconds=2.0)
    blocker.ready(timeout=60)
    refs = [small.remote(seconds=0.1) for _ in range(3)]
    # Killed at once after the acknowledgements: every acknowledged gang was written.
    ray.kill(scheduler(), no_restart=False)
    deadline = time.monotonic() + 90
    for ref in refs:
        assert ref.wait(timeout=max(1.0, deadline - time.monotonic())).state.value == "SUCCEEDED"
    assert blocker.wait(timeout=60).state.value == "SUCCEEDED"


def test_the_gcs_store_keeps_the_contract(ray_cluster):
    from raygang.runtime.store import GcsStore
    from tests.unit.test_store import contract

    contract(GcsStore(namespace=f"raygang-test-{time.time_ns()}"))


@raygang.gang_task(name="big", num_cpus=1)
def big_result() -> bytes:
    return b"x" * (2 << 20)  # over the 1 MiB kept in the store by default


def test_small_results_are_kept_across_a_restart(ray_cluster):
    import pytest

    from raygang.runtime.errors import ResultsLostError

    small = raygang.gang_task(demo.sleep, name="done-before", replicas=2, num_cpus=1)
    kept = small.remote(seconds=0.1)
    expected = kept.result(timeout=60)
    lost = big_result.remote()
    assert len(lost.result(timeout=60)[0]) == 2 << 20
    ray.kill(scheduler(), no_restart=False)
    assert kept.result(timeout=60) == expected  # from the store, after the restart
    with pytest.raises(ResultsLostError, match="kept only up to 1048576 bytes"):
        lost.result(timeout=60)


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
        ray.kill(scheduler(), no_restart=False)
        assert waiting.wait(timeout=90).state.value == "SUCCEEDED"
        assert blocker.wait(timeout=60).state.value == "SUCCEEDED"
        recovery = ray.get(scheduler().ping.remote())["recovery"]
        assert recovery["adopted"] == 1 and recovery["pending"] == 1, recovery
        assert (tmp_path / "raygang.db").exists()
    finally:
        _scheduler_with(SCHEDULER_CONFIG)
