"""One scheduling cycle as a pure function: `schedule(snapshot, pending, config, now) -> Plan`.

A cycle runs the configured actions in order (`allocate`, `reclaim`, `preempt`), each a
pass over the pending gangs in fair-share order: the queue furthest below its fair share
goes next (hierarchically, ancestors first), and inside a queue the total order
(-priority, submission sequence, id). Every tentative move is made on a scratch copy of
the free capacity and the queues' usage. Without backfill, the first gang of a queue that
cannot be admitted (and could fit on this cluster at all) holds back the rest of its queue
(strict FIFO per queue, like Kueue's StrictFIFO); other queues go on.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from types import MappingProxyType

from raygang.core.capacity import Capacity
from raygang.core.config import SchedulerConfig
from raygang.core.draining import Draining
from raygang.core.explain import why_not
from raygang.core.fairshare import QueueBook
from raygang.core.gang import PendingGang
from raygang.core.placement import place
from raygang.core.plan import Admission, Plan, Preemption, WaitCode, Waiting
from raygang.core.pool import Candidates, Pool
from raygang.core.snapshot import ClusterSnapshot, PlacedGang
from raygang.core.spec import GangSpec
from raygang.core.victims import VictimSearch, reclaim_protected, victim_order


def schedule(
    snapshot: ClusterSnapshot,
    pending: Sequence[PendingGang],
    config: SchedulerConfig,
    now: float,
) -> Plan:
    """Admit what fits, reclaim and preempt what policy allows; say why the rest wait."""
    return _Cycle(snapshot, config, now).run(pending)


def unschedulable_reason(
    spec: GangSpec, snapshot: ClusterSnapshot, config: SchedulerConfig | None = None
) -> str | None:
    """Why `spec` could never be admitted: a bad queue, a limit below its size, or no
    room for it on this cluster even if it were empty. None if it could be."""
    if config is not None:
        problem = config.queue_tree.problem(spec)
        if problem:
            return problem
    empty = Capacity(snapshot.alive_nodes, use_totals=True)
    if not empty.node_ids:
        return "the cluster has no alive nodes"
    if place(spec.bundles, spec.strategy, empty) is not None:
        return None
    return why_not(spec.bundles, spec.strategy, empty) + " (even with the cluster empty)"


class _EverFits:
    """Whether a shape fits the cluster with nothing running, cached per shape."""

    def __init__(self, snapshot: ClusterSnapshot):
        self._snapshot = snapshot
        self._empty: Capacity | None = None
        self._cache: dict = {}
        self._by_gang: dict[int, bool] = {}  # pending gangs live as long as the cycle

    @property
    def empty(self) -> Capacity:
        if self._empty is None:
            self._empty = Capacity(self._snapshot.alive_nodes, use_totals=True)
        return self._empty

    def fits(self, gang: PendingGang) -> bool:
        found = self._by_gang.get(id(gang))  # cheaper than hashing its shape again
        if found is None:
            found = self._cache.get(gang.shape)
            if found is None:
                found = self._cache[gang.shape] = place(
                    gang.bundles, gang.strategy, self.empty) is not None
            self._by_gang[id(gang)] = found
        return found


class _QueueOrder:
    """Which leaf queue goes next: the lowest hierarchical dominant share, then name.
    Admitting into a queue changes the shares of its ancestors only, so only leaves under
    the same top-level queue are re-keyed."""

    def __init__(self, book: QueueBook, leaves: Sequence[str]):
        self.book = book
        self.keys = {q: book.order_key(q) for q in leaves}

    def pick(self) -> str | None:
        if not self.keys:
            return None
        return min(self.keys, key=lambda q: (self.keys[q], q))

    def touched(self, queue: str) -> None:
        paths = self.book.tree.paths
        top = paths[queue][0]
        ratios: dict[str, float] = {}  # each queue's share once (the top's is everyone's)
        for leaf in self.keys:
            if paths[leaf][0] == top:
                for name in paths[leaf]:
                    if name not in ratios:
                        ratios[name] = self.book.share_ratio(name)
                self.keys[leaf] = tuple(ratios[name] for name in paths[leaf])

    def done(self, queue: str) -> None:
        self.keys.pop(queue, None)


class _Cycle:
    def __init__(self, snapshot: ClusterSnapshot, config: SchedulerConfig, now: float):
        self.snapshot = snapshot
        self.config = config
        self.now = now
        self.tree = config.queue_tree
        self.capacity = Capacity(snapshot.alive_nodes)
        self.draining = Draining(self.capacity)  # what this cycle's victims free
        self.ever = _EverFits(snapshot)
        self.book = QueueBook(self.tree, snapshot.placed)
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.admitted: set[str] = set()
        self.tried: dict[str, list] = {}  # gang id -> (action, candidates) that failed it
        self.limited: dict[str, str] = {}  # gang id -> the limit it hit last
        self.taken: set[str] = set()  # victims chosen this cycle
        self.failed: set = set()  # shapes (per action) that did not fit this cycle
        self.waiting: dict[str, Waiting] = {}
        self._pools: dict[str, Pool] = {}  # action -> the gangs it may stop
        self._stoppable: list[PlacedGang] | None = None

    # The cycle ----------------------------------------------------------------------------
    def run(self, pending: Sequence[PendingGang]) -> Plan:
        self.left = self._by_queue(pending)
        positions = {g.gang_id: i + 1 for gangs in self.left.values() for i, g in enumerate(gangs)}
        self.book.share_out(self.snapshot.alive_nodes, itertools.chain(*self.left.values()))
        for action in self.config.actions:
            self._pass(getattr(self, f"_{action}"))
        self._explain()
        return Plan(
            admissions=tuple(self.admissions),
            waiting=MappingProxyType(self.waiting),
            at=self.now,
            preemptions=tuple(self.preemptions),
            positions=MappingProxyType(positions),
        )

    def _by_queue(self, pending: Sequence[PendingGang]) -> dict[str, list[PendingGang]]:
        """Pending gangs per leaf queue, in order. A gang whose queue is gone from the
        config (or is no leaf any more) waits with the reason."""
        left: dict[str, list[PendingGang]] = {}
        for gang in sorted(pending, key=PendingGang.order_key):
            problem = self.tree.problem(gang.spec)
            if problem:
                self.waiting[gang.gang_id] = Waiting(gang.gang_id, WaitCode.UNSCHEDULABLE, problem)
            else:
                left.setdefault(gang.queue, []).append(gang)
        return left

    def _pass(self, attempt: Callable[[PendingGang], bool]) -> None:
        """Offer each queue's gangs, in fair-share order, to `attempt`; without backfill a
        queue stops at its first gang that is not admitted."""
        order = _QueueOrder(self.book, [q for q, gangs in self.left.items() if gangs])
        at = dict.fromkeys(self.left, 0)
        while (queue := order.pick()) is not None:
            gangs = self.left[queue]
            gang = gangs[at[queue]]
            at[queue] += 1
            if at[queue] >= len(gangs):
                order.done(queue)
            if not self.ever.fits(gang):
                continue  # never fits here: it blocks nobody
            if attempt(gang):
                order.touched(queue)
            elif not self.config.backfill:
                order.done(queue)
        for queue, gangs in self.left.items():
            self.left[queue] = [g for g in gangs if g.gang_id not in self.admitted]

    # Actions ------------------------------------------------------------------------------
    def _allocate(self, gang: PendingGang) -> bool:
        problem = self.book.admission_problem(gang)
        if problem:
            self.limited[gang.gang_id] = problem
            return False
        key = ("allocate", gang.shape)
        nodes = None if key in self.failed else place(gang.bundles, gang.strategy, self.capacity)
        if nodes is None:
            self.failed.add(key)  # capacity only shrinks during allocate
            return False
        self._admit(gang, nodes, "allocate", [])
        return True

    def _reclaim(self, gang: PendingGang) -> bool:
        """A queue below its quota takes back what other queues run beyond their quota and
        fair share (`reclaim_protected` says which gangs that leaves)."""
        if not self.book.within_quota(gang.queue, gang.total):
            return False
        pool = self._pool("reclaim")
        return self._search(gang, pool, pool.candidates(other_than=gang.queue), "reclaim")

    def _preempt(self, gang: PendingGang) -> bool:
        """Higher priority displaces strictly lower-priority preemptible gangs of its own
        queue — or of any queue when it is of a non-preemptible class (inference)."""
        across = self.config.cross_queue_preemption and not gang.preemptible
        pool = self._pool("preempt")
        below = pool.candidates(None if across else gang.queue, below=gang.priority)
        return self._search(gang, pool, below, "preempt")

    def _pool(self, action: str) -> Pool:
        """Running gangs that `action` may stop, least important first (once per cycle)."""
        if action not in self._pools:
            if self._stoppable is None:  # sorted once: the reclaim pool is a subset
                self._stoppable = sorted(
                    (g for g in self.snapshot.placed
                     if g.preemptible and not g.draining and not g.protected(self.now)),
                    key=victim_order,
                )
            ordered = self._stoppable
            if action == "reclaim":
                kept = reclaim_protected(self.book, self.snapshot.placed)
                ordered = [g for g in ordered if g.gang_id not in kept]
            self._pools[action] = Pool(ordered, self.capacity, self.taken)
        return self._pools[action]

    def _search(self, gang: PendingGang, pool: Pool, candidates: Candidates,
                action: str) -> bool:
        problem = None if gang.preemptible else self.book.borrow_problem(gang.queue, gang.total)
        if problem:  # stopping others (always preemptible gangs) never changes this
            self.limited[gang.gang_id] = problem
            return False
        key = (action, gang.shape, gang.priority, gang.queue, gang.preemptible)
        found = None
        if key not in self.failed:
            found = VictimSearch(gang, self.capacity, self.book, pool).run(candidates)
        if found is None:
            self.failed.add(key)
            self.tried.setdefault(gang.gang_id, []).append((action, candidates))
            return False
        nodes, victims = found
        self.draining.add(victims)
        for victim in victims:
            self.taken.add(victim.gang_id)
            for other in self._pools.values():
                other.taken(victim)
            self.preemptions.append(
                Preemption(victim.gang_id, gang.gang_id, action, _why(action, victim, gang))
            )
        self.failed.clear()  # freed leftovers may now fit shapes that failed before
        self._admit(gang, nodes, action if victims else "allocate", victims)
        return True

    def _admit(
        self, gang: PendingGang, nodes: tuple[str, ...], action: str, victims: list[PlacedGang]
    ) -> None:
        own = tuple(v.gang_id for v in victims)
        waits = self.draining.take(nodes, gang.bundles, own)
        self.capacity.reserve(zip(nodes, gang.bundles))
        self.book.add(gang.queue, gang.total)
        if not gang.preemptible:
            self.book.add_firm(gang.queue, gang.total)
        self.admitted.add(gang.gang_id)
        self.limited.pop(gang.gang_id, None)
        self.admissions.append(Admission(gang.gang_id, nodes, action, own, waits))

    # Reasons ------------------------------------------------------------------------------
    def _explain(self) -> None:
        """A reason with numbers for every gang left pending, against the capacity left
        after this cycle's decisions (what users see next); computed once per shape."""
        by_shape: dict = {}
        for queue, gangs in self.left.items():
            blocker: PendingGang | None = None
            for gang in gangs:
                self.waiting[gang.gang_id] = self._reason(gang, blocker, by_shape)
                if blocker is None and self.ever.fits(gang) and not self.config.backfill:
                    blocker = gang

    def _reason(self, gang: PendingGang, blocker: PendingGang | None, by_shape: dict) -> Waiting:
        if not self.ever.fits(gang):
            reason = why_not(gang.bundles, gang.strategy, self.ever.empty)
            return Waiting(gang.gang_id, WaitCode.UNSCHEDULABLE,
                           f"cannot fit on the cluster as it is now, even empty: {reason}")
        if blocker is not None:
            first = self.waiting[blocker.gang_id].message
            return Waiting(
                gang.gang_id, WaitCode.BEHIND,
                f"waiting behind gang {blocker.gang_id} (priority {blocker.priority}, earlier "
                f"in queue {gang.queue!r}; backfill is off), which cannot start yet: {first}",
            )
        if gang.gang_id in self.limited:
            return Waiting(gang.gang_id, WaitCode.LIMIT, self.limited[gang.gang_id])
        if gang.shape not in by_shape:
            by_shape[gang.shape] = why_not(gang.bundles, gang.strategy, self.capacity)
        # Whether anyone was left to stop is looked at only here, for the few gangs that
        # end up waiting: a search's candidates can be long to walk.
        notes = "".join(
            _NO_ROOM[action, "none" if next(iter(candidates), None) is None else "some"]
            for action, candidates in self.tried.get(gang.gang_id, ())
        )
        return Waiting(gang.gang_id, WaitCode.NO_FIT, by_shape[gang.shape] + notes)


_NO_ROOM = {
    ("reclaim", "none"): "; no other queue runs preemptible gangs beyond its quota and fair "
                         "share to reclaim",
    ("reclaim", "some"): "; reclaiming what other queues borrowed beyond their quota and fair "
                         "share would not make room",
    ("preempt", "none"): "; no lower-priority preemptible gang runs that it may preempt",
    ("preempt", "some"): "; preempting lower-priority gangs would not make room",
}


def _why(action: str, victim: PlacedGang, gang: PendingGang) -> str:
    if action == "reclaim":
        return (
            f"reclaimed for gang {gang.gang_id}: queue {gang.queue!r} is below its quota and "
            f"queue {victim.queue!r} runs this gang beyond its own quota and fair share"
        )
    return (
        f"preempted for gang {gang.gang_id} (priority {gang.priority} > {victim.priority}"
        f"{'' if victim.queue == gang.queue else f', from queue {gang.queue!r}'})"
    )
