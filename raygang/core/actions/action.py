"""What an action is, and what it may use of the cycle it runs in (see `core.actions`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from raygang.core.excess import Amounts
from raygang.core.fairshare import QueueBook
from raygang.core.gang import PendingGang
from raygang.core.pool import Candidates, Pool
from raygang.core.resources import Resources
from raygang.core.snapshot import ClusterSnapshot, PlacedGang


class Preemption(Protocol):
    reclaim_victim_order: str


class Policy(Protocol):
    cross_queue_preemption: bool
    preemption: Preemption  # config.PreemptionPolicy


class CycleState(Protocol):
    """The cycle as actions see it (`core.cycle.Cycle`)."""

    config: Policy
    snapshot: ClusterSnapshot
    pieces: list[PlacedGang]  # the placed gangs, elastic ones as minimum + surplus units
    surplus_queues: dict[str, int]  # queue -> surplus units its elastic gangs hold
    now: float
    book: QueueBook  # queue usage with this cycle's moves, and fair shares
    limited: dict[str, str]  # gang id -> the limit it hit (its reason)
    failed: set  # (action, shape...) keys that did not fit: not tried again this cycle
    taken_from: dict[str, Resources]  # queue -> what this cycle's victims held there
    memo: dict[str, object]  # what an action works out once per cycle

    def place(self, gang: PendingGang) -> tuple[str, ...] | None: ...

    def frees(self, victim: PlacedGang) -> Resources: ...

    def reclaim_kept(self) -> set[str]: ...

    def admit(self, gang: PendingGang, nodes: tuple[str, ...], action: str,
              victims: list[PlacedGang]) -> None: ...

    def pool(self, action: str,
             narrow: Callable[[CycleState, list[PlacedGang]], list[PlacedGang]] | None = None,
             key: str | None = None) -> Pool: ...

    def search(self, gang: PendingGang, pool: Pool, candidates: Candidates, action: str,
               amounts: Amounts | None = None) -> bool: ...


@dataclass(frozen=True)
class Action:
    name: str
    attempt: Callable[[CycleState, PendingGang], bool] | None
    # For actions that stop gangs: what a waiting gang's reason adds when the action found
    # nobody it may stop ("none") or stopping them would not make room ("some"), and why a
    # victim is stopped.
    no_room: dict[str, str] | None = None
    why: Callable[[PlacedGang, PendingGang], str] | None = None
    # A pass over the running gangs once the pending ones were offered (grow).
    finish: Callable[[Any], None] | None = None
