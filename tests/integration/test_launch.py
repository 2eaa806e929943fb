"""A gang reserves whole, starts in role order, passes the barrier, runs, returns results."""

from __future__ import annotations

import time

import pytest
import ray
from ray.util.placement_group import placement_group_table

import raygang
from raygang import GangState
from tests.integration.helpers import wait_state


@raygang.gang_task(replicas=4, num_gpus=1, strategy="SPREAD")
def identify(offset):
    ctx = raygang.get_context()
    return {
        "rank": ctx.rank, "world": ctx.world_size, "role": ctx.role, "value": offset + ctx.rank,
        "node": ray.get_runtime_context().get_node_id(), "peers": len(ctx.peers),
        "gpus": ray.get_gpu_ids(),
    }


def test_function_gang_returns_results_in_rank_order(ray_cluster):
    ref = identify.remote(100)
    results = ref.result(timeout=60)
    assert [r["rank"] for r in results] == [0, 1, 2, 3]
    assert [r["value"] for r in results] == [100, 101, 102, 103]
    assert {r["world"] for r in results} == {4} and {r["peers"] for r in results} == {4}
    assert all(len(r["gpus"]) == 1 for r in results)  # each member sees its own GPU
    status = ref.status()
    assert status.state is GangState.SUCCEEDED
    assert [e.to_state for e in status.events] == [
        GangState.PENDING, GangState.ADMITTED, GangState.RESERVED, GangState.STARTING,
        GangState.RUNNING, GangState.SUCCEEDED,
    ]
    # The nodes the status reports are where members really ran.
    assert status.nodes() == [r["node"] for r in results]


@raygang.gang_task(replicas=2, num_gpus=1)
class Holder:
    """A service member: no run(), so the gang runs until cancelled."""

    def node(self):
        return ray.get_runtime_context().get_node_id()


def _placement_group(gang_id: str) -> dict:
    for pg in placement_group_table().values():
        if pg["name"] == f"raygang-{gang_id}" and pg["state"] == "CREATED":
            return pg
    raise AssertionError(f"no ready placement group for {gang_id}")


def _bundle_nodes(pg: dict) -> list[str]:
    return [pg["bundles_to_node_id"][i] for i in sorted(pg["bundles_to_node_id"])]


def _no_placement_group(gang_id: str) -> bool:
    return not [pg for pg in placement_group_table().values()
                if pg["name"] == f"raygang-{gang_id}" and pg["state"] != "REMOVED"]


def test_strict_pack_puts_every_bundle_on_one_node(ray_cluster):
    ref = Holder.options(replicas=3, strategy="STRICT_PACK").remote()
    status = wait_state(ref, GangState.RUNNING)
    pg = _placement_group(ref.gang_id)
    assert pg["strategy"] == "STRICT_PACK"  # Ray itself holds the bundles together
    nodes = _bundle_nodes(pg)
    assert len(nodes) == 3 and len(set(nodes)) == 1
    assert status.nodes() == nodes
    handles = ref.handles()["holder"]
    assert ray.get([h.node.remote() for h in handles]) == nodes
    assert ref.cancel().state is GangState.CANCELLED


def test_strict_spread_puts_bundles_on_distinct_nodes(ray_cluster, worker_node_ids):
    ref = Holder.options(replicas=2, strategy="STRICT_SPREAD").remote()
    wait_state(ref, GangState.RUNNING)
    pg = _placement_group(ref.gang_id)
    assert pg["strategy"] == "STRICT_SPREAD"
    assert sorted(_bundle_nodes(pg)) == worker_node_ids  # the only two nodes with GPUs
    ref.cancel()


def _stays_pending(ref, seconds: float = 2.5):
    """PENDING, holding nothing, for a few scheduling cycles (1 s each by default)."""
    deadline = time.time() + seconds
    while True:
        status = ref.status()
        assert status.state is GangState.PENDING, status
        assert _no_placement_group(ref.gang_id), f"{ref.gang_id} holds a placement group"
        if time.time() > deadline:
            return status
        time.sleep(0.2)


