"""A placement group that never becomes ready is removed and its gang requeued.

A node is killed without warning; for ~15 s the GCS still reports it alive, so the plan
pins the gang there and the reservation times out. The gang goes back to the queue, with
the reason in its history, and runs elsewhere once the node is known dead.
"""

from __future__ import annotations

import time

import ray

import raygang
from raygang import GangState


@raygang.gang_task(num_cpus=1, reservation_timeout_s=2)
def where():
    return ray.get_runtime_context().get_node_id()


def test_reservation_timeout_requeues_and_runs_elsewhere(ray_cluster):
    doomed = ray_cluster.add_node(num_cpus=1, num_gpus=0)
    ray_cluster.wait_for_nodes()
    doomed_id = doomed.node_id
    ray_cluster.remove_node(doomed, allow_graceful=False)

    ref = where.remote()  # best fit: the 1-CPU node, which is gone but still listed
    node = ref.result(timeout=90)[0]
    assert node != doomed_id
    status = ref.status()
    requeues = [e for e in status.events
                if e.from_state is GangState.ADMITTED and e.to_state is GangState.PENDING]
    assert requeues, [e.reason for e in status.events]
    assert f"placement group raygang-{ref.gang_id} was not ready within 2s" in requeues[0].reason
    # Leave the shared cluster as it was: until the GCS declares the node dead, it still
    # counts in ray.cluster_resources().
    deadline = time.time() + 60
    while any(n["NodeID"] == doomed_id and n["Alive"] for n in ray.nodes()):
        assert time.time() < deadline, "the killed node was never declared dead"
        time.sleep(0.2)
