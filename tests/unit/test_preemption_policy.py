"""The preemption policy's rules against churn and starvation (issue 16): a minimum
runtime before reclaim or preempt may stop a gang (KAI's minruntime plugin), the cheapest
victims first, and capacity held for a gang pending beyond sla_waiting_time_s (Volcano's
sla plugin). Each rule with its reason, and the config's errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from raygang.core import PolicyConfig, schedule

from tests.unit.builders import busy, gang, queue, running

TWO_NODES = ("w-1: GPU=4", "w-2: GPU=4")


def _teams(**preemption: object) -> PolicyConfig:
    return PolicyConfig(queues=[queue("team-a", quota="GPU=4"), queue("team-b", quota="GPU=4")],
                        preemption=preemption)


def _borrowed(since_new: float) -> object:
    """team-a runs 8 GPUs, 4 of them borrowed (a-new, started at `since_new`)."""
    return busy(*TWO_NODES, placed=[
        running("a-old", "w-1: 4xGPU=1", queue="team-a", since=0.0),
        running("a-new", "w-2: 4xGPU=1", queue="team-a", since=since_new),
    ])


B1 = [gang("b-1", "4xGPU=1", "STRICT_PACK", priority="training", queue="team-b")]


# Minimum runtime before reclaim (KAI reclaimMinRuntime) -----------------------------------
def test_reclaim_waits_until_the_borrowed_gang_ran_its_minimum_runtime():
    config = _teams(reclaim_min_runtime_s=600)
    young = schedule(_borrowed(since_new=1000.0), B1, config, 1300.0)
    assert young.preemptions == () and young.admissions == ()
    message = young.waiting["b-1"].message
    assert "1 more gang is protected by reclaim_min_runtime_s 600 s" in message
    assert "the first may be stopped in 300 s" in message
    old = schedule(_borrowed(since_new=1000.0), B1, config, 1600.0)
    assert [(p.victim, p.action) for p in old.preemptions] == [("a-new", "reclaim")]


def test_reclaim_min_runtime_zero_reclaims_at_once():
    plan = schedule(_borrowed(since_new=1000.0), B1, _teams(reclaim_min_runtime_s=0), 1001.0)
    assert [p.victim for p in plan.preemptions] == ["a-new"]


def test_the_default_protects_a_gang_that_just_started_from_reclaim():
    default = PolicyConfig().preemption.reclaim_min_runtime_s
    assert default > 0
    config = PolicyConfig(queues=[queue("team-a", quota="GPU=4"),
                                  queue("team-b", quota="GPU=4")])
    assert schedule(_borrowed(since_new=1000.0), B1, config, 1000.0 + default / 2
                    ).preemptions == ()
    assert schedule(_borrowed(since_new=1000.0), B1, config, 1000.0 + default
                    ).preemptions != ()


def test_a_gang_not_yet_running_is_not_reclaimed_under_a_minimum_runtime():
    snapshot = busy(*TWO_NODES, placed=[
        running("a-old", "w-1: 4xGPU=1", queue="team-a", since=0.0),
        running("a-starting", "w-2: 4xGPU=1", queue="team-a", since=None),
    ])
    plan = schedule(snapshot, B1, _teams(reclaim_min_runtime_s=60), 5000.0)
    assert plan.preemptions == ()


def test_reclaim_min_runtime_does_not_hold_back_preemption_by_inference():
    config = _teams(reclaim_min_runtime_s=3600)
    snapshot = busy(*TWO_NODES, placed=[
        running("t-1", "w-1: 4xGPU=1", queue="team-a", since=100.0),
        running("t-2", "w-2: 4xGPU=1", queue="team-b", since=100.0),
    ])
    infer = [gang("svc", "4xGPU=1", "STRICT_PACK", priority="inference", queue="team-b")]
    plan = schedule(snapshot, infer, config, 110.0)
    assert [p.action for p in plan.preemptions] == ["preempt"]


def test_preempt_min_runtime_protects_from_preemption_and_says_so():
    config = _teams(preempt_min_runtime_s=600)
    snapshot = busy(*TWO_NODES, placed=[
        running("t-1", "w-1: 4xGPU=1", queue="team-b", since=100.0),
        running("t-2", "w-2: 4xGPU=1", queue="team-b", since=100.0),
    ])
    infer = [gang("svc", "4xGPU=1", "STRICT_PACK", priority="inference", queue="team-b")]
    plan = schedule(snapshot, infer, config, 400.0)
    assert plan.preemptions == ()
    assert "2 more gangs are protected by preempt_min_runtime_s 600 s" in \
        plan.waiting["svc"].message
    assert [p.victim for p in schedule(snapshot, infer, config, 700.0).preemptions] == ["t-1"]


# Victim order ----------------------------------------------------------------------------
def _mixed() -> object:
    """team-a borrows 5 GPUs beyond its quota of 4: a 4-GPU gang started last, and a
    1-GPU gang started before it."""
    return busy("w-1: GPU=4", "w-2: GPU=4", "w-3: GPU=4", placed=[
        running("a-in", "w-1: 4xGPU=1", queue="team-a", since=0.0),
        running("a-small", "w-2: GPU=1", queue="team-a", since=100.0),
        running("a-big", "w-3: 4xGPU=1", queue="team-a", since=200.0),
        running("b-in", "w-2: 3xGPU=1", queue="team-b", since=0.0),
    ])


ONE_GPU = [gang("b-2", "GPU=1", priority="training", queue="team-b")]


def test_cheapest_first_takes_the_small_gang_a_one_gpu_gang_needs():
    plan = schedule(_mixed(), ONE_GPU, _teams(reclaim_min_runtime_s=0), 5000.0)
    assert [p.victim for p in plan.preemptions] == ["a-small"]


def test_newest_first_takes_the_gang_started_last_whatever_its_size():
    config = _teams(reclaim_min_runtime_s=0, reclaim_victim_order="newest")
    plan = schedule(_mixed(), ONE_GPU, config, 5000.0)
    assert [p.victim for p in plan.preemptions] == ["a-big"]


def test_cheapest_first_takes_the_gang_started_last_among_equal_sizes():
    snapshot = busy("w-1: GPU=4", "w-2: GPU=4", placed=[
        running("a-in", "w-1: 4xGPU=1", queue="team-a", since=0.0),
        running("a-1", "w-2: 2xGPU=1", queue="team-a", since=100.0),
        running("a-2", "w-2: 2xGPU=1", queue="team-a", since=200.0),
    ])
    plan = schedule(snapshot, [gang("b", "2xGPU=1", priority="training", queue="team-b")],
                    _teams(reclaim_min_runtime_s=0), 5000.0)
    assert [p.victim for p in plan.preemptions] == ["a-2"]


# Capacity held for a gang pending beyond sla_waiting_time_s (Volcano sla) -----------------
def _waiting_big(sla: float | None, since: float = 0.0):
    """Two nodes of 4 GPUs, each with 2 GPUs running and 2 free; a 2-node gang pending
    since `since`, and a small gang of another queue that would take free GPUs."""
    config = PolicyConfig(queues=[queue("big", quota="GPU=4"), queue("small", quota="GPU=4")],
                          sla_waiting_time_s=sla, backfill=True)
    snapshot = busy("w-1: GPU=4", "w-2: GPU=4", "w-3: GPU=4", placed=[
        running("s-1", "w-1: 2xGPU=1", queue="small", since=0.0),
        running("s-2", "w-2: 2xGPU=1", queue="small", since=0.0),
        running("s-3", "w-3: 3xGPU=1", queue="small", since=0.0),
    ])
    pending = [gang("big-1", "2xGPU=4", "STRICT_SPREAD", priority="training",
                    queue="big", since=since),
               gang("small-1", "2xGPU=1", priority="training", queue="small", since=7000.0)]
    return snapshot, pending, config


def test_without_an_sla_small_gangs_take_what_frees_before_a_large_one_fits():
    snapshot, pending, config = _waiting_big(sla=None)
    plan = schedule(snapshot, pending, config, 7200.0)
    assert plan.admitted_ids == ["small-1"]


def test_a_gang_pending_beyond_the_sla_has_the_free_gpus_of_its_nodes_held():
    snapshot, pending, config = _waiting_big(sla=3600.0)
    plan = schedule(snapshot, pending, config, 7200.0)
    assert plan.admissions == ()
    mine = plan.waiting["big-1"].message
    assert "pending 2.0 h, beyond sla_waiting_time_s 3600 s" in mine
    assert "what frees on nodes w-1, w-2 is held for it (4 of the 8 GPU" in mine
    theirs = plan.waiting["small-1"].message
    assert "held for gang big-1, pending beyond sla_waiting_time_s 3600 s" in theirs


def test_before_the_sla_nothing_is_held():
    snapshot, pending, config = _waiting_big(sla=3600.0, since=5000.0)
    assert schedule(snapshot, pending, config, 7200.0).admitted_ids == ["small-1"]


def test_the_held_gang_starts_once_its_nodes_have_room():
    _, pending, config = _waiting_big(sla=3600.0)
    snapshot = busy("w-1: GPU=4", "w-2: GPU=4", "w-3: GPU=4", placed=[
        running("s-2", "w-2: 2xGPU=1", queue="small", since=0.0),
        running("s-3", "w-3: 3xGPU=1", queue="small", since=0.0)])
    plan = schedule(snapshot, pending, config, 7200.0)
    assert plan.admissions == ()  # w-1 is free, w-2 half: the small gang may not take w-2
    snapshot = busy("w-1: GPU=4", "w-2: GPU=4", "w-3: GPU=4", placed=[
        running("s-3", "w-3: 3xGPU=1", queue="small", since=0.0)])
    plan = schedule(snapshot, pending, config, 7200.0)
    assert plan.admitted_ids[0] == "big-1"
    assert set(plan.admissions[0].nodes) == {"w-1", "w-2"}


def test_the_longest_pending_is_elected_and_only_one():
    config = PolicyConfig(queues=[queue("a", quota="GPU=4"), queue("b", quota="GPU=4")],
                          sla_waiting_time_s=60.0)
    snapshot = busy("w-1: GPU=4", "w-2: GPU=4", placed=[
        running("x", "w-1: 3xGPU=1", queue="a", since=0.0),
        running("y", "w-2: 3xGPU=1", queue="b", since=0.0)])
    pending = [gang("a-big", "4xGPU=1", "STRICT_PACK", priority="training", queue="a",
                    since=200.0),
               gang("b-big", "4xGPU=1", "STRICT_PACK", priority="training", queue="b",
                    since=100.0)]
    plan = schedule(snapshot, pending, config, 1000.0)
    assert "held for it" in plan.waiting["b-big"].message
    assert "held for gang b-big" in plan.waiting["a-big"].message


@pytest.mark.parametrize("max_holds", [1, 2, 3])
def test_up_to_sla_max_holds_heads_are_held_for_longest_pending_first_on_nodes_of_their_own(
        max_holds):
    config = PolicyConfig(queues=[queue(q, quota="GPU=4") for q in "abc"],
                          sla_waiting_time_s=60.0, sla_max_holds=max_holds)
    snapshot = busy("w-1: GPU=4", "w-2: GPU=4", placed=[
        running("x", "w-1: 3xGPU=1", queue="a", since=0.0),
        running("y", "w-2: 3xGPU=1", queue="b", since=0.0)])
    pending = [gang("a-big", "4xGPU=1", "STRICT_PACK", priority="training", queue="a",
                    since=200.0),
               gang("b-big", "4xGPU=1", "STRICT_PACK", priority="training", queue="b",
                    since=100.0),
               gang("c-1", "1xGPU=1", priority="training", queue="c", since=990.0)]  # not late
    plan = schedule(snapshot, pending, config, 1000.0)
    held = {g: plan.waiting[g].message.split("what frees on node ")[1].split(" ")[0]
            for g in ("a-big", "b-big") if "held for it" in plan.waiting[g].message}
    assert list(held) == ["a-big", "b-big"][2 - min(max_holds, 2):]  # b-big waited longest
    assert len(set(held.values())) == len(held)  # each on a node of its own
    # c-1 takes the one free GPU that no hold keeps; with two holds there is none
    assert plan.admitted_ids == ([] if max_holds > 1 else ["c-1"])
    if max_holds > 1:
        assert "held for gang a-big" in plan.waiting["c-1"].message
        assert "held for gang b-big" in plan.waiting["c-1"].message


def _wide_only(min_nodes: int, wide_first: bool):
    """The queue `big` pending since 0 with a one-node gang and a two-node one (in that
    line order unless `wide_first`); the hold is for gangs of at least `min_nodes` nodes."""
    config = PolicyConfig(queues=[queue("big", quota="GPU=4"), queue("small", quota="GPU=4")],
                          sla_waiting_time_s=3600.0, sla_min_nodes=min_nodes, backfill=True)
    snapshot, pending, _ = _waiting_big(sla=3600.0)
    narrow = gang("big-0", "4xGPU=1", "STRICT_PACK", priority="training", queue="big",
                  since=0.0)
    wide = pending[0]
    line = [wide, narrow] if wide_first else [narrow, wide]
    return snapshot, [*line, pending[1]], config


@pytest.mark.parametrize("wide_first", [True, False])
def test_a_hold_for_wide_gangs_elects_the_first_wide_gang_of_a_line(wide_first):
    snapshot, pending, config = _wide_only(min_nodes=2, wide_first=wide_first)
    plan = schedule(snapshot, pending, config, 7200.0)
    assert "held for it" in plan.waiting["big-1"].message  # two 4-GPU nodes: wide
    assert "small-1" not in plan.admitted_ids


def test_a_hold_for_gangs_wider_than_any_waiting_holds_nothing():
    snapshot, pending, config = _wide_only(min_nodes=3, wide_first=True)
    plan = schedule(snapshot, pending, config, 7200.0)
    assert "small-1" in plan.admitted_ids  # as without a hold
    assert "held" not in plan.waiting["big-1"].message


# Config ----------------------------------------------------------------------------------
@pytest.mark.parametrize("data, words", [
    ({"sla_min_nodes": 0}, "sla_min_nodes"),
    ({"sla_max_holds": 0}, "sla_max_holds"),
    ({"preemption": {"reclaim_min_runtime_s": -1}}, "reclaim_min_runtime_s"),
    ({"preemption": {"reclaim_victim_order": "oldest"}}, "reclaim_victim_order"),
    ({"preemption": {"preempt_victim_order": "cheap"}}, "preempt_victim_order"),
    ({"preemption": {"min_runtime": 5}}, "min_runtime"),
    ({"sla_waiting_time_s": 0}, "sla_waiting_time_s"),
])
def test_bad_preemption_settings_are_named(data, words):
    with pytest.raises(ValidationError, match=words):
        PolicyConfig.model_validate(data)


# Delay before a pending gang may stop others (KAI preemptionDelay) -----------------------
def _b1(since: float | None):
    return [gang("b-1", "4xGPU=1", "STRICT_PACK", priority="training", queue="team-b",
                 since=since)]


def test_a_gang_reclaims_only_once_pending_its_reclaim_delay():
    config = _teams(reclaim_min_runtime_s=0, reclaim_delay_s=300)
    early = schedule(_borrowed(since_new=10.0), _b1(since=1000.0), config, 1100.0)
    assert early.preemptions == ()
    assert "it may reclaim once pending reclaim_delay_s 300 s (in 200 s)" in \
        early.waiting["b-1"].message
    late = schedule(_borrowed(since_new=10.0), _b1(since=1000.0), config, 1300.0)
    assert [p.victim for p in late.preemptions] == ["a-new"]


def test_the_reclaim_delay_does_not_hold_back_inference():
    config = _teams(reclaim_min_runtime_s=0, reclaim_delay_s=3600)
    snapshot = busy(*TWO_NODES, placed=[
        running("t-1", "w-1: 4xGPU=1", queue="team-a", since=0.0),
        running("t-2", "w-2: 4xGPU=1", queue="team-b", since=0.0)])
    infer = [gang("svc", "4xGPU=1", "STRICT_PACK", priority="inference", queue="team-b",
                  since=1000.0)]
    assert [p.action for p in schedule(snapshot, infer, config, 1001.0).preemptions] == \
        ["preempt"]


def test_preempt_delay_holds_back_preemption():
    config = _teams(preempt_delay_s=60)
    snapshot = busy(*TWO_NODES, placed=[
        running("t-1", "w-1: 4xGPU=1", queue="team-b", since=0.0),
        running("t-2", "w-2: 4xGPU=1", queue="team-b", since=0.0)])
    infer = [gang("svc", "4xGPU=1", "STRICT_PACK", priority="inference", queue="team-b",
                  since=1000.0)]
    plan = schedule(snapshot, infer, config, 1030.0)
    assert plan.preemptions == ()
    assert "it may preempt once pending preempt_delay_s 60 s (in 30 s)" in \
        plan.waiting["svc"].message
    assert schedule(snapshot, infer, config, 1060.0).preemptions != ()


def _checkpointing() -> object:
    """team-a runs 3 GPUs, 2 of them beyond its share once team-b asks for 2 more: two
    1-GPU gangs that save every 600 s; at t=1350 a-early has 50 s unsaved, a-late (started
    later) 250 s."""
    return busy("w-1: GPU=4", placed=[
        running("a-keep", "w-1: GPU=1", queue="team-a", since=0.0),
        running("a-early", "w-1: GPU=1", queue="team-a", since=100.0, checkpoint_s=600.0),
        running("a-late", "w-1: GPU=1", queue="team-a", since=500.0, checkpoint_s=600.0),
        running("b-in", "w-1: GPU=1", queue="team-b", since=0.0)])


def _ab(**preemption: object) -> PolicyConfig:
    return PolicyConfig(queues=[queue("team-a", quota="GPU=0"), queue("team-b", quota="GPU=4")],
                        preemption={"reclaim_min_runtime_s": 0, **preemption})


def test_cheapest_first_takes_the_gang_with_the_least_work_since_its_checkpoint():
    b = [gang(f"b-{i}", "GPU=1", priority="training", queue="team-b", seq=i) for i in (1, 2)]
    plan = schedule(_checkpointing(), b, _ab(), 1350.0)
    assert [(p.preemptor, p.victim) for p in plan.preemptions] == [
        ("b-1", "a-early"), ("b-2", "a-late")]  # the first loses 50 s, not 250 s
    newest = schedule(_checkpointing(), b, _ab(reclaim_victim_order="newest"), 1350.0)
    assert [p.victim for p in newest.preemptions] == ["a-late", "a-early"]


def test_unsaved_work_counts_from_the_last_checkpoint_or_the_start():
    placed = running("g", "w-1: GPU=1", since=100.0, checkpoint_s=600.0)
    assert placed.unsaved_s(100.0 + 1250.0) == 50.0
    assert running("h", "w-1: GPU=1", since=100.0).unsaved_s(1350.0) == 1250.0
    assert running("s", "w-1: GPU=1", since=None).unsaved_s(1350.0) == 0.0


def _closest_by_brute_force(g, cap):
    """Node by node: for each bundle (largest first), the node missing least (then the
    lowest id) whose total holds it with what it got already (distinct for STRICT_SPREAD)."""
    from raygang.core.placement import largest_first
    from raygang.core.resources import Resources
    names, assigned, out = cap.resource_names, {}, [None] * len(g.bundles)
    for i in largest_first(g.bundles, cap):
        b, best = g.bundles[i], None
        for n in cap.node_ids:
            mine = assigned.get(n, Resources())
            if (g.strategy.value == "STRICT_SPREAD" and n in assigned) or \
                    not (mine + b).fits_in(cap.total(n)):
                continue
            free = cap.free(n) - mine
            key = (tuple(max(0, b.units(r) - max(0, free.units(r))) for r in names), n)
            best = key if best is None or key < best else best
        if best is None:
            return None
        assigned[best[1]] = assigned.get(best[1], Resources()) + b
        out[i] = (best[1], b)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_the_nodes_held_are_the_closest_node_by_node(seed):
    import random

    from raygang.core.reserve import closest_nodes
    from tests.unit.builders import capacity
    rng = random.Random(seed)
    lines = [f"w-{i:02d}: GPU={rng.choice([4, 8])} CPU=16 free GPU={rng.randint(0, 4)} "
             f"CPU={rng.randint(0, 16)}" for i in range(rng.randint(1, 12))]
    cap = capacity(*lines)
    shape = f"{rng.randint(1, 4)}xGPU={rng.choice([1, 2, 4])},CPU={rng.choice([0, 2])}"
    g = gang("g", shape, rng.choice(["PACK", "SPREAD", "STRICT_SPREAD"]))
    assert closest_nodes(g, cap) == _closest_by_brute_force(g, cap)


def test_cheapest_counts_gpu_seconds_a_large_gang_that_just_saved_goes_first():
    # team-a runs 9 GPUs, 1 beyond its share of 8: a 4-GPU gang 10 s after its checkpoint
    # (40 GPU-s unsaved) and a 1-GPU gang 500 s after its start (500 GPU-s). The share
    # keeps the one whose stop would lose more, so the 4-GPU gang is reclaimed (either
    # would make room for b-1). Counting size first, the share would keep the 4-GPU gang
    # and the 1-GPU gang would lose its 500 s.
    snapshot = busy("w-1: GPU=4", "w-2: GPU=4", "w-3: GPU=4", placed=[
        running("a-in", "w-1: 4xGPU=1", queue="team-a", since=0.0),
        running("a-big", "w-2: 4xGPU=1", queue="team-a", since=3390.0 - 1200.0,
                checkpoint_s=600.0),
        running("a-small", "w-3: GPU=1", queue="team-a", since=2900.0)])
    config = PolicyConfig(queues=[queue("team-a", quota="GPU=4"),
                                  queue("team-b", quota="GPU=8")],
                          preemption={"reclaim_min_runtime_s": 0, "reclaim_delay_s": 0})
    b = [gang("b-1", "4xGPU=1", "STRICT_PACK", priority="training", queue="team-b")]
    plan = schedule(snapshot, b, config, 3400.0)
    assert [p.victim for p in plan.preemptions] == ["a-big"]
