"""What an action is, and what it may use of the cycle it runs in (see `core.actions`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from raygang.core.backlog import Line
from raygang.core.capacity import Capacity
from raygang.core.draining import Draining
from raygang.core.preemption.excess import Amounts
from raygang.core.fairshare import QueueBook
from raygang.core.gang import PendingGang
from raygang.core.plan import Growth
from raygang.core.plan import Preemption as Stop
from raygang.core.preemption.pool import Candidates, Pool
from raygang.core.preemption.trade import Gate
from raygang.core.queues import QueueTree
from raygang.core.resources import Resources
from raygang.core.snapshot import ClusterSnapshot, PlacedGang
from raygang.core.statement import Statement


class Preemption(Protocol):
    @property
    def reclaim_victim_order(self) -> str: ...

    @property
    def preempt_victim_order(self) -> str: ...

    @property
    def reclaim_trade_ratio(self) -> float | None: ...

    @property
    def reclaim_checkpoint_ratio(self) -> float | None: ...


class Policy(Protocol):  # read-only: a config.PolicyConfig is one
    @property
    def cross_queue_preemption(self) -> bool: ...

    @property
    def preemption(self) -> Preemption: ...  # config.PreemptionPolicy


class CycleState(Protocol):
    """The cycle as actions see it (`core.cycle.Cycle`)."""

    @property
    def config(self) -> Policy: ...

    snapshot: ClusterSnapshot
    pieces: list[PlacedGang]  # the placed gangs, elastic ones as minimum + surplus units
    surplus_queues: dict[str, int]  # queue -> surplus units its elastic gangs hold
    now: float
    book: QueueBook  # queue usage with this cycle's moves, and fair shares
    limited: dict[str, str]  # gang id -> the limit it hit (its reason)
    # (action, shape...) keys that did not fit: not tried again this cycle
    failed: set[tuple[object, ...]]
    taken_from: dict[str, Resources]  # queue -> what this cycle's victims held there
    memo: dict[str, object]  # what an action works out once per cycle

    def place(self, gang: PendingGang) -> tuple[str, ...] | None: ...

    def frees(self, victim: PlacedGang) -> Resources: ...

    def admit(self, gang: PendingGang, nodes: tuple[str, ...], action: str,
              victims: list[PlacedGang]) -> None: ...

    def pool(self, action: str, narrow: VictimFilter | None = None,
             key: str | None = None, young: bool = False) -> Pool: ...

    def search(self, gang: PendingGang, pool: Pool, candidates: Candidates, action: str,
               amounts: Amounts | None = None, gates: Sequence[Gate] = ()) -> bool: ...

    def lowest_priority(self) -> float: ...

    def empty_pool(self) -> Pool: ...

    def held_back(self, gang: PendingGang, action: str, delay: bool = True) -> bool: ...

    def delay_left(self, gang: PendingGang, action: str) -> float: ...

    def delay(self, gang: PendingGang, action: str, left: float) -> None: ...


class QueueTurns(Protocol):
    """Queues taking turns in fair-share order (`core.cycle`)."""

    def pick(self) -> str | None: ...

    def touched(self, queue: str) -> None: ...

    def done(self, queue: str) -> None: ...


class EverFits(Protocol):
    def fits(self, gang: PendingGang) -> bool: ...


class GrowingCycle(CycleState, Protocol):
    """What a pass over the running gangs (`Action.finish`: grow) uses of the cycle, once
    the pending gangs were offered."""

    @property
    def config(self) -> Policy: ...

    preemptions: list[Stop]
    grow_waits: dict[str, str]
    growths: list[Growth]
    tree: QueueTree
    left: dict[str, Line]
    admitted: set[str]
    capacity: Capacity
    draining: Draining
    statement: Statement  # its moves (grow's: `Statement.grow`)

    @property
    def ever(self) -> EverFits: ...

    def queue_order(self, queues: Sequence[str]) -> QueueTurns: ...

    def lookahead(self, queue: str) -> int | None: ...


# Which of the gangs any action may stop (preemptible, not draining, not protected, in the
# action's victim order) this action may stop: reclaim's gangs beyond their queue's share,
# shrink's surplus members.
VictimFilter = Callable[[CycleState, list[PlacedGang]], list[PlacedGang]]
# A rule on the victims each search of the action finds, for one pending gang, as its
# config sets it (None: not set): reclaim's checkpoint wait (`core.preemption.trade`).
GateRule = Callable[[CycleState, PendingGang], Gate | None]


@dataclass(frozen=True)
class Action:
    """One action, declared: how it tries a pending gang, and for one that stops running
    gangs, its rules as data (a baseline's variant is an `Action` with other values, see
    `raygang.sim.baselines`): its verb, its victim order and filter, the gates on the
    victims its searches find, and the `PolicyConfig.preemption` settings
    (`PreemptionPolicy`) that give its delay, minimum runtime and order."""

    name: str
    attempt: Callable[[CycleState, PendingGang], bool] | None
    # For actions that stop gangs: what a waiting gang's reason adds when the action found
    # nobody it may stop ("none") or stopping them would not make room ("some"), and why a
    # victim is stopped.
    no_room: dict[str, str] | None = None
    why: Callable[[PlacedGang, PendingGang], str] | None = None
    # A pass over the running gangs once the pending ones were offered (grow).
    finish: Callable[[GrowingCycle], None] | None = None
    # Whether its pass over the pending gangs would admit nobody and leave nothing behind
    # (shrink, with no surplus anywhere): then a cycle makes it only as its first pass.
    idle: Callable[[CycleState], bool] | None = None
    # What a stopped gang's status says happened to it ("preempted by ...").
    verb: str = "preempted"
    # Least important first: `core.preemption.victims.victim_key`'s order names; the
    # setting named by `order_key`, if any, chooses it instead.
    victim_order: str = "newest"
    order_key: str | None = None
    victim_filter: VictimFilter | None = None
    gates: tuple[GateRule, ...] = ()
    # The settings that give how long a gang must be pending before the action stops
    # others for it, and how long a gang must have run before the action may stop it.
    delay_key: str | None = None
    min_runtime_key: str | None = None

    def order(self, settings: object) -> str:
        """Its victim order under `settings` (a `PreemptionPolicy`)."""
        return str(getattr(settings, self.order_key)) if self.order_key else self.victim_order

    def delay_s(self, settings: object) -> float:
        return float(getattr(settings, self.delay_key)) if self.delay_key else 0.0

    def min_runtime_s(self, settings: object) -> float:
        return float(getattr(settings, self.min_runtime_key)) if self.min_runtime_key else 0.0
