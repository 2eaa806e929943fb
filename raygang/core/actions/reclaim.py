"""reclaim: a queue below its quota takes back what other queues run beyond their quota
and fair share. First the gangs the walk of each queue's gangs leaves beyond its share
(`Cycle.reclaim_kept`), the cheapest first; where those would not make room (they may run
on nodes where none of them helps), any of those queues' gangs it may stop, as long as
what it takes adds up to no more than the gangs beyond would (`core.preemption.excess`)."""

from __future__ import annotations

import functools

from raygang.core.actions.action import Action, CycleState
from raygang.core.preemption.excess import NONE, Amounts
from raygang.core.gang import PendingGang
from raygang.core.preemption.pool import Candidates, Pool
from raygang.core.resources import Resources
from raygang.core.snapshot import PlacedGang

_ANY = "reclaim by amount"  # the pool of the search by amount


def reclaim(cycle: CycleState, gang: PendingGang) -> bool:
    if not cycle.book.within_quota(gang.queue, gang.total):
        return False
    pool = cycle.pool("reclaim", _beyond)
    amounts: Amounts

    def any_of_theirs() -> tuple[Pool, Candidates]:
        wide = cycle.pool("reclaim", _of_queues_beyond, key=_ANY)
        # Not of its own queue, nor of queues with nothing left of what it asks for; nor,
        # by the filter, of queues with no amount (a minimum runtime protects theirs).
        spent = [q for q in amounts.queues
                 if all((amounts.left(q) or NONE).units(n) <= 0 for n in gang.total)]
        among = wide.candidates(other_than=[gang.queue, *spent])
        alone = amounts.alone(wide.by_queue, _largest(cycle, wide))
        return wide, among if alone is None else among.only(alone)

    amounts = Amounts(*_amounts(cycle, pool), cycle.taken_from, cycle.frees, any_of_theirs)
    return cycle.search(gang, pool, pool.candidates(other_than=[gang.queue]), "reclaim",
                        amounts)


def _kept(cycle: CycleState) -> set[str]:
    """The gangs the walk counts within their queue's quota or fair share (once a cycle)."""
    found = cycle.memo.get("reclaim kept")
    if found is None:
        found = cycle.memo["reclaim kept"] = cycle.reclaim_kept()
    return found  # type: ignore[return-value]


def _beyond(cycle: CycleState, gangs: list[PlacedGang]) -> list[PlacedGang]:
    kept = _kept(cycle)
    return [g for g in gangs if g.gang_id not in kept]


def _of_queues_beyond(cycle: CycleState, gangs: list[PlacedGang]) -> list[PlacedGang]:
    """The gangs of the queues that have an amount, in the victim order."""
    amounts = cycle.memo["reclaim amounts"][0]  # type: ignore[index]
    return [g for g in gangs if g.queue in amounts]


def _counted(cycle: CycleState) -> dict[str, frozenset[str]]:
    return {q: frozenset(spec.quota) for q, spec in cycle.book.tree.specs.items() if spec.quota}


def _amounts(cycle: CycleState, pool: Pool
             ) -> tuple[dict[str, Resources], dict[str, frozenset[str]]]:
    """(per queue, what it runs of the gangs beyond its share that reclaim could stop at
    the start of the cycle (the pool's: not those a minimum runtime protects, they keep
    their part), in the resources its quota names (a quota guarantees those: a GPU quota
    counts GPUs, not the CPUs asked alongside) or, with none named, in all; those names
    per queue), once a cycle."""
    found = cycle.memo.get("reclaim amounts")
    if found is None:
        counted = _counted(cycle)
        amounts = {}
        for q, gangs in pool.by_queue.items():
            if q is not None:
                total = Resources.sum(g.total for g in gangs)
                amounts[q] = total.only(counted[q]) if q in counted else total
        found = cycle.memo["reclaim amounts"] = (amounts, counted)
    return found  # type: ignore[return-value]


def _largest(cycle: CycleState, wide: Pool) -> dict[str, Resources]:
    """Per queue, the most any one of its gangs in `wide` holds of what its amount counts
    (once a cycle)."""
    found = cycle.memo.get("reclaim largest")
    if found is None:
        counted = cycle.memo["reclaim amounts"][1]  # type: ignore[index]
        sizes: dict[str, set[Resources]] = {}  # a few distinct totals per queue
        for g in wide.by_queue[None]:
            sizes.setdefault(g.queue, set()).add(
                g.total.only(counted[g.queue]) if g.queue in counted else g.total)
        found = cycle.memo["reclaim largest"] = {
            q: functools.reduce(Resources.maximum, totals) for q, totals in sizes.items()}
    return found  # type: ignore[return-value]


def why(victim: PlacedGang, gang: PendingGang) -> str:
    return (
        f"reclaimed for gang {gang.gang_id}: queue {gang.queue!r} is below its quota and "
        f"queue {victim.queue!r} runs beyond its own quota and fair share"
    )


ACTION = Action("reclaim", reclaim, no_room={
    "none": "; no other queue runs preemptible gangs beyond its quota and fair share to "
            "reclaim",
    "some": "; reclaiming what other queues borrowed beyond their quota and fair share "
            "would not make room",
}, why=why)
