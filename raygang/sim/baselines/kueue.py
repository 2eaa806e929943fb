"""Kueue's admission and preemption rules, on raygang's snapshot (`decide`).

The setup the issue names: one ClusterQueue per tenant, all in one cohort, each with a
nominal quota (its guarantee), unlimited borrowing (no `borrowingLimit`), queueing
strategy BestEffortFIFO, `preemption.reclaimWithinCohort: Any` and
`preemption.withinClusterQueue: LowerPriority`. The rules, from Kueue's documentation
(concepts/cluster_queue: "Queueing strategy", "Cohort", "Preemption") and its scheduler
(pkg/scheduler/scheduler.go, pkg/scheduler/preemption/preemption.go, v0.5-v0.6):

- Quota: a workload fits its ClusterQueue when the queue's usage plus the request stays
  within nominal + borrowing limit (unlimited here) and the cohort's usage plus the
  request within the cohort's requestable resources (the sum of nominal quotas).
- Order: each ClusterQueue offers its head; heads that fit without borrowing go before
  those that borrow, then higher priority, then the older (queue-order timestamp).
  BestEffortFIFO: a head that cannot be admitted is set aside and the next workload of
  its queue becomes the head (in one cycle here, as Kueue reaches it over a few).
- Preemption: a workload that does not fit may preempt (a) workloads of ClusterQueues
  of the cohort that are borrowing (reclaimWithinCohort: Any, whatever their priority)
  and (b) lower-priority workloads of its own queue. Candidates: other queues first,
  then lower priority, then the most recently admitted. Kueue removes them in that
  order, skipping a queue that stopped borrowing, until the workload fits — without
  borrowing when any candidate is from another queue — then gives back, in reverse
  order, every one it fits without (`minimalPreemptions`).

Kueue admits by quota and leaves pods to kube-scheduler; raygang gangs also need nodes,
so "fits" here is the quota test and a placement on free nodes (`core.placement`): the
all-or-nothing placement Kueue gets from topology-aware scheduling. Not modelled:
fair sharing (off by default), `borrowWithinCohort`, partial admission.
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

from raygang.core.backlog import Backlog
from raygang.core.capacity import Capacity
from raygang.core.config import PolicyConfig
from raygang.core.draining import Draining
from raygang.core.gang import PendingGang
from raygang.core.memory import CycleMemory
from raygang.core.placement import place
from raygang.core.plan import Admission, Plan, Preemption
from raygang.core.snapshot import ClusterSnapshot, PlacedGang

GPU = "GPU"


class _Cohort:
    """GPU usage and nominal quota per ClusterQueue (GPUs are the resource the quotas
    name; the trace's jobs ask for nothing else)."""

    def __init__(self, config: PolicyConfig, placed: tuple[PlacedGang, ...], cluster: int,
                 last: _Cohort | None = None):
        # What the last cycle's cohort summed, where it summed the very same (the config
        # and the placed gangs are handed again while they do not change)
        if last is not None and last.config is config:
            self.nominal = last.nominal
        else:
            self.nominal = {q.name: q.quota.units(GPU) for q in config.queues}
        if last is not None and last.placed is placed and last.config is config:
            self.usage = dict(last.placed_usage)
        else:
            self.usage = dict.fromkeys(self.nominal, 0)
            for gang in placed:
                self.usage[gang.queue] = self.usage.get(gang.queue, 0) + gang.total.units(GPU)
        self.config, self.placed, self.placed_usage = config, placed, dict(self.usage)
        # The cohort lends what its queues' nominal quotas add up to; with no quota at all
        # (a trace without tenants' guarantees), the whole cluster.
        self.requestable = sum(self.nominal.values()) or cluster
        self.used = sum(self.usage.values())  # the cohort's, kept as usage moves

    def borrowing(self, queue: str) -> bool:
        return self.usage.get(queue, 0) > self.nominal.get(queue, 0)

    def borrowers(self) -> set[str]:
        """The queues borrowing now (`borrowing` of each, at once)."""
        nominal = self.nominal
        return {q for q, used in self.usage.items() if used > nominal.get(q, 0)}

    def room(self, queue: str) -> int:
        """The most GPUs a gang of `queue` may ask for and fit without borrowing."""
        return min(self.nominal.get(queue, 0) - self.usage.get(queue, 0),
                   self.requestable - self.used)

    def fits(self, queue: str, request: int, borrow: bool = True) -> bool:
        if not borrow:
            return request <= self.room(queue)
        return self.used + request <= self.requestable

    def move(self, queue: str, amount: int) -> None:
        self.usage[queue] = self.usage.get(queue, 0) + amount
        self.used += amount


class Decider:
    """What one control plane decides with: a cycle under Kueue's rules, and a memory of
    its own from one cycle to the next (`core.memory`: the free capacity; each pending
    gang's kind and request, `_Facts`; the last cycle's cohort, whose sums the next one
    takes over while the placed gangs are the same)."""

    def __init__(self) -> None:
        self.memory = CycleMemory()
        self.facts = _Facts()
        self.cohort: _Cohort | None = None

    def __call__(self, snapshot: ClusterSnapshot, backlog: Backlog, config: PolicyConfig,
                 now: float) -> Plan:
        cycle = _Cycle(snapshot, config, now, self.memory, self.facts, self.cohort)
        self.cohort = cycle.cohort
        return cycle.run(backlog)


class _Facts:
    """What a pending gang's tries read of it, worked out once per gang, not per cycle
    (the walk reads every pending gang each cycle): its kind (gangs alike fare alike: a
    small int standing for its shape, queue and priority), its GPU request, and its
    order key as it fits its queue's nominal quota or borrows (`_Cycle._order`)."""

    def __init__(self) -> None:
        self._kinds: dict[tuple, int] = {}
        self._of: dict[str, _Fact] = {}
        self.get = self._of.get  # (gang id) -> its fact, or None: `of` inlined in a loop

    def of(self, gang: PendingGang) -> _Fact:
        fact = self._of.get(gang.gang_id)
        if fact is None or fact[0] is not gang:  # new, or pending again as another record
            fact = self.make(gang)
        return fact

    def make(self, gang: PendingGang) -> _Fact:
        spec = gang.spec
        kind = (spec.shape, spec.queue, gang.priority)
        tail = (-gang.priority, gang.seq, gang.gang_id)
        fact = (gang, self._kinds.setdefault(kind, len(self._kinds)),
                spec.min_total.units(GPU), (False, *tail), (True, *tail))
        if len(self._of) > 100_000:  # the gangs of long ago, gone from the backlog
            self._of.clear()
        self._of[gang.gang_id] = fact
        return fact


# A pending gang, its kind, its GPU request, its order key fitting and borrowing
_Fact = tuple[PendingGang, int, int, tuple, tuple]


class _Cycle:
    def __init__(self, snapshot: ClusterSnapshot, config: PolicyConfig, now: float,
                 memory: CycleMemory | None = None, facts: _Facts | None = None,
                 last: _Cohort | None = None):
        self.snapshot, self.now = snapshot, now
        self.capacity = Capacity(snapshot.alive_nodes, memory=memory)
        self.draining = Draining(self.capacity)
        self.cohort = _Cohort(config, snapshot.placed,
                              sum(n.total.units(GPU) for n in snapshot.alive_nodes), last)
        # The gangs it may preempt, in the order Kueue takes them within a queue: lower
        # priority, then most recently admitted (one not yet running counts as admitted
        # now), then the id (so that two runs decide the same)
        self.running = sorted(
            (g for g in snapshot.placed if g.preemptible and not g.draining),
            key=lambda g: (g.priority, -(now if g.running_since is None else g.running_since),
                           g.gang_id))
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.no_room: set = set()  # shapes that found no free nodes (until victims free some)
        self.failed: set[int] = set()  # kinds (`_Facts`) admitted by no means, for now
        self.candidates: dict[tuple[str, int], _Candidates] = {}  # for now, too
        self.facts = facts or _Facts()
        # queue -> the gangs `run` passed over since its last turn: (their turn's key, index)
        self.passed: dict[str, list[tuple[tuple, int]]] = {}

    def run(self, backlog: Backlog) -> Plan:
        """Every pending gang offered in turn: each queue offers its head, the smallest
        order key goes first, and the queue's next gang becomes its head.

        A walk in that order reads every pending gang each cycle, and in a backlog most
        are of a kind that already failed (`failed`: until the next admission, a try of
        one does nothing). So a queue passes over such gangs as it offers its next head,
        and offers the next one worth a try with the key its turn comes up at. That key
        is the largest key met so far in the queue's line since the last admission: a
        queue's gang comes up once every head before it came up, and each came up only
        as the smallest (so taking turns by the running largest key takes them in the
        order the heads come up in; keys end in the gang's id, so no two queues tie).
        When an admission changes the keys, a queue whose passed-over gangs had not come
        up yet (their turn's key is past the admitted gang's) offers the first of them
        again, as its head would have been. `run_plain` walks gang by gang; a randomized
        test holds the two to the same plan (tests/sim/test_kueue_walk.py)."""
        lines = {q: line for q, line in backlog.lines.items() if line}
        at = dict.fromkeys(lines, 0)  # each queue's head
        keys = [(self._order(q, line[0]), q) for q, line in lines.items()]
        heapq.heapify(keys)
        passed = self.passed
        while keys:
            turn, queue = heapq.heappop(keys)
            line, i = lines[queue], at[queue]
            passed.pop(queue, None)
            admitted = len(self.admissions)
            self._try(line[i])
            i += 1
            if len(self.admissions) != admitted:
                at[queue] = i
                for other, gangs in passed.items():  # heads again, where not come up
                    at[other] = next((j for key, j in gangs if key > turn), at[other])
                passed.clear()
                keys = [(self._order(q, line[at[q]]), q) for q, line in lines.items()
                        if at[q] < len(line)]
                heapq.heapify(keys)
                continue
            over: list[tuple[tuple, int]] = []
            room, failed, get, make = (self.cohort.room(queue), self.failed, self.facts.get,
                                       self.facts.make)
            while i < len(line):
                gang = line[i]
                fact = get(gang.gang_id)
                if fact is None or fact[0] is not gang:
                    fact = make(gang)
                key = fact[4] if fact[2] > room else fact[3]  # as `_order`
                if key > turn:
                    turn = key
                if fact[1] not in failed:
                    break
                over.append((turn, i))
                i += 1
            at[queue] = i
            if over:
                passed[queue] = over
            if i < len(line):
                heapq.heappush(keys, (turn, queue))
        return self._plan()

    def run_plain(self, backlog: Backlog) -> Plan:
        """`run`, gang by gang: each queue's next gang is its head (the reference)."""
        heads = {q: iter(line) for q, line in backlog.lines.items()}
        offered = {q: g for q, it in heads.items() if (g := next(it, None)) is not None}
        keys = [(self._order(q, g), q) for q, g in offered.items()]
        heapq.heapify(keys)
        while keys:
            queue = heapq.heappop(keys)[1]
            admitted = len(self.admissions)
            self._try(offered[queue])
            gang = next(heads[queue], None)
            if gang is None:
                del offered[queue]
            else:
                offered[queue] = gang
            if len(self.admissions) != admitted:  # usage moved: every head's key with it
                keys = [(self._order(q, g), q) for q, g in offered.items()]
                heapq.heapify(keys)
            elif gang is not None:
                heapq.heappush(keys, (self._order(queue, gang), queue))
        return self._plan()

    def _plan(self) -> Plan:
        return Plan(admissions=tuple(self.admissions), preemptions=tuple(self.preemptions),
                    at=self.now)

    def _order(self, queue: str, gang: PendingGang) -> tuple:
        """Heads that fit without borrowing first, then higher priority, then older."""
        fact = self.facts.of(gang)
        return fact[4] if fact[2] > self.cohort.room(queue) else fact[3]

    def _try(self, gang: PendingGang) -> None:
        # Gangs alike (shape, queue, priority) fare alike until something is admitted:
        # a backlog of thousands costs a search per kind, not per gang.
        _, kind, request, _, _ = self.facts.of(gang)
        if kind in self.failed:
            return
        if self.cohort.fits(gang.queue, request):
            nodes = self._place(gang)
            if nodes is not None:
                self._admit(gang, nodes, [])
                return
        victims = self._victims(gang, request)
        if victims is None:
            self.failed.add(kind)
            return
        nodes, chosen = victims
        self._admit(gang, nodes, chosen)

    def _place(self, gang: PendingGang) -> tuple[str, ...] | None:
        if gang.shape in self.no_room:
            return None
        nodes = place(gang.bundles, gang.strategy, self.capacity, gang.layout)
        if nodes is None:
            self.no_room.add(gang.shape)
        return nodes

    def _candidates(self, gang: PendingGang) -> _Candidates:
        # The same for every gang of a queue and priority until an admission changes who
        # runs and who borrows (`failed` is cleared at the same moments).
        key = (gang.queue, gang.priority)
        found = self.candidates.get(key)
        if found is None:
            found = self.candidates[key] = self._find_candidates(gang)
        return found

    def _find_candidates(self, gang: PendingGang) -> _Candidates:
        """The borrowing queues' gangs, then the lower-priority ones of its own queue,
        each in `running`'s order."""
        queue, priority = gang.queue, gang.priority
        borrowing = self.cohort.borrowers()
        borrowing.discard(queue)
        own = [g for g in self.running if g.queue == queue and g.priority < priority]
        others = [g for g in self.running if g.queue in borrowing]
        return _Candidates(others + own, own, sum(g.total.units(GPU) for g in own),
                           sum(g.total.units(GPU) for g in others))

    def _victims(self, gang: PendingGang, request: int
                 ) -> tuple[tuple[str, ...], list[PlacedGang]] | None:
        found = self._candidates(gang)
        every, own = found.every, found.own
        if not every:
            return None
        alone = len(own) == len(every)
        victims = self._minimal(gang, request, every, borrow=alone,
                                held=(found.own_gpus, found.own_gpus + found.other_gpus))
        if victims is None and own and not alone:
            victims = self._minimal(gang, request, own, borrow=True,
                                    held=(found.own_gpus, found.own_gpus))
        return victims

    def _minimal(self, gang: PendingGang, request: int, candidates: list[PlacedGang],
                 borrow: bool, held: tuple[int, int]
                 ) -> tuple[tuple[str, ...], list[PlacedGang]] | None:
        if self._never_fits(gang, request, held, borrow):
            return None  # as the walk below would find, having freed and taken back all
        targets: list[PlacedGang] = []
        undo: list = []
        nodes = None
        for victim in candidates:
            if victim.queue != gang.queue and not self.cohort.borrowing(victim.queue):
                continue
            undo.append(self._remove(victim))
            targets.append(victim)
            if self.cohort.fits(gang.queue, request, borrow):
                nodes = place(gang.bundles, gang.strategy, self.capacity, gang.layout)
                if nodes is not None:
                    break
        if nodes is None:
            for step in reversed(undo):
                step()
            return None
        kept = [targets[-1]]
        for i in range(len(targets) - 2, -1, -1):  # give back, last removed first
            back = self._add(targets[i])
            if self.cohort.fits(gang.queue, request, borrow):
                fit = place(gang.bundles, gang.strategy, self.capacity, gang.layout)
                if fit is not None:
                    nodes = fit
                    continue
            back()
            kept.append(targets[i])
        nodes = place(gang.bundles, gang.strategy, self.capacity, gang.layout)
        assert nodes is not None, "the kept victims no longer make room"
        return nodes, kept

    def _never_fits(self, gang: PendingGang, request: int, held: tuple[int, int],
                    borrow: bool) -> bool:
        """Whether the cohort's test fails even with every candidate gone (`held`: the
        GPUs the candidates of the gang's own queue hold, and all of them): the walk then
        frees each (on the nodes too) for nothing. Usage only falls as victims go, so
        the least it can reach is the usage now less all the candidates hold. The usual
        case: a queue at its nominal quota reclaiming, without borrowing, from others."""
        cohort, queue = self.cohort, gang.queue
        own, every = held
        if not borrow and cohort.usage.get(queue, 0) - own + request > cohort.nominal.get(
                queue, 0):
            return True
        return cohort.used - every + request > cohort.requestable

    def _remove(self, victim: PlacedGang):
        undo_nodes = self.capacity.release(victim.bundles)
        self.cohort.move(victim.queue, -victim.total.units(GPU))

        def undo() -> None:
            undo_nodes()
            self.cohort.move(victim.queue, victim.total.units(GPU))
        return undo

    def _add(self, victim: PlacedGang):
        undo_nodes = self.capacity.reserve(victim.bundles)
        self.cohort.move(victim.queue, victim.total.units(GPU))

        def undo() -> None:
            undo_nodes()
            self.cohort.move(victim.queue, -victim.total.units(GPU))
        return undo

    def _admit(self, gang: PendingGang, nodes: tuple[str, ...],
               victims: list[PlacedGang]) -> None:
        own = tuple(sorted(v.gang_id for v in victims))
        if victims:
            self.draining.add(victims)
            taken = set(own)
            self.running = [g for g in self.running if g.gang_id not in taken]  # in order
            for victim in victims:
                action = "reclaim" if victim.queue != gang.queue else "preempt"
                self.preemptions.append(Preemption(
                    victim.gang_id, gang.gang_id, action,
                    f"kueue: {action}ed for {gang.gang_id} of ClusterQueue {gang.queue!r}"))
            self.no_room.clear()
        self.failed.clear()  # usage changed: who borrows, who may be preempted
        self.candidates.clear()
        waits = self.draining.take(nodes, gang.bundles, own)
        self.capacity.reserve(zip(nodes, gang.bundles))
        self.cohort.move(gang.queue, gang.total.units(GPU))
        self.admissions.append(Admission(gang.gang_id, nodes,
                                         "reclaim" if victims else "allocate", own, waits))


class _Candidates(NamedTuple):
    """Whom a gang of a queue and priority may preempt, in Kueue's order (`every`: other
    queues' first), with the GPUs they hold (for `_Cycle._never_fits`)."""

    every: list[PlacedGang]
    own: list[PlacedGang]  # its own queue's, lower priority
    own_gpus: int
    other_gpus: int
