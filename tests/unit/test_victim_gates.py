"""A gate is a rule on the victims a search found, the cheapest (core.preemption.trade
`Gate`): it may refuse them, and say until when. An action declares the gates of its
searches (`Action.gates`, as reclaim declares its checkpoint wait), so a new rule of this
kind is configuration: here preempt with a maintenance window of its own, no subclass of
the cycle. The cycle remembers a refusal for the gangs of its kind, tells it in their
reasons, and looks again when the window ends."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import ClassVar

from raygang.core import PolicyConfig, schedule
from raygang.core.actions import ACTIONS
from raygang.core.actions import preempt
from raygang.core.gang import PendingGang
from raygang.core.preemption.trade import Refusal
from raygang.core.snapshot import PlacedGang

from tests.unit.builders import busy, gang, running

OPENS = 1000.0


@dataclasses.dataclass
class Window:
    """No gang of `queue` is stopped before `OPENS`."""

    queue: str
    now: float
    asked: list[list[str]]  # the victims each refusal looked at
    name: ClassVar[str] = "window"
    instead_of_delay: ClassVar[bool] = False

    def refuse(self, victims: Iterable[PlacedGang]) -> Refusal | None:
        victims = list(victims)
        self.asked.append([v.gang_id for v in victims])
        if self.now < OPENS and any(v.queue == self.queue for v in victims):
            return Refusal(until=OPENS, why=f"{self.queue}'s gangs are in their window")
        return None

    def again(self, refused: Refusal) -> bool:
        return True


def _plan(now: float, asked: list[list[str]]):
    def window(cycle: object, gang: PendingGang) -> Window | None:
        return None if gang.priority < 50 else Window("default", now, asked)

    actions = {**ACTIONS, "preempt": dataclasses.replace(preempt.ACTION, gates=(window,))}
    cluster = busy("w-1: GPU=4", "w-2: GPU=4", placed=[
        running("low-1", "w-1: 4xGPU=1", priority=0),
        running("low-2", "w-2: 4xGPU=1", priority=0, since=100.0)])
    pending = [gang(f"urgent-{i}", "4xGPU=1", "STRICT_PACK", priority=60, since=0.0)
               for i in range(2)] + [gang("mid", "2xGPU=1", priority=30, since=0.0)]
    return schedule(cluster, pending, PolicyConfig(), now, actions=actions)


def test_a_gate_an_action_declares_holds_its_victims_until_it_opens():
    asked: list[list[str]] = []
    plan = _plan(600.0, asked)
    # The cheapest victim found (the newest, low-2) is refused, and no other is taken
    # instead; the second urgent gang, of the same kind, is refused without a search.
    assert asked == [["low-2"]]
    for gang_id in ("urgent-0", "urgent-1"):
        assert ("default's gangs are in their window: it may preempt in 400 s"
                in plan.waiting[gang_id].message)
    assert plan.steady_until <= OPENS  # the loop looks again by then
    # A gang the rule does not gate (its config gives none) stops a gang as before.
    assert [(p.victim, p.preemptor) for p in plan.preemptions] == [("low-2", "mid")]
    assert [a.gang_id for a in plan.admissions] == ["mid"]


def test_once_the_gate_opens_the_same_victims_go():
    asked: list[list[str]] = []
    plan = _plan(OPENS, asked)
    assert [(p.victim, p.action) for p in plan.preemptions] == [("low-2", "preempt"),
                                                                ("low-1", "preempt")]
    assert sorted(a.gang_id for a in plan.admissions) == ["urgent-0", "urgent-1"]
    assert asked == [["low-2"], ["low-1"]]
