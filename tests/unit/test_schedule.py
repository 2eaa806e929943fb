"""schedule(): order, admission, backfill, and a reason with numbers for every waiting gang."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from raygang.core import Admission, PlacedGang, Plan, PolicyConfig, WaitCode, schedule

from tests.unit.builders import assignment, cluster, gang, gangs, res


@dataclass(frozen=True)
class Case:
    name: str
    nodes: tuple[str, ...]
    gangs: tuple[tuple, ...]  # (id, shape, strategy[, priority]); seq follows row order
    admitted: dict[str, str]  # gang id -> node per bundle (builders.assignment), in plan order
    waiting: dict[str, tuple[WaitCode, tuple[str, ...]]] = field(default_factory=dict)
    backfill: bool = False
    lookahead: int = 0  # PolicyConfig.backfill_lookahead


NO_FIT, BEHIND, UNSCHEDULABLE = WaitCode.NO_FIT, WaitCode.BEHIND, WaitCode.UNSCHEDULABLE
# A cluster where a 3-GPU STRICT_PACK gang would fit if empty but does not fit now.
HALF_FULL = ("w-1: GPU=4 free GPU=2", "w-2: GPU=4 free GPU=2")

CASES = [
    Case(
        "all-fit-admitted-in-order",
        ("w-1: GPU=8 CPU=16", "w-2: GPU=8 CPU=16"),
        (
            ("a", "4xGPU=1", "PACK"),
            ("b", "4xGPU=1", "STRICT_PACK"),
            ("c", "2xGPU=1", "SPREAD"),  # w-1 has no GPU left: shares w-2
            ("d", "CPU=4", "STRICT_SPREAD"),  # CPU work goes where no GPU is free
        ),
        {"a": "4*w-1", "b": "4*w-1", "c": "w-2 w-2", "d": "w-1"},
    ),
    Case(
        "higher-priority-first-when-scarce",
        ("w-1: GPU=4",),
        (("low", "4xGPU=1", "PACK", 10), ("high", "4xGPU=1", "PACK", 100)),
        {"high": "4*w-1"},
        {"low": (NO_FIT, ("needs {GPU: 4} in all", "free in the cluster is GPU 0",
                          "1 node with none"))},
    ),
    Case(
        "priority-class-names",
        ("w-1: GPU=4",),
        (("batch", "4xGPU=1", "PACK", "batch"), ("serve", "4xGPU=1", "PACK", "inference"),
         ("train", "4xGPU=1", "PACK", "training")),
        {"serve": "4*w-1"},
        {"train": (NO_FIT, ("free in the cluster is GPU 0",)),
         "batch": (BEHIND, ("behind gang train (priority 100",))},
    ),
    Case(
        "earlier-submission-first",
        ("w-1: GPU=4",),
        (("first", "4xGPU=1", "PACK"), ("second", "4xGPU=1", "PACK")),
        {"first": "4*w-1"},
        {"second": (NO_FIT, ("free in the cluster is GPU 0",))},
    ),
    Case(
        "backfill-off-blocked-gang-holds-back-the-rest",
        HALF_FULL,
        (
            ("early", "GPU=1", "PACK", 100),
            ("big", "3xGPU=1", "STRICT_PACK", 50),
            ("small", "GPU=1", "PACK", 10),
            ("tiny", "GPU=0.5", "SPREAD", 10),
        ),
        {"early": "w-1"},
        {
            "big": (NO_FIT, ("needs {GPU: 3} on one node (STRICT_PACK, 3×{GPU: 1})",
                             "largest free GPU on one node is 2 (node w-2)")),
            "small": (BEHIND, ("waiting behind gang big (priority 50", "backfill is off",
                               "largest free GPU on one node is 2 (node w-2)")),
            "tiny": (BEHIND, ("waiting behind gang big",)),
        },
    ),
    Case(
        "backfill-on-smaller-later-gangs-admitted",
        HALF_FULL,
        (
            ("early", "GPU=1", "PACK", 100),
            ("big", "3xGPU=1", "STRICT_PACK", 50),
            ("small", "GPU=1", "PACK", 10),
            ("tiny", "GPU=0.5", "SPREAD", 10),
        ),
        {"early": "w-1", "small": "w-1", "tiny": "w-2"},
        {"big": (NO_FIT, ("largest free GPU on one node is 1.5 (node w-2)",))},
        backfill=True,
    ),
    Case(
        "blocker-reason-names-lowest-node-on-a-tie",
        HALF_FULL,
        (("big", "3xGPU=1", "STRICT_PACK"), ("small", "GPU=1", "PACK")),
        {},
        {"big": (NO_FIT, ("largest free GPU on one node is 2 (node w-1)",)),
         "small": (BEHIND, ("behind gang big",))},
    ),
    Case(
        "unschedulable-gang-does-not-block",
        ("w-1: GPU=8 dead", "w-2: GPU=4"),
        (("huge", "8xGPU=1", "STRICT_PACK", 100), ("ok", "4xGPU=1", "PACK", 0)),
        {"ok": "4*w-2"},
        {"huge": (UNSCHEDULABLE, ("cannot fit on the cluster as it is now, even empty",
                                  "needs {GPU: 8} on one node",
                                  "largest free GPU on one node is 4 (node w-2)"))},
    ),
    Case(
        "strict-spread-wider-than-the-cluster",
        ("w-1: GPU=8", "w-2: GPU=8", "w-3: GPU=8"),
        (("wide", "4xGPU=1", "STRICT_SPREAD"), ("ok", "3xGPU=1", "STRICT_SPREAD")),
        {"ok": "w-1 w-2 w-3"},
        {"wide": (UNSCHEDULABLE, ("needs 4 distinct nodes", "only 3 nodes can hold {GPU: 1}"))},
    ),
    Case(
        "strict-spread-not-enough-free-nodes-now",
        ("w-1: GPU=4", "w-2: GPU=4", "w-3: GPU=4 free GPU=0"),
        (("ring", "3xGPU=1", "STRICT_SPREAD"),),
        {},
        {"ring": (NO_FIT, ("needs 3 distinct nodes (STRICT_SPREAD, 3×{GPU: 1})",
                           "only 2 nodes can hold {GPU: 1}: w-1, w-2"))},
    ),
    Case(
        "pack-short-in-the-whole-cluster",
        ("w-1: GPU=4 free GPU=1", "w-2: GPU=4 free GPU=1", "w-3: CPU=8"),
        (("job", "4xGPU=1", "PACK"),),
        {},
        {"job": (NO_FIT, ("needs {GPU: 4} in all (PACK, 4×{GPU: 1})",
                          "free in the cluster is GPU 2 (w-1: 1, w-2: 1, 1 node with none)"))},
    ),
    Case(
        "spread-short-in-the-whole-cluster",
        ("w-1: GPU=4 free GPU=1", "w-2: GPU=4 free GPU=2"),
        (("job", "4xGPU=1", "SPREAD"),),
        {},
        {"job": (NO_FIT, ("free in the cluster is GPU 3 (w-2: 2, w-1: 1)",))},
    ),
    Case(
        "pack-fragmented",
        ("w-1: GPU=4 free GPU=3", "w-2: GPU=4 free GPU=1"),
        (("job", "2xGPU=2", "PACK"),),
        {},
        {"job": (NO_FIT, ("fragmented across nodes", "GPU free (w-1: 3, w-2: 1)"))},
    ),
    Case(
        "pack-bundle-fits-on-no-node",
        ("w-1: GPU=4 free GPU=2", "w-2: GPU=4 free GPU=2", "w-3: GPU=4 free GPU=2"),
        (("job", "2xGPU=3", "PACK"),),
        {},
        {"job": (NO_FIT, ("bundle {GPU: 3} fits on no node",
                          "largest free GPU on one node is 2 (node w-1)"))},
    ),
    Case(
        "unknown-resource",
        ("w-1: GPU=4 CPU=8",),
        (("tpu", "TPU=4", "PACK"), ("ok", "GPU=1", "PACK")),
        {"ok": "w-1"},
        {"tpu": (UNSCHEDULABLE, ("needs resource 'TPU', which no alive node has",))},
    ),
    Case(
        "cpu-is-the-missing-resource",
        ("w-1: GPU=4 CPU=8 free CPU=1",),
        (("job", "GPU=1,CPU=2", "STRICT_PACK"),),
        {},
        {"job": (NO_FIT, ("largest free CPU on one node is 1 (node w-1)",))},
    ),
    Case(
        "no-node-has-all-at-once",
        ("w-1: GPU=4 CPU=8 free CPU=0", "w-2: GPU=4 CPU=8 free GPU=0"),
        (("job", "GPU=1,CPU=1", "STRICT_PACK"),),
        {},
        {"job": (NO_FIT, ("no node has all of it free at once",))},
    ),
    Case(
        "same-failed-shape-twice-backfill-on",
        ("w-1: GPU=4", "w-2: GPU=4 free GPU=2"),
        (("a", "8xGPU=1", "PACK", 10), ("b", "4xGPU=1", "PACK", 5),
         ("c", "8xGPU=1", "PACK", 1), ("d", "2xGPU=1", "STRICT_PACK", 1)),
        {"b": "4*w-1", "d": "w-2 w-2"},
        {"a": (NO_FIT, ("needs {GPU: 8} in all", "free in the cluster is GPU 0")),
         "c": (NO_FIT, ("needs {GPU: 8} in all", "free in the cluster is GPU 0"))},
        backfill=True,
    ),
    Case(
        "lookahead-sets-aside-two-then-the-rest-waits-behind-the-first",
        HALF_FULL,
        (
            ("early", "GPU=1", "PACK", 100),
            ("big", "3xGPU=1", "STRICT_PACK", 50),
            ("twin", "3xGPU=1", "STRICT_PACK", 50),  # like big: set aside without a try
            ("small", "GPU=1", "PACK", 10),
            ("wide", "2xGPU=2", "STRICT_PACK", 10),  # the third not admitted: the line stops
            ("tiny", "GPU=0.5", "SPREAD", 10),
        ),
        {"early": "w-1", "small": "w-1"},
        {"big": (NO_FIT, ("needs {GPU: 3} on one node",)),
         "twin": (NO_FIT, ("waiting as gang big does (the same shape and priority",
                           "needs {GPU: 3} on one node")),
         "wide": (NO_FIT, ("needs {GPU: 4} on one node",)),
         "tiny": (BEHIND, ("waiting behind gang big (priority 50",
                           "a cycle passes it and at most 2 more of its line"))},
        lookahead=2,
    ),
    Case(
        "lookahead-one-the-twin-uses-it-up",
        HALF_FULL,
        (("big", "3xGPU=1", "STRICT_PACK", 50), ("twin", "3xGPU=1", "STRICT_PACK", 50),
         ("small", "GPU=1", "PACK", 10)),
        {},
        {"big": (NO_FIT, ("needs {GPU: 3} on one node",)),
         "twin": (NO_FIT, ("waiting as gang big does",)),
         "small": (BEHIND, ("a cycle passes it and at most 1 more of its line",))},
        lookahead=1,
    ),
    Case(
        "lookahead-a-twin-of-another-priority-is-tried",
        ("w-1: GPU=4 free GPU=2",),
        (("big", "3xGPU=1", "STRICT_PACK", 50), ("low", "3xGPU=1", "STRICT_PACK", 10),
         ("small", "GPU=2", "PACK", 10)),
        {"small": "w-1"},
        {"big": (NO_FIT, ("needs {GPU: 3} on one node",)),
         "low": (NO_FIT, ("needs {GPU: 3} on one node",))},
        lookahead=2,
    ),
    Case(
        "admitted-before-the-blocker-stay-admitted",
        ("w-1: GPU=8",),
        (("a", "4xGPU=1", "PACK", 10), ("b", "8xGPU=1", "PACK", 5), ("c", "GPU=1", "PACK", 1)),
        {"a": "4*w-1"},
        {"b": (NO_FIT, ("free in the cluster is GPU 4",)), "c": (BEHIND, ("behind gang b",))},
    ),
]


def _run(case: Case, order: list[int] | None = None) -> Plan:
    pending = gangs(*case.gangs)
    if order is not None:
        pending = [pending[i] for i in order]
    config = PolicyConfig(backfill=case.backfill, backfill_lookahead=case.lookahead)
    return schedule(cluster(*case.nodes), pending, config, 7.5)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
def test_schedule(case: Case):
    plan = _run(case)
    assert plan.admissions == tuple(
        Admission(gang_id, assignment(nodes)) for gang_id, nodes in case.admitted.items()
    )
    assert plan.at == 7.5
    assert sorted(plan.waiting) == sorted(case.waiting)
    for gang_id, (code, words) in case.waiting.items():
        waiting = plan.waiting[gang_id]
        assert waiting.gang_id == gang_id
        assert waiting.code is code, waiting.message
        for word in words:
            assert word in waiting.message, waiting.message
    # every gang is decided exactly once
    ids = [row[0] for row in case.gangs]
    assert sorted(plan.admitted_ids + list(plan.waiting)) == sorted(ids)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
def test_schedule_ignores_input_order(case: Case):
    expected = _run(case)
    for seed in range(4):
        order = list(range(len(case.gangs)))
        random.Random(seed).shuffle(order)
        assert _run(case, order) == expected


def test_total_order_priority_then_seq_then_id():
    pending = [
        gang("e", "GPU=1", priority=5, seq=1),
        gang("d", "GPU=1", priority=5, seq=0),
        gang("b", "GPU=1", priority=7, seq=3),
        gang("c", "GPU=1", priority=0, seq=2),
        gang("a", "GPU=1", priority=0, seq=2),
        gang("f", "GPU=1", priority=-1, seq=0),
    ]
    plan = schedule(cluster("w-1: GPU=8"), pending, PolicyConfig(), 0.0)
    assert plan.admitted_ids == ["b", "d", "e", "a", "c", "f"]
    assert [g.gang_id for g in sorted(pending, key=lambda g: g.order_key())] == plan.admitted_ids


def test_scarce_capacity_goes_by_the_total_order():
    pending = [
        gang("a", "2xGPU=1", priority=0, seq=0),
        gang("b", "2xGPU=1", priority=1, seq=5),
        gang("c", "2xGPU=1", priority=1, seq=4),
        gang("d", "2xGPU=1", priority=1, seq=4),
    ]
    plan = schedule(cluster("w-1: GPU=4"), pending, PolicyConfig(backfill=True), 0.0)
    assert plan.admitted_ids == ["c", "d"]
    assert {g: w.code for g, w in plan.waiting.items()} == {"b": NO_FIT, "a": NO_FIT}


def test_empty_inputs():
    assert schedule(cluster("w-1: GPU=1"), [], PolicyConfig(), 1.0) == Plan(at=1.0)
    plan = schedule(cluster(), [gang("g", "GPU=1")], PolicyConfig(), 0.0)
    assert plan.admissions == ()
    assert plan.waiting["g"].code is UNSCHEDULABLE
    assert "no alive node" in plan.waiting["g"].message


def test_all_nodes_dead():
    plan = schedule(cluster("w-1: GPU=8 dead"), [gang("g", "GPU=1")], PolicyConfig(), 0.0)
    assert plan.waiting["g"].code is UNSCHEDULABLE


def test_placed_gangs_in_the_snapshot_are_not_scheduled_again():
    # `free` already excludes what running gangs hold; `placed` is information only.
    running = PlacedGang("run", 100, (("w-1", res("GPU=4")),))
    snapshot = cluster("w-1: GPU=8 free GPU=4", placed=[running])
    plan = schedule(snapshot, [gang("g", "8xGPU=1")], PolicyConfig(), 0.0)
    assert plan.waiting["g"].code is NO_FIT
    plan = schedule(snapshot, [gang("g", "4xGPU=1")], PolicyConfig(), 0.0)
    assert plan.admitted_ids == ["g"]


def test_schedule_does_not_change_its_inputs():
    snapshot = cluster("w-1: GPU=4", "w-2: GPU=4 free GPU=1")
    pending = [gang("a", "4xGPU=1"), gang("b", "GPU=1")]
    before = (snapshot, list(pending))
    first = schedule(snapshot, pending, PolicyConfig(), 0.0)
    assert (snapshot, pending) == before
    assert snapshot.node("w-1").free == snapshot.node("w-1").total
    assert schedule(snapshot, pending, PolicyConfig(), 0.0) == first


def test_plan_is_read_only():
    plan = schedule(cluster("w-1: GPU=1"), [gang("a", "2xGPU=1")], PolicyConfig(), 0.0)
    with pytest.raises(TypeError):
        plan.waiting["x"] = None  # type: ignore[index]


def test_a_gang_that_can_never_fit_says_so_even_behind_a_blocker():
    snapshot = cluster("w-1: GPU=4 free GPU=1", "w-2: GPU=4 free GPU=1")
    pending = gangs(("blocked", "4xGPU=1", "STRICT_PACK"), ("never", "5xGPU=1", "STRICT_PACK"))
    plan = schedule(snapshot, pending, PolicyConfig(), 0.0)
    assert plan.waiting["blocked"].code is WaitCode.NO_FIT
    assert plan.waiting["never"].code is WaitCode.UNSCHEDULABLE
    assert "even empty" in plan.waiting["never"].message
