"""What one scheduling cycle decided, as data. Only `raygang.runtime` acts on a plan."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Admission:
    """Start this gang with bundle i pinned to `nodes[i]` — once the gangs `waits_for` are
    gone: gangs being stopped this cycle whose resources it takes. They are its own
    `victims` (stopped for it) and, if it takes what other gangs' victims free beyond
    their preemptors' need, those too (draining.py)."""

    gang_id: str
    nodes: tuple[str, ...]
    action: str = "allocate"  # or "reclaim" / "preempt"
    victims: tuple[str, ...] = ()
    waits_for: tuple[str, ...] = ()

    @property
    def waits_for_others(self) -> tuple[str, ...]:
        """The gangs it waits for that were stopped for other gangs."""
        return tuple(g for g in self.waits_for if g not in self.victims)


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop `victim` (whole) and requeue it, so that `preemptor` fits."""

    victim: str
    preemptor: str
    action: str  # "reclaim" (its queue was over its share) or "preempt" (lower priority)
    reason: str


class WaitCode(str, enum.Enum):
    NO_FIT = "NO_FIT"  # not enough free resources of the right shape right now
    BEHIND = "BEHIND"  # a gang earlier in the order is blocked and backfill is off
    LIMIT = "LIMIT"  # its queue (or a parent) is at its limit, or a non-preemptible gang
    # would borrow beyond its quota what another queue is guaranteed
    UNSCHEDULABLE = "UNSCHEDULABLE"  # cannot fit even on the empty cluster as it is now


@dataclass(frozen=True, slots=True)
class Waiting:
    gang_id: str
    code: WaitCode
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    admissions: tuple[Admission, ...] = ()
    waiting: Mapping[str, Waiting] = field(default_factory=lambda: MappingProxyType({}))
    at: float = 0.0
    preemptions: tuple[Preemption, ...] = ()
    positions: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """1-based place of each pending gang in its queue's order."""

    @property
    def admitted_ids(self) -> list[str]:
        return [a.gang_id for a in self.admissions]
