"""The pure scale decision: which group grows, by how much, and which idle nodes go."""

from __future__ import annotations


import pytest

from raygang.core.capacity import Capacity
from raygang.core.placement import place
from raygang.core.plan import Plan, WaitCode, Waiting
from raygang.core.backlog import Backlog
from raygang.core.config import PolicyConfig
from raygang.core.queues import QueueSpec
from raygang.core.schedule import schedule
from raygang.core.scale import NodeGroup, ScalePolicy, default_cost, plan_scale, scale_candidates
from raygang.core.snapshot import ClusterSnapshot, NodeState
from tests.unit.builders import cluster, gang, gangs, res, running, busy

CPU = NodeGroup("cpu", res("CPU=16"), max_nodes=10)
GPU4 = NodeGroup("gpu4", res("GPU=4 CPU=32"), max_nodes=10)
GPU8 = NodeGroup("gpu8", res("GPU=8 CPU=64"), max_nodes=10)
HEAD = "head: CPU=0"


def scale(waiting, groups, snapshot=None, node_groups=None, idle_since=None, busy_nodes=(),
          now=1000.0, config=ScalePolicy(), last_scale_up=None):
    return plan_scale(snapshot or cluster(HEAD), waiting, groups, node_groups or {},
                      idle_since or {}, set(busy_nodes), config, now, last_scale_up)


@pytest.mark.parametrize("shape, strategy, groups, want", [
    # STRICT_PACK needs one node holding all of it: one 8-GPU node, not two 4-GPU ones.
    ("8xGPU=1", "STRICT_PACK", [GPU4, GPU8], ("gpu8", 1)),
    # PACK may split: two 4-GPU nodes cost the same as one 8-GPU node here; fewer nodes win.
    ("8xGPU=1", "PACK", [GPU4, GPU8], ("gpu8", 1)),
    ("4xGPU=1", "STRICT_SPREAD", [GPU8], ("gpu8", 4)),
    ("3xGPU=1", "SPREAD", [GPU8], ("gpu8", 1)),  # SPREAD shares when it must
    ("5xCPU=4", "PACK", [CPU, GPU4], ("cpu", 2)),  # a CPU gang picks the CPU group
    ("2xCPU=16", "STRICT_SPREAD", [GPU4, CPU], ("cpu", 2)),
])
def test_scale_up_picks_group_and_count(shape, strategy, groups, want):
    plan = scale([gang("g", shape, strategy)], groups)
    assert plan.waiting_for == {"g": want}
    assert plan.desired[want[0]] == want[1]
    assert plan.scaled_up == (want[0],)


def test_cheapest_by_cost_then_name():
    a = NodeGroup("a", res("CPU=8"), cost=5.0)
    b = NodeGroup("b", res("CPU=8"), cost=2.0)
    assert scale([gang("g", "CPU=4")], [a, b]).waiting_for == {"g": ("b", 1)}
    tie = NodeGroup("c", res("CPU=8"), cost=2.0)
    assert scale([gang("g", "CPU=4")], [tie, b]).waiting_for == {"g": ("b", 1)}


def test_default_cost_weights_accelerators():
    assert default_cost(res("CPU=16")) < default_cost(res("GPU=1 CPU=4"))
    assert default_cost(res("CPU=4 memory=16Gi")) == 8.0


def test_max_nodes_respected():
    small = NodeGroup("gpu4", res("GPU=4"), max_nodes=3, nodes=2)
    plan = scale([gang("g", "4xGPU=2", "STRICT_SPREAD")], [small])
    assert plan.waiting_for == {} and plan.desired == {"gpu4": 2}
    assert "gpu4 is at its maximum of 3 nodes" in plan.at_max["g"]
    assert plan.infeasible == {}


def test_requested_not_up_nodes_are_counted():
    # Two pods exist; one is up (w-1, full), one was requested and is not up yet.
    snap = busy(HEAD, "w-1: GPU=8", placed=[running("t", "w-1: 8xGPU=1")])
    group = NodeGroup("gpu8", res("GPU=8"), max_nodes=10, nodes=2)
    plan = scale([gang("g", "8xGPU=1", "STRICT_PACK")], [group], snap, {"w-1": "gpu8"})
    assert plan.waiting_for == {"g": ("gpu8", 0)}
    assert plan.desired == {"gpu8": 2} and plan.scaled_up == ()


def test_two_gangs_share_virtual_nodes():
    waiting = gangs(("a", "2xGPU=2", "PACK"), ("b", "2xGPU=2", "PACK"), ("c", "GPU=8", "PACK"))
    plan = scale(waiting, [GPU8])
    assert plan.waiting_for == {"a": ("gpu8", 1), "b": ("gpu8", 0), "c": ("gpu8", 1)}
    assert plan.desired == {"gpu8": 2}


