"""Queue usage, hierarchical fair shares and the dominant-share order between queues.

Fair share, as KAI Scheduler and Kueue compute it, per resource and top-down: a parent's
share (the root's is the cluster) goes first to each child's quota (capped by what it
wants: its demand, and its limit), and what is left is divided between the children that
still want more in proportion to their weights (water-filling). A queue's dominant share is
its largest usage/fair-share ratio over the resources it uses (DRF); queues further below
their fair share go first, comparing ancestors before their children (hierarchical DRF).
With time-based fair share (`core.usage`), what each queue used lately moves the weights
the surplus is divided by, and the order between queues at or above their fair share.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from raygang.core.queues import QueueTree, exceeds_limit
from raygang.core.resources import UNIT, ZERO, Resources, format_amount
from raygang.core.gang import PendingGang
from raygang.core.memory import CycleMemory
from raygang.core.snapshot import NodeState, PlacedGang
from raygang.core.usage import TimeShare, share_weights

Undo = Callable[[], object]  # what it returns (the undo's own undo) is not used
Share = dict[str, float]  # resource name -> amount (floats: shares are not allocations)
# A queue's place among its siblings: its dominant share, or with usage ordering
# (core.usage) (its share capped at 1, its usage over time, its share).
LevelKey = float | tuple[float, float, float]


class QueueBook:
    """Usage per queue during one cycle (a parent's is the sum of its children's), with undo."""

    def __init__(self, tree: QueueTree, placed: Iterable[PlacedGang] = (),
                 history: TimeShare | None = None, memory: CycleMemory | None = None):
        """`history`: usage over time (`core.usage`), if it moves shares and order.
        `memory`: the scheduler's (`core.memory`): sums and fair shares kept from the
        cycle before, used again while what they were worked out from is the same."""
        self.tree = tree
        self.history = history
        self._memory = memory
        self.fair: dict[str, Share] = {}
        self.cluster = ZERO  # the alive nodes' capacity, set by `share_out`
        self.usage: dict[str, Resources]
        # Moved by every change of what queues' order keys read (usage, usage over time,
        # fair shares): the keys worked out at one version serve every pass until the next
        self.version = 0
        self._keys: tuple[int, dict[str, tuple[LevelKey, ...]]] = (-1, {})
        # What each leaf runs in gangs reclaim cannot stop (non-preemptible classes).
        self.firm: dict[str, Resources]
        kept = None if memory is None else memory.book
        if kept is not None and kept[0] is tree and kept[1] is placed:
            self.usage, self.firm = dict(kept[2]), dict(kept[3])  # (changed in place)
            return
        specs = tree.specs
        self.usage = dict.fromkeys(specs, ZERO)
        self.firm = dict.fromkeys(specs, ZERO)
        by_queue: dict[str, list[Resources]] = {}
        firm: dict[str, list[Resources]] = {}
        for gang in placed:  # one pass, when the held gangs changed since the last cycle
            queue = gang.queue
            if queue in specs:  # a gang of a queue since removed still uses nodes
                by_queue.setdefault(queue, []).append(gang.total)
                if not gang.preemptible:
                    firm.setdefault(queue, []).append(gang.total)
        for queue, totals in by_queue.items():  # summed per queue first: 20,000 gangs
            self.add(queue, Resources.sum(totals) if memory is None else
                     memory.used.of(queue, totals))
        for queue, totals in firm.items():
            self.firm[queue] = Resources.sum(totals) if memory is None else \
                memory.firm.of(queue, totals)
        if memory is not None and isinstance(placed, tuple):
            memory.book = (tree, placed, dict(self.usage), dict(self.firm))

    def add(self, queue: str, amount: Resources) -> Undo:
        self.version += 1
        for name in self.tree.paths[queue]:
            self.usage[name] = self.usage[name] + amount
        return lambda: self.remove(queue, amount)

    def charge(self, queue: str, amount: Resources) -> Undo:
        """An admission's penalty on the queue's usage over time (none without)."""
        if self.history is None:
            return _nothing
        self.version += 1
        undo = self.history.charge(queue, amount)

        def uncharge() -> None:
            self.version += 1
            undo()
        return uncharge

    def remove(self, queue: str, amount: Resources) -> Undo:
        self.version += 1
        for name in self.tree.paths[queue]:
            self.usage[name] = self.usage[name] - amount
        return lambda: self.add(queue, amount)

    def limit_problem(self, queue: str, demand: Resources) -> str | None:
        """Why admitting `demand` into `queue` would break a limit on its path (the queue's
        own first, then its ancestors'), or None. Only the resources `demand` asks for
        count: a queue already over a limit (lowered since) in another resource does not
        block a gang that adds nothing to it."""
        for name in reversed(self.tree.paths[queue]):
            limit = self.tree.specs[name].limit
            if limit is None:
                continue  # no cap (and no sum to build)
            res = exceeds_limit(self.usage[name] + demand, limit.only(frozenset(demand)))
            if res is not None:
                assert limit is not None
                return (
                    f"queue {name!r} is at its limit: uses {res} "
                    f"{format_amount(res, self.usage[name].get(res))} of "
                    f"{format_amount(res, limit[res])}, the gang needs "
                    f"{format_amount(res, demand[res])} more"
                )
        return None

    def admission_problem(self, gang: PendingGang) -> str | None:
        """Why admitting `gang` would break a limit on its queue's path or, for a gang of a
        non-preemptible class, its borrow caps; None if neither."""
        problem = self.limit_problem(gang.queue, gang.total)
        if problem is None and not gang.preemptible:
            problem = self.borrow_problem(gang.queue, gang.total)
        return problem

    def within_quota(self, queue: str, demand: Resources) -> bool:
        """Whether `queue` would stay within its guaranteed quota with `demand` added
        (`in_quota`, with no sum built: reclaim asks it of every gang it tries)."""
        usage = self.usage[queue]
        return in_quota_units(self.tree.quota_units[queue],
                              lambda n: usage.units(n) + demand.units(n), demand)

    def borrow_problem(self, queue: str, demand: Resources) -> str | None:
        """Why a gang reclaim may never stop (a non-preemptible class) cannot add `demand`
        to its queue, or None. Borrowed capacity goes back through reclaim when its owner
        needs it; gangs reclaim cannot stop would keep a queue from its quota for good.
        So what a queue runs in such gangs beyond its quota must fit in the capacity no
        quota guarantees: per resource, every leaf's quota, or its non-preemptible usage
        where that is larger, add up to at most the cluster (KAI Scheduler keeps such
        gangs within quota outright; this is the same guarantee, on totals)."""
        quota = self.tree.specs[queue].quota
        after = self.firm[queue] + demand
        for res in demand:
            mine = after.units(res)
            if mine <= quota.units(res):
                continue
            others = sum(max(self.tree.specs[q].quota.units(res), self.firm[q].units(res))
                         for q in self.tree.leaves if q != queue)
            if others + mine > self.cluster.units(res):
                return (
                    f"queue {queue!r} would run {format_amount(res, after[res])} {res} in "
                    f"gangs of non-preemptible classes, beyond its quota of "
                    f"{format_amount(res, quota.get(res))}: those run beyond a quota only "
                    f"on capacity no queue is guaranteed, and other queues hold "
                    f"{format_amount(res, others / UNIT)} of the cluster's "
                    f"{format_amount(res, self.cluster.get(res))} {res} (their quotas, or "
                    f"such gangs beyond them)"
                )
        return None

    def add_firm(self, queue: str, amount: Resources) -> None:
        """Count an admitted gang of a non-preemptible class (after `add`)."""
        self.firm[queue] = self.firm[queue] + amount

    # Fair share -------------------------------------------------------------------------
    def share_out(self, nodes: Iterable[NodeState], pending: Iterable[PendingGang]) -> None:
        """Fair shares of the alive `nodes`' capacity, each leaf demanding what it uses
        plus what its `pending` gangs ask for (gangs of no leaf queue are not counted)."""
        asked: dict[str, list[Resources]] = {}
        for gang in pending:
            asked.setdefault(gang.queue, []).append(gang.total)
        self.share_out_demand(nodes, {q: Resources.sum(v) for q, v in asked.items()})

    def share_out_demand(self, nodes: Iterable[NodeState], pending: Mapping[str, Resources]
                         ) -> None:
        """`share_out`, given what each queue's pending gangs ask for in all."""
        totals = [node.total for node in nodes]
        memory = self._memory
        self.compute_fair_shares(
            Resources.sum(totals) if memory is None else memory.cluster.of("cluster", totals),
            {q: self.usage[q] + pending[q] if q in pending else self.usage[q]
             for q in self.tree.leaves},
        )

    def compute_fair_shares(self, cluster: Resources, demand: Mapping[str, Resources]) -> None:
        """Fair share of every queue, given the cluster's capacity and each leaf's demand
        (what it uses plus what its pending gangs ask for)."""
        self.version += 1
        self.cluster = cluster
        # A pure function of the tree, the cluster and the demand unless usage over time
        # moves the weights (`_used`): then kept while those three are the same. The
        # shares kept are never changed in place (each cycle's book only reads them).
        history = self.history
        memory = self._memory if history is None or not history.policy.k_value else None
        if memory is not None:
            kept = memory.fair
            if kept is not None and kept[0] is self.tree and kept[1] == cluster \
                    and kept[2] == demand:
                self.fair = kept[3]
                return
        want = _wants(self.tree, demand)
        shares: dict[str | None, Share] = {None: cluster.to_dict()}
        for parent in self.tree.top_down():
            kids = self.tree.children.get(parent, [])
            if not kids:
                continue
            pool = shares[parent]
            for kid in kids:
                shares[kid] = {}
            for res in sorted(set(pool).union(*(want[k] for k in kids))):
                items = [
                    (self.tree.specs[k].quota.get(res), want[k].get(res, 0.0),
                     self.tree.specs[k].weight)
                    for k in kids
                ]
                amounts = water_fill(pool.get(res, 0.0), items,
                                     *self._used(kids, res, pool.get(res, 0.0)))
                for kid, amount in zip(kids, amounts):
                    shares[kid][res] = amount
        self.fair = {name: share for name, share in shares.items() if name is not None}
        if memory is not None:
            memory.fair = (self.tree, cluster, dict(demand), self.fair)

    def _used(self, kids: list[str], res: str, pool: float
              ) -> tuple[list[float] | None, float]:
        """(each kid's usage of `res` over time as a share of `pool`, KAI's k), or
        (None, 0) where usage does not move shares."""
        history = self.history
        if history is None or not history.policy.k_value or pool <= 0:
            return None, 0.0
        cluster = self.cluster.get(res)
        return ([history.amount(k, res, cluster) / pool for k in kids],
                history.policy.k_value)

    def share_ratio(self, queue: str) -> float:
        """Dominant share: the largest usage / fair share over the resources it uses
        (below 1: the queue is below its fair share)."""
        fair = self.fair.get(queue, {})
        ratio = 0.0
        usage = self.usage[queue]
        for res in usage:
            used = usage[res]
            if used <= 0:
                continue
            share = fair.get(res, 0.0)
            ratio = max(ratio, used / share if share > 0 else math.inf)
        return ratio

    def order_keys(self, leaves: Iterable[str]) -> dict[str, tuple[LevelKey, ...]]:
        """Each leaf's `order_key`, kept while nothing it reads changed: a cycle's passes
        each order the same queues, and only what they admit or stop moves a key."""
        version, kept = self._keys
        if version != self.version:
            kept = {}
            self._keys = (self.version, kept)
        keys = {}
        for leaf in leaves:
            key = kept.get(leaf)
            if key is None:
                key = kept[leaf] = self.order_key(leaf)
            keys[leaf] = key
        return keys

    def order_key(self, leaf: str) -> tuple[LevelKey, ...]:
        """Ancestors' dominant shares from the top down, then the leaf's own (each its
        `level_key`)."""
        return tuple(self.level_key(name) for name in self.tree.paths[leaf])

    def level_key(self, queue: str) -> LevelKey:
        """Where `queue` stands among its siblings: its dominant share. With usage
        ordering (`core.usage`): queues below their fair share still go first, furthest
        below first; at or above it (competing for the surplus), the one that used less
        over time relative to its fair share goes first; and that usage breaks ties below
        it too (two queues holding nothing now)."""
        ratio = self.share_ratio(queue)
        history = self.history
        if history is None or not history.policy.order_by_usage:
            return ratio
        used = history.ratio(queue, self.fair.get(queue, {}), self.cluster)
        return (min(ratio, 1.0), used, ratio)


def in_quota(quota: Resources, usage: Resources, gang: Resources) -> bool:
    """Whether `usage` (which includes `gang`) is within `quota`. A quota guarantees the
    resources it names: only those are compared (a GPU quota covers the CPUs its gangs
    ask alongside), and a gang asking for none of them is guaranteed nothing."""
    return in_quota_units({n: quota.units(n) for n in quota}, usage.units, gang)


def in_quota_units(quota: Mapping[str, int], usage: Callable[[str], int],
                   gang: Resources) -> bool:
    """`in_quota` on amounts in units: `quota` the quota's named resources, `usage(name)`
    the usage with the gang (for callers that sum usage in plain dicts, as reclaim's
    protection does for every running gang each cycle)."""
    return any(gang.units(n) > 0 for n in quota) and all(
        usage(n) <= amount for n, amount in quota.items())


def _wants(tree: QueueTree, demand: Mapping[str, Resources]) -> dict[str, Share]:
    """What each queue would use if it could: its leaves' demand, capped by limits."""
    want: dict[str, Share] = {}
    order = [q for q in tree.top_down() if q is not None]
    for name in reversed(order):  # children before parents
        if tree.is_leaf(name):
            total = demand.get(name, ZERO).to_dict()
        else:
            total = {}
            for kid in tree.children[name]:
                for res, amount in want[kid].items():
                    total[res] = total.get(res, 0.0) + amount
        limit = tree.specs[name].limit
        if limit is not None:
            total = {r: min(a, limit[r]) if r in limit else a for r, a in total.items()}
        want[name] = total
    return want


def water_fill(pool: float, items: list[tuple[float, float, float]],
               usage: list[float] | None = None, k_value: float = 0.0) -> list[float]:
    """Divide `pool` among (quota, want, weight) claimants: quotas first (capped by want;
    pro rata if they overcommit the pool), then the rest by weight, never above want.
    With `usage` (each claimant's usage over time, as a share of the pool), each round
    divides by KAI's share weights instead (`core.usage.share_weights`, factor `k_value`)."""
    given = [min(quota, want) for quota, want, _ in items]
    guaranteed = sum(given)
    if guaranteed >= pool:
        return [g * pool / guaranteed if guaranteed else 0.0 for g in given]
    rest = pool - guaranteed
    active = [i for i, (_, want, _) in enumerate(items) if want > given[i]]
    while rest > 1e-9 and active:
        if usage is None:
            weight = {i: items[i][2] for i in active}
        else:  # re-derived every round over those still wanting more, as KAI does
            weight = dict(zip(active, share_weights([items[i][2] for i in active],
                                                    [usage[i] for i in active], k_value)))
        weights = sum(weight.values())
        portion = {i: rest * weight[i] / weights for i in active}
        full = [i for i in active if items[i][1] - given[i] <= portion[i]]
        if not full:  # nobody saturates: everyone takes its weighted portion
            for i in active:
                given[i] += portion[i]
            break
        for i in full:  # saturate, then divide what is left again among the others
            rest -= items[i][1] - given[i]
            given[i] = items[i][1]
        active = [i for i in active if i not in full]
    return given


def _nothing() -> None:
    return None


class QueueOrder:
    """Which leaf queue goes next: the lowest hierarchical dominant share, then name.
    Admitting into a queue changes the shares of its ancestors only, so only leaves under
    the same top-level queue are re-keyed."""

    def __init__(self, book: QueueBook, leaves: Sequence[str]):
        self.book = book
        self.keys = book.order_keys(leaves)
        # The last pick, until a key changes or a queue is done: a pass picks the same
        # queue for each of its gangs it does not admit
        self._picked: str | None = None

    def pick(self) -> str | None:
        if self._picked is None and self.keys:
            # The least (key, name): compared as pairs in C, not a key function per queue
            self._picked = min(zip(self.keys.values(), self.keys))[1]
        return self._picked

    def touched(self, queue: str) -> None:
        self._picked = None
        paths = self.book.tree.paths
        top = paths[queue][0]
        ratios: dict[str, LevelKey] = {}  # each queue's key once (the top's is everyone's)
        for leaf in self.keys:
            if paths[leaf][0] == top:
                for name in paths[leaf]:
                    if name not in ratios:
                        ratios[name] = self.book.level_key(name)
                self.keys[leaf] = tuple(ratios[name] for name in paths[leaf])

    def done(self, queue: str) -> None:
        self.keys.pop(queue, None)
        if queue == self._picked:
            self._picked = None
