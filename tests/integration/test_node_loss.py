"""A node dies under a running gang: the gang is torn down whole (never left partly placed)
and runs again elsewhere. (One that may not restart fails with the reason: the same
member death as tests/integration/test_failures.py's, which checks that.)"""

from __future__ import annotations

import time

from ray.util.placement_group import placement_group_table

import raygang
from raygang import demo
from tests.integration.leaks import raygang_member_actors, raygang_placement_groups

LOSSY = "lossy"  # a resource only the test's extra nodes have


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def add_lossy_node(cluster):
    node = cluster.add_node(num_cpus=1, num_gpus=0, resources={LOSSY: 2})
    cluster.wait_for_nodes()
    return node


def node_of(status) -> set[str]:
    return {m.node_id for m in status.members}


def test_a_gang_on_a_lost_node_restarts_whole_elsewhere(ray_cluster):
    first, second = add_lossy_node(ray_cluster), add_lossy_node(ray_cluster)
    try:
        task = raygang.gang_task(demo.sleep, name="on-lossy", replicas=2, num_cpus=0,
                                 resources={LOSSY: 1}, strategy="STRICT_PACK", max_restarts=1)
        ref = task.remote(seconds=4.0)
        (node_id,) = node_of(ref.ready(timeout=60))
        doomed = first if first.node_id == node_id else second
        ray_cluster.remove_node(doomed, allow_graceful=False)
        status = wait_for(lambda: (s := ref.status()).restarts == 1 and s, 60, "a restart")
        # Torn down whole: no member of the first attempt left, no partial group.
        assert any("ActorDiedError" in e.reason for e in status.events), status.events
        done = ref.wait(timeout=90)
        assert done.state.value == "SUCCEEDED", done
        assert node_of(done) == {first.node_id if doomed is second else second.node_id}
        wait_for(lambda: not [p for p in placement_group_table().values()
                              if p["name"] == f"raygang-{ref.gang_id}"
                              and p["state"] != "REMOVED"], 30, "its placement group gone")
    finally:
        for node in (first, second):
            if node in ray_cluster.worker_nodes:
                ray_cluster.remove_node(node)
    wait_for(lambda: not raygang_placement_groups() and not raygang_member_actors(), 30,
             "no raygang group or member left")
