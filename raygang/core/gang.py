"""A gang as the core sees it: its spec plus the facts that order it."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from raygang.core.resources import Resources
from raygang.core.spec import GangSpec, Strategy
from raygang.core.topology import Layout

# What placement sees of a gang: gangs of one shape fit or do not fit together. The
# layout (its topology: core/topology.py) is None for nearly every gang.
Shape = tuple[Strategy, tuple[Resources, ...], Layout | None]


class GangState(str, enum.Enum):
    PENDING = "PENDING"
    ADMITTED = "ADMITTED"  # a plan placed it; its placement group is being created
    RESERVED = "RESERVED"  # placement group ready
    STARTING = "STARTING"  # members being started, not yet past the launch barrier
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    PREEMPTED = "PREEMPTED"  # transient: on its way back to PENDING
    RESTARTING = "RESTARTING"  # transient: on its way back to PENDING

    @property
    def finished(self) -> bool:
        return self in (GangState.SUCCEEDED, GangState.FAILED, GangState.CANCELLED)

    @property
    def holds_resources(self) -> bool:
        return self in (
            GangState.ADMITTED, GangState.RESERVED, GangState.STARTING, GangState.RUNNING
        )


@dataclass(frozen=True, slots=True)
class PendingGang:
    """A gang waiting for admission. `seq` is its submission order (kept across requeues)."""

    gang_id: str
    spec: GangSpec
    priority: int
    seq: int
    preemptible: bool = True  # its priority class's flag
    pending_since: float | None = None  # when it last became pending (submitted, requeued)

    @property
    def queue(self) -> str:
        return self.spec.queue

    # What admission reserves: all the members of a rigid gang, an elastic gang's minimum
    # (its surplus grows later, member by member: actions/grow.py).
    @property
    def total(self) -> Resources:
        return self.spec.min_total

    @property
    def bundles(self) -> tuple[Resources, ...]:
        return self.spec.min_bundles

    @property
    def strategy(self) -> Strategy:
        return self.spec.strategy

    @property
    def layout(self) -> Layout | None:
        return self.spec.layout

    @property
    def shape(self) -> Shape:
        """Gangs of one shape fit or do not fit together (placement ignores names)."""
        return self.spec.shape

    def order_key(self) -> tuple[int, int, str]:
        """Total order of admission: higher priority, then earlier submission, then id."""
        return (-self.priority, self.seq, self.gang_id)
