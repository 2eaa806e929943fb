"""The running gangs an action may stop during one cycle, as victim searches read them.

Sorted once per cycle (least important first) and read lazily. What each holds per node
is kept as integer vectors over a pending gang's resource names (`Vec`), so that a search
(victims.py, on a `Probe`) adds tuples instead of updating the capacity. Per node the pool
also bounds what any search could find free there.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from operator import add

from raygang.core.capacity import Capacity
from raygang.core.resources import Resources
from raygang.core.snapshot import PlacedGang

Vec = tuple[int, ...]  # amounts in units, over a pending gang's resource names
Tests = tuple[tuple[str, Vec], ...]  # ("fits" | "copies", vector) per test
Footprint = tuple[tuple[tuple[str, Vec], ...], Vec]  # (node, vector) per node, their sum


class Candidates:
    """Some members of a pool, least important first: iterable, and read in place by
    `Probe.walk` (a search may read thousands; a generator step per member costs)."""

    def __init__(self, gangs: list[PlacedGang], taken: set[str], other_than: frozenset[str],
                 below: int | None, start: int = 0, queue: str | None = None,
                 allowed: Callable[[PlacedGang], bool] | None = None):
        self.gangs, self.taken, self.other_than, self.below = gangs, taken, other_than, below
        self.start = start  # gangs before it are all taken
        self.queue = queue
        self.allowed = allowed  # depends on a gang's queue and total alone (`admitted`)

    def only(self, allowed: Callable[[PlacedGang], bool] | None) -> Candidates:
        """These candidates, less those `allowed` refuses (None: refuses none)."""
        return Candidates(self.gangs, self.taken, self.other_than, self.below, self.start,
                          self.queue, allowed)

    def __iter__(self) -> Iterator[PlacedGang]:
        for gang in self.gangs[self.start:]:
            if self.below is not None and gang.priority >= self.below:
                if gang.of is None:
                    return  # sorted by priority: the rest are not below either
                continue  # surplus units come first, sorted among themselves
            if self.admits(gang):
                yield gang

    def empty(self) -> bool:
        """No candidate at all (read up to the first one)."""
        return next(iter(self), None) is None

    def admits(self, gang: PlacedGang) -> bool:
        """Not taken, not of an excluded queue, and allowed (priority aside)."""
        return (gang.gang_id not in self.taken and gang.queue not in self.other_than
                and (self.allowed is None or self.allowed(gang)))

    def admitted(self, gangs: Iterable[int]) -> Iterator[int]:
        """Those of the positions `gangs` (in `self.gangs`) below `below` that `admits`."""
        members, below = self.gangs, self.below
        for i in gangs:
            if (below is None or members[i].priority < below) and self.admits(members[i]):
                yield i

    def would_admit(self, gang: PlacedGang) -> bool:
        """Whether `gang` (not in the pool) would be a candidate here but for `allowed`:
        for the reasons of gangs that wait on gangs a minimum runtime protects."""
        return ((self.queue is None or gang.queue == self.queue)
                and (self.below is None or gang.priority < self.below)
                and self.only(None).admits(gang))  # `admits` stays one hot expression


class Pool:
    """The running gangs one action may stop this cycle, with what each holds per node.

    Per node it bounds the free vector any search can see: free now plus every member not
    yet taken. Taking a member moves its share from one term to the other; taking anyone
    else raises the bound (`taken`). A node whose bound holds no bundle of a gang is
    never looked at by its search, nor a member holding nothing elsewhere (`positions`).
    Caches are per tuple of resource names (a gang's) and per tests (a gang's shape)."""

    def __init__(self, gangs: list[PlacedGang], capacity: Capacity, taken: set[str],
                 young: list[tuple[PlacedGang, float]] | None = None):
        # Gangs the action would stop but for its minimum runtime, with when they may be.
        self.young = young or []
        self._gangs = gangs
        # Built when first read: a pool no search reads beyond its head (a preempt pool
        # with no lower priority) costs its sort only.
        self._by_queue: dict[str | None, list[PlacedGang]] | None = None
        self._members: set[int] | None = None
        self._capacity, self._taken = capacity, taken
        self._start: dict[int, int] = {}  # per list: the first member not taken
        self._tables: dict[tuple[str, ...], dict[int, Footprint]] = {}
        self._footprint_fns: dict[tuple[str, ...], Callable[[PlacedGang], Footprint]] = {}
        self._free_vecs: dict[tuple[str, ...], Callable[[str], Vec]] = {}
        self._bounds: dict[tuple[str, ...], dict[str, Vec]] = {}  # node -> bound
        self._groups: dict[tuple[str, ...], dict[Vec, list[str]]] = {}  # bound -> nodes
        self._later: list[PlacedGang] = []  # taken, not members: bounds still to raise
        self._hopeful: dict[tuple[tuple[str, ...], Tests], set[str]] = {}
        # see `positions`
        self._relevant: dict[tuple[object, ...], tuple[list[int], list[int]]] = {}
        # (names, tests) -> ...
        self._scores: dict[tuple[object, ...], dict[Vec, tuple[int, ...]]] = {}
        # (names, tests, free) -> ...
        self.class_scores: dict[tuple[object, ...], tuple[int, ...]] = {}
        self._on_nodes: dict[tuple[str, ...], dict[str, list[int]]] = {}
        self._kinds: dict[tuple[str, Resources], list[int]] | None = None

    @property
    def by_queue(self) -> dict[str | None, list[PlacedGang]]:
        """The members of each queue, in order (None: all of them)."""
        if self._by_queue is None:
            by_queue: dict[str | None, list[PlacedGang]] = {None: self._gangs}
            for gang in self._gangs:
                by_queue.setdefault(gang.queue, []).append(gang)
            self._by_queue = by_queue
        return self._by_queue

    def candidates(self, queue: str | None = None, *, other_than: Iterable[str] = (),
                   below: int | None = None) -> Candidates:
        """Members not yet taken: of `queue` if given, not of the queues `other_than`, of
        priority below `below` if given."""
        gangs = self._gangs if queue is None else self.by_queue.get(queue, [])
        start = self._start.get(id(gangs), 0)  # victims go least important first, so the
        while start < len(gangs) and gangs[start].gang_id in self._taken:  # head goes first
            start += 1
        self._start[id(gangs)] = start
        return Candidates(gangs, self._taken, frozenset(other_than), below, start, queue)

    # What gangs hold, what nodes have ------------------------------------------------
    def footprints(self, names: tuple[str, ...]
                   ) -> tuple[dict[int, Footprint], Callable[[PlacedGang], Footprint]]:
        """(footprints so far by gang id, gang -> what it holds per node of the capacity
        (`release` skips other nodes)); hot loops read the cache directly."""
        if names in self._footprint_fns:
            return self._tables[names], self._footprint_fns[names]
        cache = self._tables.setdefault(names, {})
        capacity = self._capacity

        def footprint(gang: PlacedGang) -> Footprint:
            found = cache.get(id(gang))  # placed gangs live as long as the cycle
            if found is None:
                found = held_per_node(gang, names)
                if not all(node in capacity for node, _ in found[0]):
                    found = _summed([e for e in found[0] if e[0] in capacity], len(names))
                cache[id(gang)] = found
            return found

        self._footprint_fns[names] = footprint
        return cache, footprint

    def free_vec(self, names: tuple[str, ...]) -> Callable[[str], Vec]:
        """node -> its free vector now; kept per node with the free amounts it came from
        (an identity check: the capacity replaces a node's amounts when they change)."""
        if names not in self._free_vecs:
            cache: dict[str, tuple[object, Vec]] = {}
            free = self._capacity.free

            def free_vec(node: str) -> Vec:
                amounts = free(node)
                found = cache.get(node)
                if found is None or found[0] is not amounts:
                    found = cache[node] = (amounts, amounts.vector(names))
                return found[1]

            self._free_vecs[names] = free_vec
        return self._free_vecs[names]

    def scores(self, names: tuple[str, ...], tests: Tests) -> dict[Vec, tuple[int, ...]]:
        """A cache of `score(tests, vec)` by vec, shared by the searches of the cycle."""
        return self._scores.setdefault((names, tests), {})

    # Bounds ---------------------------------------------------------------------------
    def _bound(self, names: tuple[str, ...]) -> dict[Vec, list[str]]:
        """Nodes holding members, grouped by bound (a few hundred distinct vectors)."""
        if names not in self._bounds:
            _, footprint = self.footprints(names)
            free_vec, bound = self.free_vec(names), dict[str, Vec]()
            for gang in self.candidates():
                for node, amounts in footprint(gang)[0]:
                    bound[node] = plus(bound.get(node) or free_vec(node), amounts)
            self._bounds[names] = bound
        if names not in self._groups:
            groups: dict[Vec, list[str]] = {}
            for node, amounts in self._bounds[names].items():
                groups.setdefault(amounts, []).append(node)
            self._groups[names] = groups
        return self._groups[names]

    def hopeful(self, names: tuple[str, ...], tests: Tests) -> set[str]:
        """Nodes holding members where some test could ever count during this cycle."""
        self._catch_up()
        key = (names, tests)
        if key not in self._hopeful:
            scores = self.scores(names, tests)
            self._hopeful[key] = {n for amounts, nodes in self._bound(names).items()
                                  if any(scored(scores, tests, amounts)) for n in nodes}
        return self._hopeful[key]

    def positions(self, candidates: Candidates, names: tuple[str, ...], tests: Tests
                  ) -> Iterator[int]:
        """Positions in `candidates.gangs` (from `start`) of those holding something on a
        node hopeful for `tests`, in order. Each gang is looked at once per cycle: the
        answers are kept, and read on from where the last search stopped."""
        gangs, start = candidates.gangs, candidates.start
        hopeful = self.hopeful(names, tests)
        known, read = self._relevant.setdefault((id(gangs), names, tests), ([], [0]))
        for at in range(bisect.bisect_left(known, start), len(known)):
            yield known[at]
        cache, footprint = self.footprints(names)
        for i in range(max(read[0], start), len(gangs)):
            read[0] = i + 1
            if any(n in hopeful for n, _ in (cache.get(id(gangs[i])) or footprint(gangs[i]))[0]):
                known.append(i)
                yield i

    @property
    def kinds(self) -> dict[tuple[str, Resources], list[int]]:
        """Positions among all members, in order, per queue and total (once per pool)."""
        if self._kinds is None:
            kinds: dict[tuple[str, Resources], list[int]] = {}
            for i, gang in enumerate(self._gangs):
                kinds.setdefault((gang.queue, gang.total), []).append(i)
            self._kinds = kinds
        return self._kinds

    def admitted_positions(self, candidates: Candidates, names: tuple[str, ...],
                           tests: Tests) -> Iterator[int]:
        """`candidates.admitted(positions(...))`, for candidates among all members whose
        filter (`allowed`) reads a gang's queue and total alone, read kind by kind: a kind
        the filter or `other_than` refuses is never read, nor a kind's taken head. A search
        by amount refuses most gangs (too large for what is left of their queue's amount):
        reading them one by one cost it seconds at 20,000 running gangs."""
        gangs, taken, allowed = self._gangs, self._taken, candidates.allowed
        assert candidates.gangs is gangs, "kinds index all members"
        streams = []
        for (queue, _), at in self.kinds.items():
            if queue in candidates.other_than:
                continue
            head = bisect.bisect_left(at, candidates.start)
            while head < len(at) and gangs[at[head]].gang_id in taken:
                head += 1
            if head < len(at) and (allowed is None or allowed(gangs[at[head]])):
                streams.append(itertools.islice(at, head, None))
        hopeful, below = self.hopeful(names, tests), candidates.below
        cache, footprint = self.footprints(names)
        for i in heapq.merge(*streams):
            gang = gangs[i]
            if (below is None or gang.priority < below) and gang.gang_id not in taken \
                    and any(n in hopeful for n, _ in (cache.get(id(gang)) or footprint(gang))[0]):
                yield i

    def on_nodes(self, names: tuple[str, ...]) -> dict[str, list[int]]:
        """Node -> positions among all members (`candidates().gangs`), in order, of those
        holding something of `names` there (once per pool)."""
        if names not in self._on_nodes:
            _, footprint = self.footprints(names)
            index: dict[str, list[int]] = {}
            for i, gang in enumerate(self.by_queue[None]):
                for node, _ in footprint(gang)[0]:
                    index.setdefault(node, []).append(i)
            self._on_nodes[names] = index
        return self._on_nodes[names]

    def taken(self, gang: PlacedGang) -> None:
        """`gang` was stopped for good this cycle (by any action): a member's share moves
        from one term of the bound to the other; anyone else's raises it (later, if this
        pool is read again)."""
        if self._members is None:
            self._members = {id(g) for g in self._gangs}
        if id(gang) not in self._members:
            self._later.append(gang)

    def _catch_up(self) -> None:
        later, self._later = self._later, []
        for gang in later:
            for names, bound in self._bounds.items():
                self._groups.pop(names, None)
                for node, amounts in self.footprints(names)[1](gang)[0]:
                    if node in bound:
                        bound[node] = plus(bound[node], amounts)
                        self._raised(names, node, bound[node])

    def _raised(self, names: tuple[str, ...], node: str, bound: Vec) -> None:
        for (of, tests), hopeful in self._hopeful.items():
            if of == names and node not in hopeful and any(score(tests, bound)):
                hopeful.add(node)  # bounds only grow: nodes only join
                everyone = id(self.by_queue[None])
                for key in [k for k in self._relevant if k[1:] == (of, tests)]:
                    if key[0] != everyone:
                        del self._relevant[key]  # read again from the start
                        continue
                    known, read = self._relevant[key]  # what was read gains the node's
                    have = set(known)
                    for i in self.on_nodes(names).get(node, ()):
                        if i < read[0] and i not in have:
                            bisect.insort(known, i)


def held_per_node(gang: PlacedGang, names: tuple[str, ...]) -> Footprint:
    """What `gang` holds of `names` on each node (those holding some), and their sum:
    kept with the gang (`PlacedGang.memo`), which lives as many cycles as it runs."""
    key = ("held per node", names)
    found = gang.memo.get(key)
    if found is None:
        per_node: dict[str, Vec] = {}
        for node, bundle in gang.bundles:
            held = per_node.get(node)
            amounts = bundle.vector(names)
            per_node[node] = amounts if held is None else plus(held, amounts)
        found = gang.memo[key] = _summed([(n, v) for n, v in per_node.items() if any(v)],
                                         len(names))
    return found


def _summed(entries: list[tuple[str, Vec]], width: int) -> Footprint:
    total = entries[0][1] if len(entries) == 1 else tuple(
        sum(v[i] for _, v in entries) for i in range(width))
    return tuple(entries), total


def score(tests: Tests, free: Vec) -> tuple[int, ...]:
    """What one node with `free` adds to each test: "fits" 1 if it holds the vector,
    "copies" how many copies of the vector it holds."""
    out = []
    for kind, amounts in tests:
        if kind == "fits":  # as Resources.fits_in: only what the vector asks for counts
            out.append(int(all(f >= v for f, v in zip(free, amounts) if v)))
        else:
            out.append(max(0, min(f // v for f, v in zip(free, amounts) if v > 0)))
    return tuple(out)


def scored(cache: dict[Vec, tuple[int, ...]], tests: Tests, free: Vec) -> tuple[int, ...]:
    found = cache.get(free)
    if found is None:
        found = cache[free] = score(tests, free)
    return found


def plus(a: Vec, b: Vec) -> Vec:
    return tuple(map(add, a, b))