def test_uses_real_free_capacity_first():
    snap = cluster(HEAD, "w-1: GPU=8 free GPU=4")
    plan = scale([gang("g", "6xGPU=1", "PACK")], [GPU8], snap, {"w-1": "gpu8"})
    assert plan.waiting_for == {"g": ("gpu8", 1)}


@pytest.mark.parametrize("shape, strategy, groups, words", [
    ("8xGPU=1", "STRICT_PACK", [GPU4],
     "needs {GPU: 8} on one node (STRICT_PACK, 8×{GPU: 1}); the closest node shape is "
     "{GPU: 4, CPU: 32} (group gpu4), short of {GPU: 4}"),
    ("TPU=4", "PACK", [CPU, GPU4], "bundle {TPU: 4} fits on no worker group's node"),
    ("GPU=1 + TPU=1", "PACK", [NodeGroup("g", res("GPU=1")), NodeGroup("t", res("TPU=1"))],
     "no single worker group's node shape hosts every bundle"),
    ("CPU=1", "PACK", [], "no worker group"),
])
def test_infeasible_reasons(shape, strategy, groups, words):
    plan = scale([gang("g", shape, strategy)], groups)
    assert words in plan.infeasible["g"]
    assert plan.waiting_for == {}


def idle_cluster():
    snap = busy(HEAD, "w-1: CPU=16", "w-2: CPU=16", "w-3: CPU=16",
                placed=[running("t", "w-3: CPU=1")])
    node_groups = {"w-1": "cpu", "w-2": "cpu", "w-3": "cpu"}
    return snap, node_groups


@pytest.mark.parametrize("min_nodes, idle, busy_nodes, want", [
    (0, {"w-1": 100.0, "w-2": 50.0, "w-3": 0.0, "head": 0.0}, (), ("w-2", "w-1")),
    (2, {"w-1": 100.0, "w-2": 50.0}, (), ("w-2",)),  # never below min
    (0, {"w-1": 100.0, "w-2": 50.0}, ("w-2",), ("w-1",)),  # a node the plan uses is not idle
    (0, {"w-1": 900.0, "w-2": 50.0}, (), ("w-2",)),  # not before the timeout
])
def test_scale_down(min_nodes, idle, busy_nodes, want):
    snap, node_groups = idle_cluster()
    group = NodeGroup("cpu", res("CPU=16"), min_nodes=min_nodes, nodes=3)
    plan = scale([], [group], snap, node_groups, idle, busy_nodes, now=1000.0)
    assert plan.release == want
    assert plan.desired == {"cpu": 3 - len(want)}


def test_node_a_waiting_gang_will_use_is_not_idle():
    snap, node_groups = idle_cluster()
    group = NodeGroup("cpu", res("CPU=16"), nodes=3)
    plan = scale([gang("g", "2xCPU=16", "STRICT_SPREAD")], [group], snap, node_groups,
                 {"w-1": 0.0, "w-2": 0.0})
    assert plan.release == ()


def test_hysteresis_departure_does_not_lower_desired():
    group = NodeGroup("cpu", res("CPU=16"), max_nodes=10)
    up = scale([gang("g", "CPU=8")], [group], now=0.0)
    assert up.desired == {"cpu": 1} and up.scaled_up == ("cpu",)
    # The gang left before its node came up: the requested pod stays.
    gone = scale([], [NodeGroup("cpu", res("CPU=16"), nodes=1)], now=10.0,
                 last_scale_up={"cpu": 0.0})
    assert gone.desired == {"cpu": 1}
    # Up and idle past the timeout, but the group scaled up too recently.
    snap = cluster(HEAD, "w-1: CPU=16")
    config = ScalePolicy(idle_timeout_s=5, scale_down_delay_s=60)
    early = scale([], [NodeGroup("cpu", res("CPU=16"), nodes=1)], snap, {"w-1": "cpu"},
                  {"w-1": 20.0}, now=50.0, config=config, last_scale_up={"cpu": 0.0})
    assert early.release == () and early.desired == {"cpu": 1}
    late = scale([], [NodeGroup("cpu", res("CPU=16"), nodes=1)], snap, {"w-1": "cpu"},
                 {"w-1": 20.0}, now=61.0, config=config, last_scale_up={"cpu": 0.0})
    assert late.release == ("w-1",) and late.desired == {"cpu": 0}


