"""Reclaim by amount: what reclaim may take from each queue, and the search for victims
that keeps to it where the gangs beyond the queues' shares would not make room.

What a queue runs beyond its quota and fair share is, for reclaim, an amount: the gangs
the walk of its gangs (most important first, `victims.reclaim_protected`) leaves beyond
both, those reclaim may stop now (not those a minimum runtime protects: they keep their
part), counted in the resources the queue's quota names (all, where it names none). Which
gangs make that amount is the walk's choice, and says nothing of where they run: they may
sit on nodes where none of them helps a reclaiming gang, while two gangs the walk keeps,
on one node, would (issue 28). So where the gangs beyond would not make room (the plain
walk over them, victims.py), reclaim may stop any of those queues' gangs, as long as what
it takes from each queue adds up to no more than that queue's amount (less what this
cycle took from it already). The order ranks the victims; it does not decide whether a
set of them exists.

That second search (`ExcessSearch`) cannot be a walk over a prefix of the order: a queue's
amount can run out on gangs that do not help, and a prefix may hold no set that fits where
another set does. Where the gangs it may stop are few (`SMALL`), it searches depth first
over them in order, each taken (if its queue's amount allows) before it is left out, so
the first set found is the least important in that order; a branch is cut as soon as the
gang would not fit even with every candidate not yet left out freed (a `Probe` tells, as
for the walk); it gives up after `BACKTRACKS` steps beyond one look at every candidate
(choosing under amounts per queue is a knapsack). Where they are many, a walk over a
prefix would read thousands of them before some node has room for a large bundle, and a
depth-first search more: it goes node by node instead, in the order the candidates touch
the nodes, taking on each what the amounts allow until the gang fits (for gangs whose
room the probe tells exactly; others wait for the gangs beyond). In both, the victims the
gang does not need are then given back, most important first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from raygang.core.capacity import Capacity
from raygang.core.fairshare import QueueBook
from raygang.core.gang import PendingGang
from raygang.core.preemption.pool import Candidates, Pool
from raygang.core.preemption.probe import Probe
from raygang.core.resources import Resources
from raygang.core.snapshot import PlacedGang
from raygang.core.preemption.victims import VictimSearch

SMALL = 256  # gangs it may stop, up to which the search by amount is depth first
BACKTRACKS = 1_000  # its steps beyond one look at every candidate
NONE = Resources()


class Amounts:
    """What one search may take from each queue (a queue not named: nothing): its amount
    (`amounts`, in the resources it counts: `counted`, every resource where that names
    none) less what this cycle took from it already (`taken`); and the gangs the search by
    amount may stop: a pool and its candidates (`candidates`, built when first asked).
    `frees(victim)`: what stopping it takes from its queue (a gang stopped whole takes its
    surplus with it)."""

    def __init__(self, amounts: Mapping[str, Resources], counted: Mapping[str, frozenset[str]],
                 taken: Mapping[str, Resources], frees: Callable[[PlacedGang], Resources],
                 candidates: Callable[[], tuple[Pool, Candidates]]):
        self._amounts, self._counted, self._taken = amounts, counted, taken
        self._frees, self.candidates = frees, candidates
        self._left: dict[str, Resources | None] = {}

    @property
    def queues(self) -> Iterable[str]:
        return self._amounts

    def cost(self, victim: PlacedGang) -> Resources:
        """What stopping `victim` takes from its queue's amount."""
        names = self._counted.get(victim.queue)
        freed = self._frees(victim)
        return freed.only(names) if names else freed

    def left(self, queue: str) -> Resources | None:
        """What is left of the queue's amount (None: it has none)."""
        if queue not in self._left:
            amount = self._amounts.get(queue)
            taken = self._taken.get(queue, NONE)
            names = self._counted.get(queue)
            self._left[queue] = None if amount is None else \
                amount - (taken.only(names) if names else taken)
        return self._left[queue]

    def alone(self, queues: Iterable[str | None], largest: Mapping[str, Resources]
              ) -> Callable[[PlacedGang], bool] | None:
        """A filter of the candidates of `queues`: whether a gang alone is within what is
        left of its queue's amount; None where every one is (`largest`: per queue, the
        most one of its gangs holds of what it counts). It reads a gang's queue and own
        total alone (without the surplus a gang stopped whole takes along: `allow` checks
        in full), so that the search reads it once per kind (`Pool.admitted_positions`)."""
        checked: dict[str, object] = {}  # queue -> None (no amount), or what is left:
        for queue in queues:  # (resource, units) where it counts what its quota names
            if queue is None:
                continue
            left = self.left(queue)
            if left is None:
                checked[queue] = None
            elif not largest.get(queue, NONE).fits_in(left):
                names = self._counted.get(queue)
                checked[queue] = tuple((n, left.units(n)) for n in sorted(names)) \
                    if names else left
        if not checked:
            return None

        def alone(victim: PlacedGang) -> bool:
            left = checked.get(victim.queue, True)
            if left is True or left is None:
                return left is True
            if type(left) is tuple:
                units = victim.total.units
                return all(units(name) <= cap for name, cap in left)
            return victim.total.fits_in(left)  # type: ignore[arg-type]

        return alone

    def allow(self, victims: Iterable[PlacedGang]) -> bool:
        """Whether `victims` together are within what is left of their queues' amounts."""
        taken: dict[str, Resources] = {}
        for victim in victims:
            taken[victim.queue] = taken.get(victim.queue, NONE) + self.cost(victim)
        return all((left := self.left(q)) is not None and t.fits_in(left)
                   for q, t in taken.items())