STRICT_CASES = {
    # 2 GPUs busy on each worker: 4 are free, but no node has 3. PACK would run now.
    "STRICT_PACK": (dict(replicas=2, num_gpus=2, strategy="STRICT_SPREAD"), 3,
                    ["on one node (STRICT_PACK", "largest free GPU on one node is 2"]),
    # One worker's 4 GPUs busy: 4 are free on the other. SPREAD would put both there.
    "STRICT_SPREAD": (dict(replicas=1, num_gpus=4), 2,
                      ["needs 2 distinct nodes (STRICT_SPREAD", "only 1 node can hold"]),
}


@pytest.mark.parametrize("strategy", STRICT_CASES)
def test_a_strict_strategy_waits_where_the_loose_one_would_run(ray_cluster, strategy):
    busy_options, replicas, reasons = STRICT_CASES[strategy]
    busy = Holder.options(**busy_options).remote()
    refs = [busy]
    try:
        wait_state(busy, GangState.RUNNING)
        refs.append(strict := Holder.options(replicas=replicas, strategy=strategy).remote())
        status = _stays_pending(strict)
        assert ray.available_resources().get("GPU", 0) == 4
        for reason in reasons:
            assert reason in status.reason, status.reason
        if strategy == "STRICT_PACK":
            busy.cancel()  # now a node has room: it runs, every bundle on that node
            wait_state(strict, GangState.RUNNING)
            assert len(set(_bundle_nodes(_placement_group(strict.gang_id)))) == 1
    finally:
        for ref in refs:
            ref.cancel()


@raygang.gang_task(replicas=3, num_cpus=1)
class Barriered:
    def __init__(self, delay):
        time.sleep(delay * raygang.get_context().rank)  # members get ready at different times
        self.ready_at = time.time()

    def run(self):
        return {"ready_at": self.ready_at, "started_at": time.time()}


def test_no_member_starts_work_before_every_member_is_ready(ray_cluster):
    results = Barriered.remote(1.0).result(timeout=60)
    last_ready = max(r["ready_at"] for r in results)
    first_start = min(r["started_at"] for r in results)
    assert first_start >= last_ready
    # Not vacuous: readiness really was spread out (by up to 2 s, less the skew of actor
    # start-up), so early members were held at the barrier.
    assert last_ready - min(r["ready_at"] for r in results) >= 0.3


WORKER_LOAD_S = 2.0  # long enough that a router started with the workers would begin first


@raygang.gang_task(num_cpus=0.5)
class Stage:
    def __init__(self, load_s=0.0):
        self.began = time.time()
        time.sleep(load_s)
        self.ready = time.time()

    def run(self):
        ctx = raygang.get_context()
        return {"role": ctx.role, "began": self.began, "ready": self.ready}


def test_role_with_after_starts_only_after_those_roles_are_ready(ray_cluster):
    service = raygang.gang(
        "ordered",
        roles={
            "router": Stage.options(after=["prefill", "decode"]),
            "prefill": Stage.options(replicas=2, num_gpus=1, num_cpus=None).bind(WORKER_LOAD_S),
            "decode": Stage.options(replicas=2, num_gpus=1, num_cpus=None).bind(WORKER_LOAD_S),
        },
    )
    ref = service.remote()
    results = ref.result(timeout=60)
    assert [r["role"] for r in results] == ["router", "prefill", "prefill", "decode", "decode"]
    router, workers = results[0], results[1:]
    assert all(w["ready"] - w["began"] >= WORKER_LOAD_S for w in workers)
    # The router's __init__ began only once every worker's __init__ had returned ...
    assert router["began"] >= max(w["ready"] for w in workers), results
    # ... and the scheduler saw them ready first (its own record of readiness).
    ready_at = {(m.role, m.index): m.ready_at for m in ref.status().members}
    assert ready_at[("router", 0)] > max(t for (role, _), t in ready_at.items() if role != "router")
    # prefill and decode do not wait for each other: each role began before the other was ready.
    by_role = {role: [r for r in workers if r["role"] == role] for role in ("prefill", "decode")}
    for role, other in (("prefill", "decode"), ("decode", "prefill")):
        assert min(r["began"] for r in by_role[role]) < max(r["ready"] for r in by_role[other])
