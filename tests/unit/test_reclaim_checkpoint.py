"""Reclaim waits for a victim's next checkpoint when that costs less (issue 30,
`PreemptionPolicy.reclaim_checkpoint_ratio`): stopping a gang now throws away its GPUs x
its seconds since its last checkpoint; waiting for its next one throws away nothing and
leaves the GPUs its queue is below its quota (at least the claimant's) unused for the seconds
until then. The rule as a table, then cycles where it holds a reclaim back, lets it go, and
says why the gang waits."""

from __future__ import annotations

import pytest

from raygang.core import PolicyConfig, schedule
from raygang.core.preemption.check import check
from raygang.core.preemption.trade import CheckpointWait

from tests.unit.builders import busy, gang, queue, res, running


# The rule ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "unused, victim, since, checkpoint, ratio, now, ready", [
        # a 4-GPU victim saving every 1,800 s, a wait leaving 2 GPUs unused: 4u <= 2 (1800 - u)
        ("GPU=2", "4xGPU=1", 0.0, 1800.0, 1.0, 600.0, True),  # u 600: 2,400 <= 2,400
        ("GPU=2", "4xGPU=1", 0.0, 1800.0, 1.0, 601.0, False),
        ("GPU=2", "4xGPU=1", 0.0, 1800.0, 1.0, 1799.0, False),
        ("GPU=2", "4xGPU=1", 0.0, 1800.0, 1.0, 1800.0, True),  # it has just saved
        ("GPU=2", "4xGPU=1", 0.0, 1800.0, 2.0, 900.0, True),  # 3,600 <= 2 x 1,800
        ("GPU=2", "4xGPU=1", 0.0, 1800.0, 0.5, 400.0, False),  # 1,600 > 0.5 x 2,800
        # as many GPUs unused as the victim holds: it waits only past half its interval
        ("GPU=4", "4xGPU=1", 0.0, 1800.0, 1.0, 900.0, True),
        ("GPU=4", "4xGPU=1", 0.0, 1800.0, 1.0, 901.0, False),
        ("GPU=2", "4xGPU=1", 0.0, None, 1.0, 1799.0, True),  # no checkpoint: waiting loses more
        ("GPU=2", "4xGPU=1", None, 1800.0, 1.0, 1000.0, True),  # not running: loses nothing
        ("CPU=2", "CPU=8", 0.0, 1800.0, 1.0, 601.0, False),  # counted in CPUs without GPUs
        ("CPU=2", "4xGPU=1", 0.0, 1800.0, 1.0, 601.0, True),  # it holds no CPU: loses none
    ])
