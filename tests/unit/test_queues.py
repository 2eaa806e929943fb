"""The queue tree: validation, limits at every level, borrowing, fair-share order."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from raygang.core import (
    QueueSpec,
    QueueTree,
    PolicyConfig,
    WaitCode,
    schedule,
    unschedulable_reason,
)

from tests.unit.builders import busy, cluster, gang, queue, running, spec


@pytest.mark.parametrize(
    "queues, message",
    [
        ([queue("a"), queue("a")], r"queues\[1\].name: queue 'a' is declared twice"),
        ([queue("a", "nope")], "queue 'a' has unknown parent 'nope'"),
        ([queue("a", "b"), queue("b", "a")], "parent cycle"),
    ],
)
def test_bad_trees_are_refused_with_the_queue_at_fault(queues, message):
    with pytest.raises(ValueError, match=message):
        QueueTree(queues)
    with pytest.raises(ValidationError, match=message):
        PolicyConfig(queues=queues)


def test_quota_above_limit_is_refused():
    with pytest.raises(ValidationError, match="GPU quota 8 is above its limit 4"):
        queue("a", quota="GPU=8", limit="GPU=4")


def test_default_queue_always_exists():
    tree = QueueTree([queue("team-a")])
    assert tree.leaves == ["default", "team-a"]


@pytest.mark.parametrize(
    "gang_queue, shape, message",
    [
        ("nope", "GPU=1", "queue: unknown queue 'nope' (queues: a, b, default)"),
        ("org", "GPU=1", "queue: 'org' is a parent queue; gangs go to its leaves (a, b)"),
        ("a", "9xGPU=1", "queue: the gang needs GPU 9 in all, above the limit 8 of queue 'org'"),
        ("b", "3xGPU=1", "queue: the gang needs GPU 3 in all, above the limit 2 of queue 'b'"),
    ],
)
def test_gangs_that_their_queue_can_never_admit_are_refused(gang_queue, shape, message):
    config = PolicyConfig(queues=[
        queue("org", limit="GPU=8"), queue("a", "org"), queue("b", "org", limit="GPU=2"),
    ])
    reason = unschedulable_reason(spec("g", shape, queue=gang_queue), cluster("w-1: GPU=16"),
                                  config)
    assert reason == message


def test_limits_hold_at_every_level():
    config = PolicyConfig(queues=[
        queue("org", limit="GPU=6"), queue("a", "org", limit="GPU=4"), queue("b", "org"),
    ])
    snapshot = busy("w-1: GPU=8", "w-2: GPU=8",
                    placed=[running("t1", "w-1: 3xGPU=1", queue="a")])
    pending = [
        gang("a-big", "2xGPU=1", queue="a", seq=0),  # 3 + 2 > a's limit 4
        gang("b-1", "2xGPU=1", queue="b", seq=1),  # org: 3 + 2 = 5 <= 6
        gang("b-2", "2xGPU=1", queue="b", seq=2),  # org: 5 + 2 > 6
    ]
    plan = schedule(snapshot, pending, config, 0.0)
    assert plan.admitted_ids == ["b-1"]
    assert plan.waiting["a-big"].code is WaitCode.LIMIT
    assert plan.waiting["a-big"].message == (
        "queue 'a' is at its limit: uses GPU 3 of 4, the gang needs 2 more")
    assert plan.waiting["b-2"].code is WaitCode.LIMIT
    assert plan.waiting["b-2"].message == (
        "queue 'org' is at its limit: uses GPU 5 of 6, the gang needs 2 more")


def test_a_queue_borrows_idle_capacity_beyond_its_quota_up_to_its_limit():
    config = PolicyConfig(queues=[queue("a", quota="GPU=2", limit="GPU=6"),
                                     queue("b", quota="GPU=6")])
    pending = [gang(f"a-{i}", "2xGPU=1", queue="a", seq=i) for i in range(4)]
    plan = schedule(busy("w-1: GPU=8"), pending, config, 0.0)
    assert plan.admitted_ids == ["a-0", "a-1", "a-2"]  # 6 GPUs: 4 over quota, b's are idle
    assert plan.waiting["a-3"].code is WaitCode.LIMIT


def test_queues_are_served_in_order_of_their_share():
    # a already runs 4 GPUs; b runs nothing. Equal weights: b is furthest below its share
    # and goes first although a's gangs were submitted earlier and have higher priority.
    config = PolicyConfig(queues=[queue("a"), queue("b")])
    snapshot = busy("w-1: GPU=8", placed=[running("t1", "w-1: 4xGPU=1", queue="a")])
    pending = [
        gang("a-1", "2xGPU=1", queue="a", priority=100, seq=0),
        gang("b-1", "2xGPU=1", queue="b", priority=10, seq=1),
        gang("b-2", "2xGPU=1", queue="b", priority=10, seq=2),
    ]
    plan = schedule(snapshot, pending, config, 0.0)
    assert plan.admitted_ids == ["b-1", "b-2"]  # after b-1, b (2/4) is still below a (4/4)
    assert plan.waiting["a-1"].code is WaitCode.NO_FIT


def test_weights_divide_the_surplus():
    # 12 GPUs, nothing running, both queues want everything; weight 2:1 -> 8 and 4.
    config = PolicyConfig(queues=[queue("a", weight=2), queue("b")],
                             actions=("allocate",))
    pending = [gang(f"{q}-{i}", "GPU=1", queue=q, seq=i) for q in "ab" for i in range(12)]
    plan = schedule(busy("w-1: GPU=12"), pending, config, 0.0)
    admitted = plan.admitted_ids
    assert sum(g.startswith("a-") for g in admitted) == 8
    assert sum(g.startswith("b-") for g in admitted) == 4


def test_a_blocked_queue_does_not_block_other_queues():
    config = PolicyConfig(queues=[queue("a"), queue("b")], backfill_lookahead=0)  # strict FIFO
    pending = [
        gang("a-big", "4xGPU=1", "STRICT_PACK", queue="a", priority=100, seq=0),
        gang("a-small", "GPU=1", queue="a", seq=1),
        gang("b-small", "GPU=1", queue="b", seq=2),
    ]
    plan = schedule(busy("w-1: GPU=4 free GPU=2", "w-2: GPU=2"), pending, config, 0.0)
    assert plan.admitted_ids == ["b-small"]
    assert plan.waiting["a-small"].code is WaitCode.BEHIND
    assert "earlier in queue 'a'" in plan.waiting["a-small"].message


def test_queue_positions():
    config = PolicyConfig(queues=[queue("a"), queue("b")])
    pending = [
        gang("a-1", "8xGPU=1", queue="a", priority=10, seq=0),
        gang("a-2", "8xGPU=1", queue="a", priority=100, seq=1),
        gang("b-1", "8xGPU=1", queue="b", seq=2),
    ]
    plan = schedule(busy("w-1: GPU=8 free GPU=0"), pending, config, 0.0)
    assert dict(plan.positions) == {"a-2": 1, "a-1": 2, "b-1": 1}


def test_gangs_of_a_queue_removed_from_the_config_wait_with_the_reason():
    config = PolicyConfig(queues=[queue("a")])
    plan = schedule(busy("w-1: GPU=8"), [gang("g", "GPU=1", queue="gone")], config, 0.0)
    assert plan.waiting["g"].code is WaitCode.UNSCHEDULABLE
    assert plan.waiting["g"].message.startswith("queue: unknown queue 'gone'")


def test_a_queue_over_a_lowered_limit_in_one_resource_still_admits_gangs_not_using_it():
    # CPU limit lowered below what runs already; a GPU-only gang adds no CPU
    config = PolicyConfig(queues=[queue("a", limit="CPU=2 GPU=8")])
    snapshot = busy("w-1: GPU=8 CPU=16", placed=[running("t1", "w-1: 4xCPU=1", queue="a")])
    plan = schedule(snapshot, [gang("g", "2xGPU=1", queue="a"),
                               gang("h", "CPU=1", queue="a")], config, 0.0)
    assert plan.admitted_ids == ["g"]
    assert plan.waiting["h"].message == (
        "queue 'a' is at its limit: uses CPU 4 of 2, the gang needs 1 more")


def test_a_queue_may_keep_its_line_strict_while_others_go_on():
    # Kueue sets a queueing strategy per ClusterQueue; raygang a lookahead per queue.
    config = PolicyConfig(queues=[QueueSpec(name="a", backfill_lookahead=0), queue("b")])
    pending = [
        gang("a-big", "4xGPU=1", "STRICT_PACK", queue="a", priority=100, seq=0),
        gang("a-small", "GPU=1", queue="a", seq=1),
        gang("b-big", "4xGPU=1", "STRICT_PACK", queue="b", priority=100, seq=2),
        gang("b-small", "GPU=1", queue="b", seq=3),
    ]
    plan = schedule(busy("w-1: GPU=4 free GPU=2", "w-2: GPU=2"), pending, config, 0.0)
    assert plan.admitted_ids == ["b-small"]  # past b's blocked head (the default: 4 more)
    assert plan.waiting["a-small"].code is WaitCode.BEHIND
    assert "backfill is off" in plan.waiting["a-small"].message
    assert plan.waiting["b-big"].code is WaitCode.NO_FIT


@pytest.mark.parametrize("own", [0, 1])
def test_a_queues_own_line_wins_over_the_policys_backfill(own):
    # Before, `backfill: true` made every line unbounded and a queue's own
    # backfill_lookahead was ignored: a queue set strict was not. Two blocked heads in each
    # queue: a strict line stops at the first; a lookahead of 1 at the second; b goes on.
    config = PolicyConfig(backfill=True, queues=[QueueSpec(name="a", backfill_lookahead=own),
                                                 queue("b")])
    pending = [gang(name, "4xGPU=1", "STRICT_PACK", queue=name[0], priority=100, seq=k)
               for k, name in enumerate(("a-big0", "a-big1", "b-big0", "b-big1"))]
    pending += [gang("a-small", "GPU=1", queue="a", seq=4),
                gang("b-small", "GPU=1", queue="b", seq=5)]
    plan = schedule(busy("w-1: GPU=4 free GPU=2", "w-2: GPU=2"), pending, config, 0.0)
    assert plan.admitted_ids == ["b-small"]
    assert plan.waiting["a-small"].code is WaitCode.BEHIND
    assert plan.waiting["a-small"].behind == "a-big0"
    assert plan.waiting["b-big1"].code is WaitCode.NO_FIT
