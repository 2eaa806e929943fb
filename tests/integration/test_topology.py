"""Topology-aware gangs on a real Ray cluster whose nodes are labelled with racks: the
session cluster's two 4-GPU workers are racks r1 and r2 of zone z1 (tests/conftest.py).

Members land per the rule (read from the node each one really ran on), a gang no single
rack has room for waits and says so, then runs in one; Ray itself refuses to place a
bundle pinned to a node outside its domain; and nothing is left afterwards (the
`ray_cluster` fixture: no raygang-* placement group or member actor, resources back).
"""

from __future__ import annotations

import time

import pytest
import ray
from ray.util.placement_group import placement_group, remove_placement_group

import raygang
from raygang import GangState
from raygang.demo import sleep
from raygang.runtime.names import NODE_ID_LABEL


@pytest.fixture
def racks(ray_cluster) -> dict[str, str]:
    """Node id -> rack, for the labelled workers."""
    return {n["NodeID"]: n["Labels"]["rack"] for n in ray.nodes()
            if n["Alive"] and "rack" in (n.get("Labels") or {})}


def _task(replicas: int, gpus: float, **options):
    return raygang.gang_task(role="w", replicas=replicas, num_gpus=gpus, num_cpus=0,
                             **options)(sleep)


def test_a_spread_gang_that_requires_one_rack_stays_in_it(racks):
    # SPREAD alone puts two members on two nodes; one rack here is one node.
    results = _task(2, 1, strategy="SPREAD", topology={"required": "rack"}).remote(0.1) \
        .result(timeout=120)
    assert len({racks[r["node_id"]] for r in results}) == 1, results


def test_segments_of_consecutive_ranks_each_run_in_one_rack(racks):
    task = _task(4, 1, strategy="SPREAD", topology={"segment": 2, "segment_level": "rack"})
    results = sorted(task.remote(0.1).result(timeout=120), key=lambda r: r["rank"])
    where = [racks[r["node_id"]] for r in results]
    assert where[0] == where[1] and where[2] == where[3], where


def test_a_gang_waits_while_no_single_rack_has_room_then_runs_in_one(racks):
    # 3 GPUs held on each worker: 2 free in all, 1 in each rack.
    filler = _task(2, 3, strategy="STRICT_SPREAD").remote(600)
    deadline = time.time() + 120
    while filler.status().state is not GangState.RUNNING:
        assert time.time() < deadline, filler.status()
        time.sleep(0.2)
    ranked = _task(2, 1, topology={"required": "rack"}).remote(0.1)
    try:
        deadline = time.time() + 60
        while not (status := ranked.status()).reason:
            assert time.time() < deadline, status
            time.sleep(0.2)
        assert status.state is GangState.PENDING
        assert "within one domain of 'rack'" in status.reason, status.reason
        assert "no single rack has room now: free GPU by rack r1: 1 on 1 node, r2: 1 on 1 " \
               "node" in status.reason, status.reason
    finally:
        filler.cancel()
    results = ranked.result(timeout=120)
    assert len({racks[r["node_id"]] for r in results}) == 1, results


def test_ray_refuses_a_node_outside_the_pinned_domain(racks):
    """What the runtime relies on: a selector with the node id and the domain's label value
    is an AND (Ray 2.60); a node without that value is never used."""
    node = next(n for n, rack in racks.items() if rack == "r1")
    wrong = placement_group([{"CPU": 0.01}], name="topology-probe-wrong",
                            bundle_label_selector=[{NODE_ID_LABEL: node, "rack": "r2"}])
    right = placement_group([{"CPU": 0.01}], name="topology-probe-right",
                            bundle_label_selector=[{NODE_ID_LABEL: node, "rack": "r1"}])
    try:
        assert right.wait(30)
        assert not wrong.wait(2)
    finally:
        remove_placement_group(wrong)
        remove_placement_group(right)
