"""A gate is a rule on the victims a search found, the cheapest (core.preemption.trade
`Gate`): it may refuse them, and say until when. An action declares the gates of its
searches (`Action.gates`, as reclaim declares its checkpoint wait), so a new rule of this
kind is configuration: here preempt with a maintenance window of its own, no subclass of
the cycle. The cycle remembers a refusal for the gangs of its kind (and decides with it as
a new search would), tells it in their reasons, and looks again when the window ends."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable
from typing import ClassVar

from raygang.core import PolicyConfig, schedule
from raygang.core.actions import ACTIONS
from raygang.core.actions import preempt
from raygang.core.gang import PendingGang
from raygang.core.preemption.check import check
from raygang.core.preemption.trade import Refusal
from raygang.core.snapshot import PlacedGang

from tests.unit.builders import busy, gang, queue, running

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


def _borrowed(seed: int):
    """Queue a runs beyond its quota on every node, its gangs saving every 10 or 30 min;
    gangs of b and c wait, each with one of its kind behind it; both of reclaim's gates
    at random ratios, its delay and minimum runtime on or off."""
    rng = random.Random(seed)
    nodes = [f"w-{i}: GPU={rng.choice([4, 8])}" for i in range(rng.randint(2, 5))]
    placed = []
    for i, line in enumerate(nodes):
        left = int(line.split("GPU=")[1])
        while left:
            n = min(left, rng.choice([1, 2, 4]))
            placed.append(running(f"a-{i}-{left}", f"w-{i}: {n}xGPU=1", queue="a",
                                  since=rng.uniform(0, 4800),
                                  checkpoint_s=rng.choice([600.0, 1800.0, None])))
            left -= n
    pending = []
    for g in range(rng.randint(1, 4)):
        q, shape = rng.choice(["b", "c"]), f"{rng.choice([1, 2, 4])}xGPU=1"
        since = rng.uniform(600, 5000)  # the second pending longer: it is tried too
        pending += [gang(f"{q}-{g}-{k}", shape, queue=q, priority="training", seq=2 * g + k,
                         since=since - rng.choice([0, 60]) * k) for k in range(2)]
    pick = rng.choice
    config = PolicyConfig(
        queues=[queue("a", quota="GPU=2"), queue("b", quota=f"GPU={pick([4, 8])}"),
                queue("c", quota=f"GPU={pick([4, 8])}")],
        preemption={"reclaim_delay_s": pick([0.0, 300.0]),
                    "reclaim_min_runtime_s": pick([0.0, 900.0]),
                    "reclaim_victim_order": pick(["cheapest", "newest"]),
                    "reclaim_trade_ratio": pick([None, 0.5, 1.0, 4.0]),
                    "reclaim_checkpoint_ratio": pick([None, 0.5, 1.0, 4.0])},
        sla_waiting_time_s=None)
    return busy(*nodes, placed=placed), pending, config


SEEDS = range(300)


def test_a_remembered_refusal_decides_as_a_new_search_would(monkeypatch):
    """The cycle refuses a gang of a kind a gate refused without searching again
    (`Gate.again`). In random scenarios of reclaim with both its gates, and every pending
    gang there twice (a gang of its kind behind it), the plans are those of a cycle that
    searches every time, and sound."""
    from raygang.core.preemption import trade

    remembered: list[bool] = []
    for gate in (trade.Trade, trade.CheckpointWait):
        again = gate.again
        monkeypatch.setattr(gate, "again", lambda self, refused, again=again:
                            remembered.append(again(self, refused)) or remembered[-1])
    plans = [schedule(*_borrowed(seed), 5000.0) for seed in SEEDS]
    assert sum(remembered) >= 10  # the memo was used
    for gate in (trade.Trade, trade.CheckpointWait):
        monkeypatch.setattr(gate, "again", lambda self, refused: False)
    for seed, plan in zip(SEEDS, plans, strict=True):
        snapshot, pending, config = _borrowed(seed)
        assert schedule(snapshot, pending, config, 5000.0) == plan, f"seed {seed}"
        check(plan, snapshot, pending, config)
