"""Choosing whole gangs to stop so that a pending gang fits (reclaim and preempt).

The search runs on the cycle's scratch capacity and queue usage, as Kueue's preemptor and
KAI's statements do: free candidates one by one (least important first) until the gang
fits on real nodes — placement, not just totals — then give back, most important first,
every victim the gang turns out not to need. If the gang would not fit even with every
candidate gone, nothing is touched.

The victims kept are minimal: releasing all of them but any one does not let the gang
fit. Greedy placement is not monotone (freeing more can make it fail, as a bundle takes
a node that a smaller freed set would have left to another), so a victim found needed
while others were still freed may not be needed once they are given back: for gangs
whose fit the probe cannot judge exactly, the kept set is checked again, victim by
victim, until none can go.

The walk runs on a `Probe` (probe.py), not on the capacity: at 20,000 running gangs,
freeing every candidate for real and placing after each step was what cost seconds.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

from raygang.core.capacity import Capacity
from raygang.core.fairshare import QueueBook
from raygang.core.gang import PendingGang
from raygang.core.placement import place
from raygang.core.preemption.pool import Candidates, Pool
from raygang.core.preemption.probe import Probe
from raygang.core.resources import UNIT, Resources, scarcity_key
from raygang.core.snapshot import GangKey, PlacedGang

Undo = Callable[[], None]


def victim_order(gang: PlacedGang) -> tuple[Any, ...]:
    """Least important first: lowest priority, then most recently started (one not yet
    running counts as the most recent), then smallest (scarcest resource first), then id
    (`reclaim_victim_order` and `preempt_victim_order: newest`; Kueue's candidatesOrdering).
    Kept with the gang: every cycle sorts every stoppable gang by it."""
    found = gang.memo.get(victim_order)
    if found is None:
        started = gang.running_since if gang.running_since is not None else math.inf
        found = gang.memo[victim_order] = (gang.priority, -started, _size(gang), gang.gang_id)
    return found


def cheapest_first(now: float) -> GangKey:
    """Least important first, and among gangs of one priority the one whose stop loses the
    least work: the fewest GPU-seconds (units of its scarcest resource x seconds) since its
    last checkpoint (`GangSpec.checkpoint_interval_s`) or else since its last start (one
    not yet running loses none), then the smallest, then id (`reclaim_victim_order:
    cheapest`). A small gang goes before a large one that saved as recently, and a large
    one that has just saved before a small one that has not."""

    def key(gang: PlacedGang) -> tuple[Any, ...]:
        size = _size(gang)  # once per gang: this sorts every stoppable gang each cycle
        return (gang.priority, _at_risk(gang, now, size), size, gang.gang_id)

    return key


def _at_risk(gang: PlacedGang, now: float, size: tuple[int, ...]) -> float:
    """GPU-seconds (or the scarcest resource's unit-seconds) a stop now would lose
    (`size`: the gang's `_size`)."""
    return (size[0] if size else 0) * gang.unsaved_s(now)


def victim_key(order: str, now: float) -> GangKey:
    """The sort key of a victim order (`PreemptionPolicy.reclaim_victim_order`)."""
    return victim_order if order == "newest" else cheapest_first(now)


def _size(gang: PlacedGang) -> tuple[int, ...]:
    found = gang.memo.get(_size)  # kept with the gang: sorts read it every cycle
    if found is None:
        found = gang.memo[_size] = _size_of(gang.total)
    return found


@functools.lru_cache(maxsize=4096)
def _size_of(total: Resources) -> tuple[int, ...]:
    """Units per resource, scarcest first: worked out once per distinct total (a cycle
    sorts every stoppable gang by it; a cluster runs a few dozen distinct totals)."""
    return tuple(total.units(n) for n in sorted(total, key=scarcity_key))


@functools.lru_cache(maxsize=4096)
def _largest_first(size: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(-u for u in size)


def reclaim_protected(book: QueueBook, placed: Sequence[PlacedGang],
                      order: str = "newest", now: float = 0.0) -> set[str]:
    """Ids of the gangs reclaim never takes. Walking each queue's gangs most important
    first (`_importance` under the policy's victim `order`), a gang is kept if the queue's
    kept total with it stays within the queue's quota (the resources the quota names) or
    within its fair share: reclaim takes only what a queue runs beyond both, i.e. from
    queues over their fair share, and never a gang that runs within its own queue's quota."""
    by_queue: dict[str, list[PlacedGang]] = {}
    for gang in placed:
        if gang.queue in book.tree.specs:
            by_queue.setdefault(gang.queue, []).append(gang)
    importance = _importance if order == "newest" else _costliest(now)
    kept_ids: set[str] = set()
    for queue, gangs in by_queue.items():
        quota = book.tree.specs[queue].quota
        # Fair shares are floats: to units, with a hair of slack for the water-filling sums.
        fair = {n: math.floor(v * UNIT * (1 + 1e-9)) for n, v in book.fair.get(queue, {}).items()}
        # In units, as plain dicts (this walks every running gang each cycle).
        named = {n: quota.units(n) for n in quota}
        limits = tuple(named.items())
        kept: dict[str, int] = {}  # with the gang looked at, until it is found not kept
        get = kept.get
        for gang in sorted(gangs, key=importance):
            added = _units(gang)
            for n, u in added:
                kept[n] = get(n, 0) + u
            # `in_quota_units(named, kept, gang.total)`, or within its fair share; as
            # loops, not calls: each cycle that reclaims walks every running gang.
            within = any(u > 0 and n in named for n, u in added)
            if within:
                for n, amount in limits:
                    if get(n, 0) > amount:
                        within = False
                        break
            if not within:
                within = True
                for n, u in kept.items():
                    if u > fair.get(n, 0):
                        within = False
                        break
            if within:
                kept_ids.add(gang.gang_id)
                continue
            # A gang that fits neither is skipped, not a stop: a smaller, less important
            # one may still fit. Its amounts come off again (a name only it had goes).
            for n, u in added:
                if kept[n] == u:
                    del kept[n]
                else:
                    kept[n] -= u
    return kept_ids


def _units(gang: PlacedGang) -> tuple[tuple[str, int], ...]:
    """(name, units) of what the gang holds, kept with it (`reclaim_protected`)."""
    found = gang.memo.get(_units)
    if found is None:
        total = gang.total
        found = gang.memo[_units] = tuple((n, total.units(n)) for n in total)
    return found


def _importance(gang: PlacedGang) -> tuple[Any, ...]:
    """Gangs reclaim cannot stop first (they hold their part of the quota whatever
    happens), then whole gangs (an elastic one's minimum) before surplus members, then
    highest priority, then longest running."""
    since = gang.running_since if gang.running_since is not None else math.inf
    return (gang.preemptible, gang.of is not None, -gang.priority, since, gang.gang_id)


def _costliest(now: float) -> GangKey:
    """`_importance` for `reclaim_victim_order: cheapest`: after priority, the gangs whose
    stop would lose the most work count within a queue's share first (GPU-seconds since
    their last checkpoint or start, then the largest), so what runs beyond it are the
    queue's cheapest gangs to stop. Measured on the Philly weeks (README): keeping the
    longest running instead loses twice the GPU-hours, as what is left beyond the share
    has not saved yet; ordering by size first makes a large reclaimer stop many small
    jobs (mean JCT +12 % on Oct 9-16 at 64 nodes)."""

    def key(gang: PlacedGang) -> tuple[Any, ...]:
        lasting = gang.memo.get(_costliest)  # all but the work at risk: kept with the gang
        if lasting is None:
            size = _size(gang)
            lasting = gang.memo[_costliest] = (gang.preemptible, gang.of is not None,
                                               -gang.priority, size, _largest_first(size),
                                               gang.gang_id)
        preemptible, unit, priority, size, largest, gang_id = lasting
        return (preemptible, unit, priority, -_at_risk(gang, now, size), largest, gang_id)

    return key


class VictimSearch:
    """One search for one pending gang against the cycle's scratch state.

    Its outcome is the plain algorithm's: free every candidate to see whether the gang
    could fit at all; free them one by one, least important first, until it fits; give
    back, most important first, each victim it fits without. But the walk runs on a
    `Probe`, which tells without placing whether the gang would fit (or says it cannot
    tell); the capacity and the book change only to place for real where it cannot, and
    at the end for the victims kept. Their state depends on which victims are freed, not
    on the order, so the plan is the same. Candidates that free nothing on a node where
    a bundle could ever fit change no answer, once totals and limits hold: they are not
    read (`Pool.positions`), nor given back one by one."""

    def __init__(self, gang: PendingGang, capacity: Capacity, book: QueueBook, pool: Pool):
        self.gang = gang
        self.capacity = capacity
        self.book = book
        self.pool = pool
        self._freed: dict[int, Undo] = {}  # candidate position -> undo, freed for real

    def _free(self, victim: PlacedGang) -> Undo:
        undo_nodes = self.capacity.release(victim.bundles)
        known = victim.queue in self.book.tree.specs
        undo_usage = self.book.remove(victim.queue, victim.total) if known else None

        def undo() -> None:
            undo_nodes()
            if undo_usage is not None:
                undo_usage()

        return undo

    def _fits(self) -> tuple[str, ...] | None:
        gang = self.gang
        if not gang.total.fits_in(self.capacity.free_total):
            return None  # cheap: not even the totals are there
        if self.book.limit_problem(gang.queue, gang.total) is not None:
            return None
        return place(gang.bundles, gang.strategy, self.capacity, gang.layout)

    def _real_fits(self, freed: dict[int, PlacedGang]) -> tuple[str, ...] | None:
        """`_fits` with exactly the victims `freed` (by candidate position) freed for real."""
        self._sync(freed)
        return self._fits()

    def undo(self) -> None:
        """Take back what `run` left freed: the scratch state as it was."""
        self._sync({})

    def _sync(self, freed: dict[int, PlacedGang]) -> None:
        for i in [i for i in self._freed if i not in freed]:
            self._freed.pop(i)()
        for i, victim in freed.items():
            if i not in self._freed:
                self._freed[i] = self._free(victim)

    def run(
        self, candidates: Candidates
    ) -> tuple[tuple[str, ...], list[PlacedGang]] | None:
        """(nodes for the gang, victims) with the victims' resources left freed on the
        scratch state, or None with the scratch state untouched."""
        if candidates.empty():  # nobody to stop: what placing finds now is the answer
            nodes = self._fits()  # (a probe would only have spared placing; its bounds
            return None if nodes is None else (nodes, [])  # read the whole pool)
        probe = Probe(self.gang, self.capacity, self.book, self.pool)
        # No need to place where the probe says there is no room; but where a limit is at
        # stake the book's own check runs first, as it did (same messages, same errors).
        if probe.verdict() is not False or probe.over:
            nodes = self._fits()
            if nodes is not None:
                return nodes, []
        relevant = (self.pool.positions(candidates, probe.names, probe.tests)
                    if probe.quiet else None)
        chosen = self._take(probe, *probe.walk(candidates, relevant))
        if chosen is None:
            self._sync({})  # as it was
            return None
        needed = self._give_back(probe, chosen)
        if not probe.exact:  # exact tests are monotone: the give-back was already minimal
            needed = self._minimal(needed)
        nodes = self._real_fits(needed)
        assert nodes is not None, "the victim search lost a fit it had found"
        return nodes, list(needed.values())

    def _take(self, probe: Probe, chosen: dict[int, PlacedGang], unsure: list[int],
              verdict: bool | None) -> dict[int, PlacedGang] | None:
        """After `Probe.walk`: the shortest prefix of the candidates the gang fits with, if
        it fits with all of them. Once the probe says "fits", it would say so with every
        candidate gone too (its tests only get easier as more is freed): the walk stopped
        there. Before that, prefixes it could not judge are placed for real."""
        if not verdict:
            if verdict is False or self._real_fits(chosen) is None:
                return None  # not even with every candidate gone
        for last in unsure:
            prefix = {i: v for i, v in chosen.items() if i <= last}
            if self._real_fits(prefix) is not None:
                chosen = prefix
                probe.reset()
                for i, victim in chosen.items():
                    probe.apply(victim, 1, i)
                break
        return chosen

    def _give_back(self, probe: Probe, chosen: dict[int, PlacedGang]) -> dict[int, PlacedGang]:
        """Give back every victim not needed, most important first; returns those kept.
        The last one taken is needed by construction (the gang did not fit before it) where
        the probe's tests are exact, hence monotone; elsewhere `_minimal` looks again.

        A victim freeing nothing on a live node (touched, some bundle still fits) changes
        no test: nodes only lose room here, so dead ones stay dead. Whether it is needed
        then depends on totals and limits alone. When those hold with only the last victim
        freed, they hold in every state visited here: such victims are given back without
        a look, and only the others are tried."""
        last = next(reversed(chosen))
        live = {i for n in probe.live_nodes() for i in probe.on[n]}
        needed = {last: chosen[last]}
        if probe.holds_with_only(chosen[last]):
            probe.untrack()
            order = sorted(live - {last}, reverse=True)
        else:
            probe.retrack(chosen.values())
            order = sorted(set(chosen) - {last}, reverse=True)
            needed = dict(chosen)
        for i in order:
            change = probe.apply if i in live else probe.use
            change(chosen[i], -1)
            fits = probe.verdict()
            if fits is None:  # as the plain walk has it: those before i still freed
                fits = self._real_fits({j: v for j, v in chosen.items()
                                        if j != i and (j < i or j in needed)}) is not None
            if fits:
                needed.pop(i, None)
            else:
                needed[i] = chosen[i]
                change(chosen[i], 1)
        return dict(sorted(needed.items()))

    def _minimal(self, needed: dict[int, PlacedGang]) -> dict[int, PlacedGang]:
        """Give back, most important first, every kept victim the gang fits without once
        the others are as they are now; again until a whole round gives back nothing.
        Each round only shrinks the set, so it ends, and at its end every victim left is
        needed. (With one left: the gang did not fit with none freed.)"""
        changed = True
        while changed and len(needed) > 1:
            changed = False
            for i in sorted(needed, reverse=True):
                without = {j: v for j, v in needed.items() if j != i}
                if without and self._real_fits(without) is not None:
                    needed, changed = without, True
        return needed