def test_a_victim_waits_for_its_checkpoint_when_its_loss_exceeds_ratio_times_the_wait(
        unused, victim, since, checkpoint, ratio, now, ready):
    name = "GPU" if "GPU" in unused else "CPU"
    wait = CheckpointWait(name, res(unused).units(name), ratio, now)
    placed = running("a-1", f"w-1: {victim}", queue="team-a", since=since,
                     checkpoint_s=checkpoint)
    assert wait(placed) is ready
    if not ready:
        assert wait.until(placed) == (since or 0.0) + checkpoint * (now // checkpoint + 1)


# In a cycle ----------------------------------------------------------------------------
def _teams(ratio: float | None) -> PolicyConfig:
    return PolicyConfig(queues=[queue("team-a", quota="GPU=4"), queue("team-b", quota="GPU=4")],
                        preemption={"reclaim_checkpoint_ratio": ratio})


def _borrowed():
    """team-a runs 8 GPUs on two nodes, 4 of them borrowed: a-new, saving every 1,800 s."""
    return busy("w-1: GPU=4", "w-2: GPU=4", placed=[
        running("a-old", "w-1: 4xGPU=1", queue="team-a", since=0.0),
        running("a-new", "w-2: 4xGPU=1", queue="team-a", since=100.0, checkpoint_s=1800.0),
    ])


def _plan(config: PolicyConfig, now: float):
    pending = [gang("b-1", "2xGPU=1", "STRICT_PACK", priority="training", queue="team-b",
                    since=0.0)]
    plan = schedule(_borrowed(), pending, config, now)
    check(plan, _borrowed(), pending, config)
    return plan


def test_a_victim_far_from_its_checkpoint_is_left_to_it():
    # At 1,300 s a-new has 1,200 s unsaved on 4 GPUs (4,800 GPU-s); a wait for its
    # checkpoint at 1,900 s leaves team-b's 4 GPUs below its quota unused for 600 s
    # (2,400): the fixed rule stops it anyway.
    plan = _plan(_teams(None), 1300.0)
    assert [(p.victim, p.action) for p in plan.preemptions] == [("a-new", "reclaim")]
    plan = _plan(_teams(1.0), 1300.0)
    # Nor does it stop a-old instead, which would lose more (4 GPUs x 1,300 s, no
    # checkpoint): the wait is for the victims the search found, the cheapest.
    assert plan.preemptions == () and plan.admissions == ()
    assert ("the gangs it would reclaim lose less at their next checkpoint than now "
            "(reclaim_checkpoint_ratio): it may reclaim in 600 s") in plan.waiting["b-1"].message
    assert plan.steady_until <= 1900.0  # the loop looks again by then
    # Twice the wait's cost allowed: 4,800 <= 2 x 2,400, it goes now.
    assert [p.victim for p in _plan(_teams(2.0), 1300.0).preemptions] == ["a-new"]


def test_right_after_its_checkpoint_the_victim_goes():
    # At 1,950 s a-new saved 50 s ago: 200 GPU-s against a wait of 4 x 1,750.
    plan = _plan(_teams(1.0), 1950.0)
    assert [(p.victim, p.action) for p in plan.preemptions] == [("a-new", "reclaim")]
    assert [a.gang_id for a in plan.admissions] == ["b-1"]
    assert plan == _plan(_teams(1.0), 1950.0)  # and decides the same twice


def test_the_check_refuses_a_reclaim_the_ratio_forbids():
    # The plan the fixed rule made, read under the ratio: its victim should have waited.
    plan = _plan(_teams(None), 1300.0)
    with pytest.raises(AssertionError):
        check(plan, _borrowed(), [gang("b-1", "2xGPU=1", "STRICT_PACK", priority="training",
                                       queue="team-b", since=0.0)], _teams(0.5))


def test_by_default_a_reclaim_waits_when_it_would_lose_more_than_twice_the_wait():
    # The default ratio is 2 (issue 30, 2026-12-03: docs/simulator.md). At 1,400 s a-new
    # has 1,300 s unsaved on 4 GPUs (5,200 GPU-s) against 2 x 4 GPUs x 500 s (4,000) to its
    # checkpoint at 1,900 s: b-1 waits for it. At 1,300 s (4,800 against 4,800) it goes.
    config = PolicyConfig(queues=[queue("team-a", quota="GPU=4"),
                                  queue("team-b", quota="GPU=4")])
    assert config.preemption.reclaim_checkpoint_ratio == 2.0
    waiting = _plan(config, 1400.0)
    assert waiting.preemptions == () and waiting.admissions == ()
    assert "(reclaim_checkpoint_ratio): it may reclaim in 500 s" in waiting.waiting["b-1"].message
    assert [p.victim for p in _plan(config, 1300.0).preemptions] == ["a-new"]
    # A gang that declares no checkpoint interval is never waited for: with neither of
    # team-a's gangs declaring one, the reclaim goes at 1,400 s.
    only_old = busy("w-1: GPU=4", "w-2: GPU=4", placed=[
        running("a-old", "w-1: 4xGPU=1", queue="team-a", since=0.0),
        running("a-x", "w-2: 4xGPU=1", queue="team-a", since=100.0)])
    pending = [gang("b-1", "2xGPU=1", "STRICT_PACK", priority="training", queue="team-b",
                    since=0.0)]
    assert len(schedule(only_old, pending, config, 1400.0).preemptions) == 1