class ExcessSearch(VictimSearch):
    """One search for one pending gang: victims among the candidates, together within
    what is left of their queues' amounts."""

    def __init__(self, gang: PendingGang, capacity: Capacity, book: QueueBook, pool: Pool,
                 amounts: Amounts):
        super().__init__(gang, capacity, book, pool)
        self.amounts = amounts
        self.left: dict[str, Resources] = {}  # queue -> what is left, as the search goes

    def run(
        self, candidates: Candidates
    ) -> tuple[tuple[str, ...], list[PlacedGang]] | None:
        """(nodes for the gang, victims) with the victims' resources left freed on the
        scratch state, or None with the scratch state untouched. The caller found that
        the gang does not fit with nothing freed."""
        chosen = Probe(self.gang, self.capacity, self.book, self.pool)  # the victims taken
        relevant = _relevant(chosen, candidates, self.pool)
        if len(candidates.gangs) - candidates.start <= SMALL:
            taken = self._search([candidates.gangs[i] for i in relevant], chosen)
        elif chosen.exact and chosen.quiet:
            taken = self._by_node(candidates, chosen, relevant)
        else:
            taken = None  # many candidates and no exact test: too long to look
        if taken is None:
            self.undo()  # as it was
            return None
        for i in sorted(taken, reverse=True):  # give back, most important first
            victim = taken.pop(i)
            chosen.apply(victim, -1)
            if not self._fits_with(chosen, taken):
                taken[i] = victim
                chosen.apply(victim, 1)
        if not chosen.exact:  # placement is not monotone: look again (victims.py)
            taken = self._minimal(taken)
        nodes = self._real_fits(taken)
        assert nodes is not None, "the search by amount lost a fit it had found"
        return nodes, list(taken.values())

    def _by_node(self, candidates: Candidates, chosen: Probe, at: Iterator[int]
                 ) -> dict[int, PlacedGang] | None:
        """Node by node, in the order the candidates touch them: the first time a
        candidate touches a node, take what its queue's amount allows of the candidates
        there, in order, until the gang fits; give back those of a node that changed no
        count (they only spend amounts). Looks at a few nodes where many candidates are;
        the victim order picks the node."""
        gangs, index = candidates.gangs, self.pool.on_nodes(chosen.names)
        footprint, hopeful = self.pool.footprints(chosen.names)[1], self.pool.hopeful(
            chosen.names, chosen.tests)
        taken: dict[int, PlacedGang] = {}
        seen: set[str] = set()
        for i in at:
            for node, _ in footprint(gangs[i])[0]:
                if node in seen or node not in hopeful:
                    continue
                seen.add(node)
                counts, here = list(chosen.counts), []
                for j in index.get(node, ()):
                    victim = gangs[j]
                    if j < candidates.start or j in taken or not candidates.admits(victim) \
                            or not self._charge(victim, 1):
                        continue
                    chosen.apply(victim, 1)
                    taken[j] = victim
                    here.append(j)
                    if chosen.verdict():
                        return taken
                if chosen.counts == counts:
                    for j in here:
                        self._charge(taken[j], -1)
                        chosen.apply(taken.pop(j), -1)
        return None

    def _fits_with(self, probe: Probe, freed: dict[int, PlacedGang]) -> bool:
        verdict = probe.verdict()
        return verdict if verdict is not None else self._real_fits(freed) is not None

    def _search(self, order: list[PlacedGang], chosen: Probe
                ) -> dict[int, PlacedGang] | None:
        """Depth first over `order`, taking before leaving out; `chosen` tracks the
        victims taken. Returns them (by position in `order`) once the gang fits, or None.
        Once the first descent is over, `hope` tracks the victims taken and every
        candidate not decided yet, and cuts a branch where even those would not make
        room (the first descent often ends early)."""
        taken: dict[int, PlacedGang] = {}
        decided: list[tuple[int, bool]] = []  # (position, taken?) along the branch
        hope: Probe | None = None
        i, steps = 0, len(order) + BACKTRACKS
        while True:
            if self._fits_with(chosen, taken):
                return taken
            steps -= 1
            if steps < 0:
                return None  # a knapsack: give up rather than take long
            if i < len(order) and (hope is None or hope.verdict() is not False):
                victim = order[i]
                took = self._charge(victim, 1)
                if took:
                    chosen.apply(victim, 1)
                    taken[i] = victim
                elif hope is not None:
                    hope.apply(victim, -1)
                decided.append((i, took))
                i += 1
                continue
            if hope is None:  # all decided: hope is what is taken
                hope = Probe(self.gang, self.capacity, self.book, self.pool)
                for victim in taken.values():
                    hope.apply(victim, 1)
            while decided:  # back to the last victim taken: leave it out instead
                j, took = decided.pop()
                victim = order[j]
                if took:
                    self._charge(victim, -1)
                    chosen.apply(victim, -1)
                    del taken[j]
                    hope.apply(victim, -1)
                    decided.append((j, False))
                    i = j + 1
                    break
                hope.apply(victim, 1)
            else:
                return None

    def _charge(self, victim: PlacedGang, sign: int) -> bool:
        """Count `victim` against its queue's amount (sign 1: if it allows) or back."""
        cost = self.amounts.cost(victim)
        left = self.left.get(victim.queue)
        if left is None:
            left = self.amounts.left(victim.queue) or NONE
        if sign > 0:
            if not cost.fits_in(left):
                return False
            self.left[victim.queue] = left - cost
        else:
            self.left[victim.queue] = left + cost
        return True


def _relevant(probe: Probe, candidates: Candidates, pool: Pool) -> Iterator[int]:
    """Positions of the candidates that may change whether the gang fits, in order: those
    holding something it asks for and, once totals and limits hold (`Probe.quiet`),
    something on a node where a bundle could ever fit (`Pool.positions`)."""
    gangs, names = candidates.gangs, probe.names
    if probe.quiet and gangs is pool.by_queue[None]:
        at = pool.admitted_positions(candidates, names, probe.tests)
    else:
        at = candidates.admitted(pool.positions(candidates, names, probe.tests) if probe.quiet
                                 else range(candidates.start, len(gangs)))
    for i in at:
        units = gangs[i].total.units
        if any(units(n) for n in names):
            yield i
