"""reclaim: a queue below its quota takes back what other queues run beyond their quota
and fair share (`victims.reclaim_protected` says which gangs that leaves)."""

from __future__ import annotations

from raygang.core.actions.action import Action, CycleState
from raygang.core.gang import PendingGang
from raygang.core.snapshot import PlacedGang
from raygang.core.victims import reclaim_protected


def reclaim(cycle: CycleState, gang: PendingGang) -> bool:
    if not cycle.book.within_quota(gang.queue, gang.total):
        return False
    pool = cycle.pool("reclaim", _stoppable)
    return cycle.search(gang, pool, pool.candidates(other_than=gang.queue), "reclaim")


def _stoppable(cycle: CycleState, gangs: list[PlacedGang]) -> list[PlacedGang]:
    kept = reclaim_protected(cycle.book, cycle.pieces,
                             cycle.config.preemption.reclaim_victim_order, cycle.now)
    return [g for g in gangs if g.gang_id not in kept]


def why(victim: PlacedGang, gang: PendingGang) -> str:
    return (
        f"reclaimed for gang {gang.gang_id}: queue {gang.queue!r} is below its quota and "
        f"queue {victim.queue!r} runs this gang beyond its own quota and fair share"
    )


ACTION = Action("reclaim", reclaim, no_room={
    "none": "; no other queue runs preemptible gangs beyond its quota and fair share to "
            "reclaim",
    "some": "; reclaiming what other queues borrowed beyond their quota and fair share "
            "would not make room",
}, why=why)