def test_deterministic():
    waiting = gangs(("a", "3xGPU=2", "SPREAD"), ("b", "8xCPU=4", "PACK"),
                    ("c", "4xGPU=4", "STRICT_PACK"), ("d", "2xGPU=1", "STRICT_SPREAD"))
    snap, node_groups = idle_cluster()
    runs = [scale(waiting, groups, snap, node_groups, {"w-1": 0.0})
            for groups in ([CPU, GPU4, GPU8], [GPU8, CPU, GPU4])]
    assert runs[0] == runs[1]


def test_waiting_for_nodes_let_every_gang_place():
    waiting = gangs(("a", "3xGPU=2", "SPREAD"), ("b", "8xCPU=4", "PACK"),
                    ("c", "8xGPU=1", "STRICT_PACK"), ("d", "3xGPU=1", "STRICT_SPREAD"),
                    ("e", "2xCPU=16", "STRICT_SPREAD"), ("f", "GPU=2 + 2xCPU=1", "PACK"),
                    ("x", "9xGPU=1", "STRICT_PACK"))
    snap = cluster(HEAD, "w-1: GPU=4 CPU=32 free GPU=1 CPU=8")
    groups = [CPU, NodeGroup("gpu4", GPU4.shape, max_nodes=10, nodes=2), GPU8]
    plan = scale(waiting, groups, snap, {"w-1": "gpu4"})
    assert set(plan.infeasible) == {"x"}
    # Build the cluster the plan asks for: real nodes, requested pods and new nodes.
    nodes = list(snap.alive_nodes)
    by_name = {g.name: g for g in groups}
    extra = {"gpu4": 1}  # gpu4 has 2 pods, one of them up
    for _, (name, k) in plan.waiting_for.items():
        extra[name] = extra.get(name, 0) + k
    for name, k in extra.items():
        shape = by_name[name].shape
        nodes += [NodeState(f"{name}-{i}", shape, shape) for i in range(k)]
    assert sum(extra.values()) - 1 + 2 == sum(plan.desired.values())
    cap = Capacity(ClusterSnapshot(tuple(nodes)).alive_nodes)
    for g in waiting:
        if g.gang_id in plan.infeasible:
            continue
        found = place(g.bundles, g.strategy, cap)
        assert found is not None, g.gang_id
        cap.reserve(zip(found, g.bundles))


def test_scale_candidates_skip_limit_and_queue_problems():
    pending = gangs(("a", "CPU=1", "PACK"), ("b", "CPU=1", "PACK"), ("c", "CPU=1", "PACK"),
                    ("d", "CPU=1", "PACK"))
    waiting = {
        "a": Waiting("a", WaitCode.NO_FIT, ""),
        "b": Waiting("b", WaitCode.LIMIT, ""),
        "c": Waiting("c", WaitCode.UNSCHEDULABLE, ""),
    }
    by_id = {g.gang_id: g for g in reversed(pending)}
    out = scale_candidates(Plan(waiting=waiting), by_id.get, PolicyConfig())
    assert [g.gang_id for g in out] == ["a", "c"]


@pytest.mark.parametrize("eager", [False, True])
def test_no_nodes_for_gangs_behind_a_head_a_queue_limit_holds(eager):
    """A limited queue's backlog waits for its limit, not for nodes: no node is asked for
    the gangs behind its head (nor for one that could not fit at all: once it fit, it
    would wait there too), whether the cycle explained them (eager) or left them to be
    read when asked; a line blocked for want of room is asked for whole."""
    policy = PolicyConfig(queues=[QueueSpec(name="default"),
                                  QueueSpec(name="held", limit={"GPU": 1}),
                                  QueueSpec(name="short")])
    snapshot = cluster("w-1: GPU=4 CPU=8", "w-2: GPU=4 CPU=8")
    pending = ([gang(f"h{i}", "GPU=1", queue="held") for i in range(30)]
               + [gang(f"s{i}", "2xGPU=4", queue="short") for i in range(5)]
               + [gang(f"{q}-huge", "12xGPU=1", queue=q) for q in ("held", "short")])
    backlog = pending if eager else Backlog.of(pending)
    plan = schedule(snapshot, backlog, policy, 0.0)
    assert [a.gang_id for a in plan.admissions] == ["h0"]
    assert plan.waiting["h1"].code is WaitCode.LIMIT
    assert plan.waiting["s0"].code is WaitCode.NO_FIT
    assert plan.waiting["held-huge"].code is WaitCode.UNSCHEDULABLE
    by_id = {g.gang_id: g for g in pending}
    out = scale_candidates(plan, by_id.get, policy)
    assert [g.gang_id for g in out] == [f"s{i}" for i in range(5)] + ["short-huge"]
    assert scale_candidates(plan, lambda gang_id: None, policy) == []  # none pending now
