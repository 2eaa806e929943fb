"""A victim search's scratch state, virtual: "would the gang fit with these gone?"

A victim search (victims.py) frees candidates one by one until a pending gang fits, then
gives back the ones not needed. Freeing for real on the capacity, and placing after each
step, cost seconds with 20,000 running gangs, so the search runs on a `Probe`: vectors of
the nodes touched and counts over all nodes from which "would `place` find room" follows
without placing (exactly for most shapes, see `Probe`), changing only plain integers.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import add, sub

from raygang.core.capacity import Capacity
from raygang.core.fairshare import QueueBook
from raygang.core.gang import PendingGang
from raygang.core.preemption.pool import Candidates, Pool, Tests, Vec, scored
from raygang.core.resources import Resources
from raygang.core.snapshot import PlacedGang
from raygang.core.spec import Strategy


class Probe:
    """The scratch state with some candidates freed, virtually: free vectors of the nodes
    touched, free totals and usage under the gang's limits (tracked only while they do
    not hold: freeing never breaks them), and tests summed over the nodes: "fits" counts
    nodes that hold a vector, "copies" the copies of it they hold in all. `verdict()` says
    whether `place` would find room:

    - STRICT_PACK: some node holds the gang's total (exact);
    - one bundle shape b, m bundles: PACK and SPREAD place exactly when the nodes hold m
      copies of b in all, STRICT_SPREAD when m nodes hold b (exact: greedy never wastes);
    - mixed shapes: no room when some shape has fewer copies (STRICT_SPREAD: nodes) than
      bundles. Room for SPREAD and STRICT_SPREAD when as many nodes as bundles hold w, the
      per-resource maximum of the bundles (each finds a node of its own). Room for PACK
      when one node holds the total; or when the nodes hold as many copies of w as there
      are bundles (each node opened hosts at least its copies); or when w is a shape,
      whose bundles come first and so all find room given enough copies of w, and as many
      nodes as bundles hold the maximum of the others (one is always left unopened).
      Otherwise: None.

    Each test is compared with its thresholds as it changes, so a verdict is O(1). Every
    test only gets easier as more is freed. For a gang with a topology the tests are only
    necessary: a verdict is never True (placed for real).
    """

    def __init__(self, gang: PendingGang, capacity: Capacity, book: QueueBook, pool: Pool):
        self.names = names = tuple(gang.total.names_by_scarcity())
        self.need = gang.total.vector(names)
        self.tests, self._at_least, groups, self.exact = _tests(gang, names)
        self._n_groups = len(groups)
        self._in_groups: list[list[tuple[int, int]]] = [[] for _ in self.tests]
        for g, group in enumerate(groups):
            for i, at_least in group:
                self._in_groups[i].append((g, at_least))
        self._capacity, self._free_vec = capacity, pool.free_vec(names)
        self._cache, self._footprint = pool.footprints(names)
        self._hopeful = pool.hopeful(names, self.tests)
        self._paths = book.tree.paths
        self._limits = []  # (queue, resource names, caps: limit minus the gang's demand)
        usage = []
        for queue in book.tree.paths[gang.queue]:
            limit = book.tree.specs[queue].limit
            if limit is None:
                continue
            res = tuple(r for r in limit if gang.total.units(r))  # as limit_problem
            if res:
                self._limits.append((queue, res, [limit.units(r) - gang.total.units(r)
                                                  for r in res]))
                usage.append([book.usage[queue].units(r) for r in res])
        self._base: dict[str, Vec] = {}  # free vectors as the search found them
        self._scores = pool.scores(names, self.tests)
        self._start = (capacity.free_total.vector(names), usage, self._count(pool.class_scores))
        # Exact room implies the totals (a node with room for the total, or nodes with m
        # copies of the bundle, hold the total) unless some free vector is negative.
        self._totals = not self.exact or any(
            min(free.vector(names)) < 0 for free, _ in capacity.classes())
        self.reset()
        self._track = bool(self.short or self.over)

    def _count(self, cache: dict[tuple[object, ...], tuple[int, ...]]) -> list[int]:
        counts = [0] * len(self.tests)
        for free, ids in self._capacity.classes():
            key = (self.names, self.tests, free)
            if key not in cache:
                cache[key] = scored({}, self.tests, free.vector(self.names))
            for i, c in enumerate(cache[key]):
                counts[i] += c * len(ids)
        return counts

    def reset(self) -> None:
        """Back to no candidate freed."""
        self.counts = list(self._start[2])
        self.unmet = sum(c < k for c, k in zip(self.counts, self._at_least) if k)
        self.lacking = [0] * self._n_groups  # per group: tests below their count
        for i, groups in enumerate(self._in_groups):
            for g, at_least in groups:
                self.lacking[g] += self.counts[i] < at_least
        self.met = self.lacking.count(0)
        self.free: dict[str, Vec] = {}
        self.on: dict[str, list[int]] = {}  # node -> positions of the candidates freeing on it
        self._restart_use()

    def _restart_use(self) -> None:
        total, usage, _ = self._start
        self.total, self.usage = list(total), [u[:] for u in usage]
        self.short = sum(t < n for t, n in zip(self.total, self.need)) if self._totals else 0
        self.over = sum(u > c for (_, _, caps), us in zip(self._limits, self.usage)
                        for u, c in zip(us, caps))
        self._stale = False  # totals and usage left behind once they held

    @property
    def quiet(self) -> bool:
        """Only a candidate freeing something on a hopeful node can change the verdict,
        or what placing for real finds (other nodes never hold a bundle; totals and
        limits hold already)."""
        return not self._track

    def walk(self, candidates: Candidates, relevant: Iterable[int] | None = None
             ) -> tuple[dict[int, PlacedGang], list[int], bool | None]:
        """Free candidates in order until the verdict is True. Returns those freed (by
        position in `candidates.gangs`), the positions after which it could not judge,
        and the last verdict. A candidate freeing nothing on a hopeful node, once totals
        and limits hold, changes nothing that counts: it is passed over with a look at
        its nodes, or, if the probe is `quiet` and `relevant` lists the positions of the
        others, not read at all. A candidate holding none of the resources the gang asks
        for is never taken: stopping it could change where greedy placement puts a bundle
        (it compares every resource a node has left), never whether there is room."""
        chosen: dict[int, PlacedGang] = {}
        unsure: list[int] = []
        verdict: bool | None = False  # the caller placed the gang for real first
        gangs, taken = candidates.gangs, candidates.taken
        other, below, allowed = candidates.other_than, candidates.below, candidates.allowed
        cache, footprint, hopeful = self._cache, self._footprint, self._hopeful
        touch, track = self._touch, self._track
        for i in range(candidates.start, len(gangs)) if relevant is None else relevant:
            victim = gangs[i]
            if below is not None and victim.priority >= below:
                if victim.of is None:
                    break  # sorted by priority (after the surplus units, sorted apart)
                continue
            if victim.gang_id in taken or victim.queue in other or (
                    allowed is not None and not allowed(victim)):
                continue
            entries, total = cache.get(id(victim)) or footprint(victim)
            if not entries and not self._frees_any(victim):
                continue  # holds nothing the gang asks for: stopping it cannot help
            chosen[i] = victim
            changed = False
            for node, vec in entries:
                if node in hopeful:
                    touch(node, vec, 1, i)
                    changed = True
            if track:
                if self.short or self.over:
                    self._use(victim, total, 1)
                    changed = True
                else:
                    self._stale = True
            if changed:
                verdict = self.verdict()
                if verdict:
                    break
                if verdict is None:
                    unsure.append(i)
        return chosen, unsure, verdict

    def _frees_any(self, victim: PlacedGang) -> bool:
        """Whether `victim` holds any resource the gang asks for, on any node (one on a
        dead node still counts against its queue's limits)."""
        return any(victim.total.units(n) for n in self.names)

    def apply(self, victim: PlacedGang, sign: int, index: int | None = None) -> None:
        """Free `victim` (sign 1; `index`: its position among the candidates) or take it
        back (sign -1)."""
        entries, total = self._cache.get(id(victim)) or self._footprint(victim)
        for node, vec in entries:
            if node in self._hopeful:
                self._touch(node, vec, sign, index)
        if self._track:
            self._use(victim, total, sign)

    def use(self, victim: PlacedGang, sign: int) -> None:
        """Only the totals and limits part of `apply`: for a victim freeing nothing on a
        node where a bundle still fits (such nodes never get room back in a give-back)."""
        if self._track:
            self._use(victim, (self._cache.get(id(victim)) or self._footprint(victim))[1], sign)

    def _touch(self, node: str, vec: Vec, sign: int, index: int | None) -> None:
        old = self.free.get(node) or self._base.get(node)
        if old is None:
            old = self._base[node] = self._free_vec(node)
        new = self.free[node] = tuple(map(add if sign > 0 else sub, old, vec))
        scores = self._scores
        before = scores.get(old) or scored(scores, self.tests, old)
        after = scores.get(new) or scored(scores, self.tests, new)
        if before != after:
            self._recount(before, after)
        if index is not None:
            self.on.setdefault(node, []).append(index)

    def _recount(self, before: tuple[int, ...], after: tuple[int, ...]) -> None:
        for i, (b, a) in enumerate(zip(before, after)):
            if a != b:
                old = self.counts[i]
                new = self.counts[i] = old + a - b
                if self._at_least[i]:
                    self.unmet += (new < self._at_least[i]) - (old < self._at_least[i])
                for g, at_least in self._in_groups[i]:
                    change = (new < at_least) - (old < at_least)
                    if change:
                        self.met += (self.lacking[g] + change == 0) - (self.lacking[g] == 0)
                        self.lacking[g] += change

    def _use(self, victim: PlacedGang, total: Vec, sign: int) -> None:
        need, have = self.need, self.total
        for j, amount in enumerate(total if self._totals else ()):
            was = have[j] < need[j]
            have[j] += sign * amount
            self.short += (have[j] < need[j]) - was
        path = self._paths.get(victim.queue, ())  # a queue since removed: no usage
        for (queue, res, caps), usage in zip(self._limits, self.usage):
            if queue in path:
                for j, r in enumerate(res):
                    was = usage[j] > caps[j]
                    usage[j] -= sign * victim.total.units(r)
                    self.over += (usage[j] > caps[j]) - was

    def verdict(self) -> bool | None:
        """Whether the gang fits now: totals, limits, then room (None: the tests cannot
        tell; place it for real)."""
        if self.short or self.over or self.unmet:
            return False
        return True if self.exact or self.met else None

    def holds_with_only(self, victim: PlacedGang) -> bool:
        """Whether totals and limits would hold with `victim` the only one freed."""
        if not self._track:
            return True
        total, usage, _ = self._start
        freed = (self._cache.get(id(victim)) or self._footprint(victim))[1]
        if self._totals and any(t + x < n for t, x, n in zip(total, freed, self.need)):
            return False
        path = self._paths.get(victim.queue, ())
        for (queue, res, caps), used in zip(self._limits, usage):
            less = victim.total if queue in path else Resources()
            if any(u - less.units(r) > c for r, u, c in zip(res, used, caps)):
                return False
        return True

    def untrack(self) -> None:
        """Stop looking at totals and limits (they hold in every state still to come)."""
        self._track, self.short, self.over = False, 0, 0

    def retrack(self, freed: Iterable[PlacedGang]) -> None:
        """Bring totals and usage up to date with `freed` if the walk left them behind."""
        if self._stale:
            self._restart_use()
            for victim in freed:
                self._use(victim, (self._cache.get(id(victim)) or self._footprint(victim))[1], 1)

    def live_nodes(self) -> list[str]:
        """Nodes touched so far where some test still counts (some bundle fits)."""
        return [n for n, vec in self.free.items() if any(self._scores[vec])]


def _tests(gang: PendingGang, names: tuple[str, ...]
           ) -> tuple[Tests, list[int], list[list[tuple[int, int]]], bool]:
    """(tests, necessary count per test (0: none), sufficient groups [[(test, count)]],
    exact): the tests behind `Probe`'s verdict."""
    bundles = gang.bundles
    # A gang with a topology fits only inside domains of labels, which no count over all
    # nodes tells: the tests stay necessary, never sufficient (placed for real).
    exact = gang.layout is None
    if gang.strategy is Strategy.STRICT_PACK:
        return (("fits", gang.total.vector(names)),), [1], [], exact
    shapes = {b.vector(names): bundles.count(b) for b in dict.fromkeys(bundles)}
    kind = "fits" if gang.strategy is Strategy.STRICT_SPREAD else "copies"
    tests = [(kind, vec) for vec in shapes]
    necessary = list(shapes.values())
    if not exact:
        return tuple(tests), necessary, [], False
    if len(shapes) == 1:
        return tuple(tests), necessary, [], True
    widest = tuple(max(v) for v in zip(*shapes))
    if gang.strategy is not Strategy.PACK:
        tests.append(("fits", widest))
        groups = [[(len(tests) - 1, len(bundles))]]
    else:
        tests.append(("fits", gang.total.vector(names)))
        groups = [[(len(tests) - 1, 1)]]
        if widest in shapes:
            w = list(shapes).index(widest)
            rest = tuple(max(v) for v in zip(*(vec for vec in shapes if vec != widest)))
            tests.append(("fits", rest))
            groups += [[(w, len(bundles))], [(w, shapes[widest]), (len(tests) - 1, len(bundles))]]
        else:
            tests.append(("copies", widest))
            groups.append([(len(tests) - 1, len(bundles))])
    necessary += [0] * (len(tests) - len(necessary))
    return tuple(tests), necessary, groups, False
