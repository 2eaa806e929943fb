"""Reclaim by what it trades (`PreemptionPolicy.reclaim_trade_ratio`, issue 30).

The fixed protections (KAI's `preemptionDelay` and `reclaimMinRuntime`) hold a reclaim
back for a set time whatever it would save or cost. This rule lets a reclaim go ahead
before they have passed when the wait it ends costs more than the work it throws away:

- the cost of not reclaiming: how long the gang has been pending, times how far its queue
  is below its quota, in units of the gang's scarcest resource (GPU-seconds of guarantee
  the queue has gone without);
- the loss a reclaim causes: each victim's units of that resource times its work since
  its last checkpoint, or since its start (`PlacedGang.unsaved_s`).

A reclaim is worth it when cost > 0 and cost >= ratio x loss. Pure: everything it reads is
the cycle's state at the search, and `now`.

The other way round (`PreemptionPolicy.reclaim_checkpoint_ratio`, `CheckpointWait`): a
reclaim past those protections waits for its victims' next checkpoint when the work it
would throw away now is more than the ratio times what that wait costs.

Both are gates (`Gate`): rules on the victims a search found, the cheapest, that may refuse
them. A gate does not filter the candidates: the search would then take other gangs, which
may lose more. An action declares the gates of all its searches (`Action.gates`: the
checkpoint wait); a search may add its own (reclaim's trade, on its second search).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar, Protocol

from raygang.core.gang import PendingGang
from raygang.core.resources import Resources, scarcity_key
from raygang.core.snapshot import PlacedGang


def scarcest(total: Resources) -> str | None:
    """The resource a gang's trade is counted in: its scarcest (GPU first)."""
    return min(total, key=scarcity_key, default=None)


def below_quota(quota: Resources, usage: Resources, name: str) -> int:
    """A queue's units of `name` below its quota (negative: beyond it)."""
    return quota.units(name) - usage.units(name)


def waiting_cost(gang: PendingGang, quota: Resources, usage: Resources, now: float) -> float:
    """Unit-seconds the gang's queue has gone without: the gang's pending seconds times
    its queue's units below its quota (0 when not below it, or not pending)."""
    name = scarcest(gang.total)
    if name is None or gang.pending_since is None:
        return 0.0
    return max(0.0, now - gang.pending_since) * max(0, below_quota(quota, usage, name))


def stop_loss(victims: Iterable[PlacedGang], name: str | None, now: float) -> float:
    """Unit-seconds the victims' stop throws away: their units of `name` times their work
    since their last checkpoint or start."""
    if name is None:
        return 0.0
    return sum(v.total.units(name) * v.unsaved_s(now) for v in victims)


@dataclass(frozen=True)
class Refusal:
    """A gate's no to the victims found. `cost`: what the refused gang's wait cost (a
    gang of its kind whose wait costs no more is refused alike, `Gate.again`); `until`:
    when the victims may go by the clock alone (None: no such time), and `why`, what the
    waiting gang's reason says of it."""

    cost: float = 0.0
    until: float | None = None
    why: str = ""


class Gate(Protocol):
    """A rule on the victims a search found (see the module)."""

    @property
    def name(self) -> str: ...  # keys what a search it gates remembers

    @property
    def instead_of_delay(self) -> bool: ...  # the action's delay does not hold it back

    def refuse(self, victims: Iterable[PlacedGang]) -> Refusal | None: ...

    def again(self, refused: Refusal) -> bool:
        """Whether the gang is refused as a gang of its kind was, without a search (the
        capacity and the running gangs as they were then)."""
        ...


@dataclass(frozen=True)
class Trade:
    """One pending gang's side of the trade, worked out before its victims are known: a
    gate on a search the action's delay and minimum runtime do not hold back (reclaim's
    second), whose failure its first search's reason tells."""

    cost: float  # `waiting_cost`
    resource: str | None  # what the loss is counted in
    ratio: float  # `PreemptionPolicy.reclaim_trade_ratio`
    now: float
    name: ClassVar[str] = "trade"
    instead_of_delay: ClassVar[bool] = True

    def worth(self, victims: Iterable[PlacedGang]) -> bool:
        """Whether stopping `victims` costs less than the wait it ends."""
        return self.cost > 0 and self.cost >= self.ratio * stop_loss(victims, self.resource,
                                                                     self.now)

    def refuse(self, victims: Iterable[PlacedGang]) -> Refusal | None:
        return None if self.worth(victims) else Refusal(cost=self.cost)

    def again(self, refused: Refusal) -> bool:
        return self.cost <= refused.cost  # its wait is worth no more


def trade(gang: PendingGang, quota: Resources, usage: Resources, ratio: float,
          now: float) -> Trade:
    return Trade(waiting_cost(gang, quota, usage, now), scarcest(gang.total), ratio, now)


@dataclass(frozen=True)
class CheckpointWait:
    """Whether a victim may go for a claimant now, or is better stopped after its next
    checkpoint (`PreemptionPolicy.reclaim_checkpoint_ratio`). Stopping it now throws away
    its units times its seconds since its last checkpoint; waiting for its next one
    throws away nothing, and leaves `claimant` units of the claimant's queue's guarantee
    unused for the seconds until then. A victim that does not checkpoint only loses more
    by waiting, and an elastic gang's surplus member loses nothing of its work: they may
    go. The wait is bounded by one checkpoint interval, and lifts when it passes."""

    resource: str | None  # the claimant's scarcest
    claimant: int  # units of it a wait leaves unused (`core.actions.reclaim`)
    ratio: float
    now: float
    name: ClassVar[str] = "checkpoint"
    instead_of_delay: ClassVar[bool] = False

    def __call__(self, victim: PlacedGang) -> bool:
        every, name = victim.checkpoint_s, self.resource
        if not every or name is None or victim.of is not None:
            return True
        unsaved = victim.unsaved_s(self.now)
        return victim.total.units(name) * unsaved <= self.ratio * self.claimant * (
            every - unsaved)

    def until(self, victim: PlacedGang) -> float:
        """When a victim refused now may go: at its next checkpoint."""
        every = victim.checkpoint_s or 0.0
        return self.now + every - victim.unsaved_s(self.now)

    def refuse(self, victims: Iterable[PlacedGang]) -> Refusal | None:
        until = [self.until(v) for v in victims if not self(v)]
        return Refusal(until=min(until), why=CHECKPOINT_NOTE) if until else None

    def again(self, refused: Refusal) -> bool:
        return True  # the same victims, at the same checkpoints


CHECKPOINT_NOTE = ("the gangs it would reclaim lose less at their next checkpoint than now "
                   "(reclaim_checkpoint_ratio)")
