"""Actions are declarations (core.actions.action.Action): a rule is other values of an
action, handed to the cycle, never a subclass of it (issue 30, point 4)."""

from __future__ import annotations

import dataclasses

from raygang.core import PolicyConfig
from raygang.core.actions import ACTIONS, preempt, reclaim
from raygang.core.backlog import Backlog
from raygang.core.config import PreemptionPolicy
from raygang.core.cycle import Cycle
from raygang.sim.baselines import kai

from tests.unit.builders import busy, gang, running

NOW = 100.0


def test_a_new_victim_order_is_an_action_with_another_value():
    # Same priority: preempt takes the newest (b, started last); a variant of preempt that
    # declares the cheapest order takes a, whose stop loses 90 GPU-s against b's 200.
    snapshot = busy("w-1: GPU=5", placed=[
        running("a", "w-1: GPU=1", priority=10, since=10.0),
        running("b", "w-1: 4xGPU=1", priority=10, since=50.0)])
    pending = [gang("p", "1xGPU=1", priority=100, seq=0)]
    config = PolicyConfig()

    def victims(actions: dict[str, object], config: PolicyConfig = config) -> list[str]:
        plan = Cycle(snapshot, config, NOW, actions).run(Backlog.of(pending))  # type: ignore[arg-type]
        assert [a.gang_id for a in plan.admissions] == ["p"]
        return [p.victim for p in plan.preemptions]

    assert victims(ACTIONS) == ["b"]
    cheapest = dataclasses.replace(preempt.ACTION, victim_order="cheapest", order_key=None)
    assert victims({**ACTIONS, "preempt": cheapest}) == ["a"]
    # The product's own preempt reads its order from the settings it names.
    assert victims(ACTIONS, PolicyConfig(preemption={"preempt_victim_order": "cheapest"})) \
        == ["a"]


def test_an_action_reads_its_delay_and_minimum_runtime_from_the_settings_it_names():
    settings = PreemptionPolicy(reclaim_delay_s=7.0, reclaim_min_runtime_s=8.0,
                                preempt_delay_s=9.0, preempt_min_runtime_s=10.0,
                                reclaim_victim_order="newest")
    assert (ACTIONS["reclaim"].delay_s(settings), ACTIONS["reclaim"].min_runtime_s(settings),
            ACTIONS["reclaim"].order(settings)) == (7.0, 8.0, "newest")
    assert (ACTIONS["preempt"].delay_s(settings), ACTIONS["preempt"].min_runtime_s(settings),
            ACTIONS["preempt"].order(settings)) == (9.0, 10.0, "newest")
    assert ACTIONS["preempt"].order(PreemptionPolicy(preempt_victim_order="cheapest")) \
        == "cheapest"
    assert (ACTIONS["shrink"].delay_s(settings), ACTIONS["shrink"].min_runtime_s(settings)) \
        == (0.0, 0.0)
    assert settings.delay_s("reclaim") == 7.0 and settings.min_runtime_s("allocate") == 0.0
    assert [ACTIONS[n].verb for n in ("reclaim", "preempt")] == ["reclaimed", "preempted"]


def test_the_kai_baseline_is_the_core_actions_with_another_reclaim_protection():
    changed = {name for name, action in kai.ACTIONS.items() if action is not ACTIONS[name]}
    assert changed == {"reclaim"}
    theirs, ours = kai.ACTIONS["reclaim"], ACTIONS["reclaim"]
    assert theirs.victim_filter is not ours.victim_filter
    assert dataclasses.replace(theirs, victim_filter=None) == dataclasses.replace(
        ours, victim_filter=None)
    assert set(reclaim.PROTECTIONS) == {"quota or fair share", "quota"}
