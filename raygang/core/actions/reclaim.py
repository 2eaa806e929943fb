"""reclaim: a queue below its quota takes back what other queues run beyond their share.
First the gangs that each queue's protection leaves beyond its share (`beyond`), the
cheapest first; where those would not make room (they may run on nodes where none of them
helps), any of those queues' gangs it may stop, as long as what it takes adds up to no
more than the gangs beyond would (`core.preemption.excess`).

What a queue keeps is a rule of the action, by name (`PROTECTIONS`, `protecting`):
raygang's own keeps what runs within a queue's quota or its fair share
(`core.preemption.victims.reclaim_protected`); KAI Scheduler's, its deserved quota only
(`raygang.sim.baselines.kai`).

With `preemption.reclaim_trade_ratio` set, a gang the delay holds back, or that finds no
room among gangs past the minimum runtime, searches again among those too; what it finds
is taken only if its wait is worth what the stop loses (`core.preemption.trade`: a gate on
that search). With `preemption.reclaim_checkpoint_ratio` set, a gang whose victims found
lose less at their next checkpoint waits for it (`CheckpointWait`, a gate the action
declares)."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

from raygang.core.actions.action import Action, CycleState, VictimFilter
from raygang.core.preemption.excess import NONE, Amounts
from raygang.core.gang import PendingGang
from raygang.core.fairshare import in_quota
from raygang.core.preemption.pool import Candidates, Pool
from raygang.core.preemption.trade import CheckpointWait, Trade, below_quota, scarcest, trade
from raygang.core.preemption.victims import reclaim_protected
from raygang.core.resources import Resources
from raygang.core.snapshot import PlacedGang

_ANY = " by amount"  # a pool's key with this: the pool of its search by amount
_YOUNG = "reclaim traded"  # the pool of a search a trade must justify (`trade`)


def reclaim(cycle: CycleState, gang: PendingGang) -> bool:
    if not cycle.book.within_quota(gang.queue, gang.total):
        return False
    ratio = cycle.config.preemption.reclaim_trade_ratio
    if ratio is None:  # the fixed rules alone: the delay first, before the pool is built
        return not cycle.held_back(gang, "reclaim") and _attempt(cycle, gang, "reclaim")
    left = cycle.delay_left(gang, "reclaim")
    if left <= 0:
        if _attempt(cycle, gang, "reclaim"):
            return True
        if not cycle.pool("reclaim").young:
            return False  # no gang a minimum runtime protects: a trade finds no more
    spec = cycle.book.tree.specs[gang.queue]
    deal = trade(gang, spec.quota, cycle.book.usage[gang.queue], ratio, cycle.now)
    if _attempt(cycle, gang, _YOUNG, deal):
        return True
    if left > 0:
        cycle.delay(gang, "reclaim", left)  # what frees meanwhile may do
    return False


def _attempt(cycle: CycleState, gang: PendingGang, key: str, deal: Trade | None = None
             ) -> bool:
    """One search: in the pool named `key` (its victim filter: `beyond` the queues'
    protection; with `deal`, gangs a minimum runtime protects too, their stop justified
    by the deal), then by amount."""
    young = deal is not None
    pool = cycle.pool("reclaim", key=key, young=young)
    amounts: Amounts

    def any_of_theirs() -> tuple[Pool, Candidates]:
        wide = cycle.pool("reclaim", _of_queues_beyond(key), key=key + _ANY, young=young)
        # Not of its own queue, nor of queues with nothing left of what it asks for; nor,
        # by the filter, of queues with no amount (a minimum runtime protects theirs).
        spent = [q for q in amounts.queues
                 if all((amounts.left(q) or NONE).units(n) <= 0 for n in gang.total)]
        among = wide.candidates(other_than=[gang.queue, *spent])
        alone = amounts.alone(wide.by_queue, _largest(cycle, wide, key))
        return wide, among if alone is None else among.only(alone)

    amounts = Amounts(*_amounts(cycle, pool, key), cycle.taken_from, cycle.frees,
                      any_of_theirs)
    return cycle.search(gang, pool, pool.candidates(other_than=[gang.queue]), "reclaim",
                        amounts, () if deal is None else (deal,))


def _checkpoint_wait(cycle: CycleState, gang: PendingGang) -> CheckpointWait | None:
    """What a wait for the victims' next checkpoints would cost (`CheckpointWait`): the
    GPUs (the gang's scarcest resource) its queue is below its quota, or the gang's own
    if more; None without `reclaim_checkpoint_ratio`."""
    ratio = cycle.config.preemption.reclaim_checkpoint_ratio
    if ratio is None:
        return None
    name = scarcest(gang.total)
    if name is None:
        return CheckpointWait(None, 0, ratio, cycle.now)
    below = below_quota(cycle.book.tree.specs[gang.queue].quota, cycle.book.usage[gang.queue],
                        name)
    return CheckpointWait(name, max(gang.total.units(name), below), ratio, cycle.now)


Protection = Callable[[CycleState], set[str]]  # the gangs no reclaim takes, by id


def quota_or_fair_share(cycle: CycleState) -> set[str]:
    """raygang's: walking each queue's gangs most important first, those within its quota
    or its fair share (`reclaim_protected`, in the policy's reclaim victim order)."""
    return reclaim_protected(cycle.book, cycle.pieces,
                             cycle.config.preemption.reclaim_victim_order, cycle.now)


def quota(cycle: CycleState) -> set[str]:
    """KAI Scheduler's: walking a queue's gangs most important first (non-preemptible,
    higher priority, longer running), those that keep the queue within its deserved quota
    (KAI-Scheduler discussion #1763, GuaranteeDeservedQuota)."""
    specs = cycle.book.tree.specs
    kept: set[str] = set()
    by_queue: dict[str, list[PlacedGang]] = {}
    for gang in cycle.pieces:
        if gang.queue in specs:
            by_queue.setdefault(gang.queue, []).append(gang)
    for queue, placed in by_queue.items():
        limit, total = specs[queue].quota, Resources()
        for gang in sorted(placed, key=_importance):
            with_it = total + gang.total
            if in_quota(limit, with_it, gang.total):
                total = with_it
                kept.add(gang.gang_id)
    return kept


def _importance(gang: PlacedGang) -> tuple[bool, int, float, str]:
    since = gang.running_since if gang.running_since is not None else math.inf
    return (gang.preemptible, -gang.priority, since, gang.gang_id)


PROTECTIONS: dict[str, Protection] = {"quota or fair share": quota_or_fair_share,
                                      "quota": quota}


def beyond(protection: Protection) -> VictimFilter:
    """The victim filter keeping the gangs `protection` leaves beyond their queue's share
    (worked out once a cycle)."""

    def narrow(cycle: CycleState, gangs: list[PlacedGang]) -> list[PlacedGang]:
        kept = cycle.memo.get("reclaim kept")
        if kept is None:
            kept = cycle.memo["reclaim kept"] = protection(cycle)
        return [g for g in gangs if g.gang_id not in kept]  # type: ignore[operator]

    return narrow


def _of_queues_beyond(key: str) -> VictimFilter:
    """The gangs of the queues that have an amount (of the pool `key`), in the victim
    order."""

    def narrow(cycle: CycleState, gangs: list[PlacedGang]) -> list[PlacedGang]:
        amounts = cycle.memo[key + " amounts"][0]  # type: ignore[index]
        return [g for g in gangs if g.queue in amounts]

    return narrow


def _counted(cycle: CycleState) -> dict[str, frozenset[str]]:
    return {q: frozenset(spec.quota) for q, spec in cycle.book.tree.specs.items() if spec.quota}


def _amounts(cycle: CycleState, pool: Pool, key: str
             ) -> tuple[dict[str, Resources], dict[str, frozenset[str]]]:
    """(per queue, what it runs of the gangs beyond its share that reclaim could stop at
    the start of the cycle (the pool's: not those a minimum runtime protects, they keep
    their part), in the resources its quota names (a quota guarantees those: a GPU quota
    counts GPUs, not the CPUs asked alongside) or, with none named, in all; those names
    per queue), once a cycle."""
    found = cycle.memo.get(key + " amounts")
    if found is None:
        counted = _counted(cycle)
        amounts = {}
        for q, gangs in pool.by_queue.items():
            if q is not None:
                total = Resources.sum(g.total for g in gangs)
                amounts[q] = total.only(counted[q]) if q in counted else total
        found = cycle.memo[key + " amounts"] = (amounts, counted)
    return found  # type: ignore[return-value]


def _largest(cycle: CycleState, wide: Pool, key: str) -> dict[str, Resources]:
    """Per queue, the most any one of its gangs in `wide` holds of what its amount counts
    (once a cycle)."""
    found = cycle.memo.get(key + " largest")
    if found is None:
        counted = cycle.memo[key + " amounts"][1]  # type: ignore[index]
        sizes: dict[str, set[Resources]] = {}  # a few distinct totals per queue
        for g in wide.by_queue[None]:
            sizes.setdefault(g.queue, set()).add(
                g.total.only(counted[g.queue]) if g.queue in counted else g.total)
        found = cycle.memo[key + " largest"] = {
            q: functools.reduce(Resources.maximum, totals) for q, totals in sizes.items()}
    return found  # type: ignore[return-value]


def why(victim: PlacedGang, gang: PendingGang) -> str:
    return (
        f"reclaimed for gang {gang.gang_id}: queue {gang.queue!r} is below its quota and "
        f"queue {victim.queue!r} runs beyond its own quota and fair share"
    )


ACTION = Action(
    "reclaim", reclaim, no_room={
        "none": "; no other queue runs preemptible gangs beyond its quota and fair share to "
                "reclaim",
        "some": "; reclaiming what other queues borrowed beyond their quota and fair share "
                "would not make room",
    }, why=why, verb="reclaimed", order_key="reclaim_victim_order",
    victim_filter=beyond(quota_or_fair_share), gates=(_checkpoint_wait,),
    delay_key="reclaim_delay_s",
    min_runtime_key="reclaim_min_runtime_s")


def protecting(name: str) -> Action:
    """reclaim with the protection `name` (`PROTECTIONS`) instead of raygang's."""
    return dataclasses.replace(ACTION, victim_filter=beyond(PROTECTIONS[name]))
