"""Reclaim by what it trades (issue 30, `PreemptionPolicy.reclaim_trade_ratio`): the wait
a reclaim ends (the gang's pending seconds x its queue's GPUs below quota) against the work
it throws away (the victims' GPUs x their seconds since a checkpoint or their start). The
rule as a table, then cycles where it makes a reclaim the fixed delay or minimum runtime
would not, and where it does not."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from raygang.core import PolicyConfig, schedule
from raygang.core.config import PreemptionPolicy
from raygang.core.preemption.check import check
from raygang.core.preemption.trade import stop_loss, trade, waiting_cost

from tests.unit.builders import busy, gang, queue, res, running

GPU = 10_000  # units of one GPU (core.resources.UNIT): costs and losses are in units


# The rule ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "waited, quota, used, victim_since, checkpoint, ratio, worth", [
        # waited 600 s, 4 GPUs below quota: 2,400 GPU-s; a 4-GPU victim 300 s in: 1,200
        (600, 8, 4, 700, None, 1.0, True),
        (600, 8, 4, 700, None, 2.0, True),  # 2,400 >= 2 x 1,200: equal is enough
        (600, 8, 4, 700, None, 3.0, False),
        (600, 8, 4, 0, None, 1.0, False),  # 1,000 s unsaved: 4,000 GPU-s lost
        (600, 8, 4, 0, 900, 1.0, True),  # saved at 900 s: 100 s unsaved, 400 GPU-s
        (600, 8, 8, 700, None, 1.0, False),  # at its quota: its wait costs nothing
        (600, 8, 12, 700, None, 1.0, False),  # beyond it
        (0, 8, 0, 700, None, 1.0, False),  # not waited at all
        (600, 8, 4, None, None, 1.0, True),  # a victim not yet running loses nothing
        (600, 8, 4, 1000, None, 100.0, True),  # nor one that has just started
    ])
def test_a_reclaim_is_worth_it_when_the_wait_costs_ratio_times_the_loss(
        waited, quota, used, victim_since, checkpoint, ratio, worth):
    now = 1000.0
    pending = gang("b-1", "4xGPU=1", queue="team-b", since=now - waited)
    victim = running("a-1", "w-1: 4xGPU=1", queue="team-a", since=victim_since,
                     checkpoint_s=checkpoint)
    deal = trade(pending, res(f"GPU={quota}"), res(f"GPU={used}"), ratio, now)
    assert deal.cost == waited * max(0, quota - used) * GPU
    assert deal.worth([victim]) is worth


def test_the_loss_adds_up_over_victims_in_the_gangs_scarcest_resource():
    now = 1000.0
    victims = [running("a-1", "w-1: 2xGPU=1,CPU=8", since=900.0),
               running("a-2", "w-2: CPU=4", since=0.0)]  # no GPU: loses no GPU-seconds
    assert stop_loss(victims, "GPU", now) == 2 * 100 * GPU
    assert stop_loss(victims, "CPU", now) == (16 * 100 + 4 * 1000) * GPU
    pending = gang("b-1", "CPU=2", since=0.0)  # no GPU: counted in CPUs
    assert waiting_cost(pending, res("CPU=10"), res("CPU=4"), now) == 1000 * 6 * GPU


@pytest.mark.parametrize("field", ["reclaim_trade_ratio", "reclaim_checkpoint_ratio"])
def test_the_ratio_is_positive_or_null_with_a_clear_error(field):
    assert getattr(PreemptionPolicy(), field) == {"reclaim_trade_ratio": 0.5,
                                                  "reclaim_checkpoint_ratio": 2.0}[field]
    assert getattr(PreemptionPolicy(**{field: 2}), field) == 2.0
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValidationError, match=f"{field} must be a positive number .* "
                                                  "or null"):
            PreemptionPolicy(**{field: bad})


# In a cycle ----------------------------------------------------------------------------
TWO_NODES = ("w-1: GPU=4", "w-2: GPU=4")


def _teams(**preemption: object) -> PolicyConfig:
    return PolicyConfig(queues=[queue("team-a", quota="GPU=4"), queue("team-b", quota="GPU=4")],
                        preemption=preemption)


def _borrowed(since_new: float, checkpoint: float | None = None):
    """team-a runs 8 GPUs, 4 of them borrowed (a-new, started at `since_new`)."""
    return busy(*TWO_NODES, placed=[
        running("a-old", "w-1: 4xGPU=1", queue="team-a", since=0.0),
        running("a-new", "w-2: 4xGPU=1", queue="team-a", since=since_new,
                checkpoint_s=checkpoint),
    ])


def _b1(since: float):
    return [gang("b-1", "4xGPU=1", "STRICT_PACK", priority="training", queue="team-b",
                 since=since)]


def _plan(snapshot, pending, config, now):
    plan = schedule(snapshot, pending, config, now)
    check(plan, snapshot, pending, config)  # sound, and every young victim traded for
    return plan


def test_a_long_wait_reclaims_a_gang_younger_than_the_minimum_runtime():
    # b-1 has waited 1,300 s for the 4 GPUs of its quota (5,200 GPU-s); a-new, 300 s in,
    # would lose 1,200 GPU-s. The fixed rule waits 600 s more for a-new's 900 s.
    fixed = _teams(reclaim_min_runtime_s=900, reclaim_delay_s=0, reclaim_trade_ratio=None)
    assert _plan(_borrowed(1000.0), _b1(0.0), fixed, 1300.0).preemptions == ()
    traded = _teams(reclaim_min_runtime_s=900, reclaim_delay_s=0, reclaim_trade_ratio=4)
    plan = _plan(_borrowed(1000.0), _b1(0.0), traded, 1300.0)
    assert [(p.victim, p.action) for p in plan.preemptions] == [("a-new", "reclaim")]
    assert [a.gang_id for a in plan.admissions] == ["b-1"]


def test_a_short_wait_does_not_pay_for_the_young_gangs_work():
    traded = _teams(reclaim_min_runtime_s=900, reclaim_delay_s=0, reclaim_trade_ratio=1)
    # waited 200 s: 800 GPU-s against a-new's 1,200
    plan = _plan(_borrowed(1000.0), _b1(1100.0), traded, 1300.0)
    assert plan.preemptions == () and plan.admissions == ()
    assert "protected by reclaim_min_runtime_s 900 s" in plan.waiting["b-1"].message
    # 5 times the loss asked: 1,300 s of wait (5,200 GPU-s) is not 5 x 1,200 either
    five = _teams(reclaim_min_runtime_s=900, reclaim_delay_s=0, reclaim_trade_ratio=5)
    assert _plan(_borrowed(1000.0), _b1(0.0), five, 1300.0).preemptions == ()


def test_a_victim_that_just_saved_is_reclaimed_before_the_delay():
    # a-new saves every 600 s: at 1,300 s it would lose 100 s (400 GPU-s); b-1 pending
    # 100 s (400 GPU-s) is worth it at ratio 1 though the delay asks for 300 s.
    fixed = _teams(reclaim_min_runtime_s=0, reclaim_delay_s=300, reclaim_trade_ratio=None)
    plan = _plan(_borrowed(0.0, checkpoint=600.0), _b1(1200.0), fixed, 1300.0)
    assert plan.preemptions == ()
    assert "reclaim_delay_s" in plan.waiting["b-1"].message
    traded = _teams(reclaim_min_runtime_s=0, reclaim_delay_s=300, reclaim_trade_ratio=1)
    plan = _plan(_borrowed(0.0, checkpoint=600.0), _b1(1200.0), traded, 1300.0)
    assert [p.victim for p in plan.preemptions] == ["a-new"]
    # At ratio 2 it is not: the delay holds it, and its reason says so.
    twice = _teams(reclaim_min_runtime_s=0, reclaim_delay_s=300, reclaim_trade_ratio=2)
    plan = _plan(_borrowed(0.0, checkpoint=600.0), _b1(1200.0), twice, 1300.0)
    assert plan.preemptions == ()
    assert "reclaim_delay_s" in plan.waiting["b-1"].message


def test_the_trade_decides_the_same_twice_and_leaves_old_victims_to_the_fixed_rule():
    traded = _teams(reclaim_min_runtime_s=900, reclaim_delay_s=0, reclaim_trade_ratio=4)
    first = _plan(_borrowed(1000.0), _b1(0.0), traded, 1300.0)
    assert first == _plan(_borrowed(1000.0), _b1(0.0), traded, 1300.0)
    # Past the minimum runtime and the delay, the fixed rule reclaims whatever it loses:
    # the trade only lets reclaims go earlier, it never holds one back.
    # (b-1 waited 1 s: 4 GPU-s, against 4 x 5,000 GPU-s either victim would lose)
    old = _plan(_borrowed(0.0), _b1(4999.0), traded, 5000.0)
    assert [p.action for p in old.preemptions] == ["reclaim"]
