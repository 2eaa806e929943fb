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

    def __init__(self, config: PolicyConfig, placed: tuple[PlacedGang, ...], cluster: int):
        self.nominal = {q.name: q.quota.units(GPU) for q in config.queues}
        self.usage = dict.fromkeys(self.nominal, 0)
        for gang in placed:
            self.usage[gang.queue] = self.usage.get(gang.queue, 0) + gang.total.units(GPU)
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

    def fits(self, queue: str, request: int, borrow: bool = True) -> bool:
        usage = self.usage.get(queue, 0) + request
        if not borrow and usage > self.nominal.get(queue, 0):
            return False
        return self.used + request <= self.requestable

    def move(self, queue: str, amount: int) -> None:
        self.usage[queue] = self.usage.get(queue, 0) + amount
        self.used += amount


class Decider:
    """What one control plane decides with: a cycle under Kueue's rules, and a memory of
    its own from one cycle to the next (`core.memory`: the free capacity)."""

    def __init__(self) -> None:
        self.memory = CycleMemory()

    def __call__(self, snapshot: ClusterSnapshot, backlog: Backlog, config: PolicyConfig,
                 now: float) -> Plan:
        return _Cycle(snapshot, config, now, self.memory).run(backlog)


class _Cycle:
    def __init__(self, snapshot: ClusterSnapshot, config: PolicyConfig, now: float,
                 memory: CycleMemory | None = None):
        self.snapshot, self.now = snapshot, now
        self.capacity = Capacity(snapshot.alive_nodes, memory=memory)
        self.draining = Draining(self.capacity)
        self.cohort = _Cohort(config, snapshot.placed,
                              sum(n.total.units(GPU) for n in snapshot.alive_nodes))
        self.running = [g for g in snapshot.placed if g.preemptible and not g.draining]
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.no_room: set = set()  # shapes that found no free nodes (until victims free some)
        self.failed: set = set()  # (shape, queue, priority) admitted by no means, for now
        self.candidates: dict[tuple[str, int], list[PlacedGang]] = {}  # for now, too

    def run(self, backlog: Backlog) -> Plan:
        heads = {q: iter(line) for q, line in backlog.lines.items()}
        offered = {q: g for q, it in heads.items() if (g := next(it, None)) is not None}
        # Each head's order key, kept while the cohort's usage stays as it was: only an
        # admission changes it (a search that finds no victims undoes what it tried), so
        # the keys are made again after one, and otherwise only for a queue's new head.
        # A heap of them: every pending gang is offered in turn, one smallest key at a time
        # (keys end in the gang's id: no two are equal, the heap takes the one min would).
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
            if len(self.admissions) != admitted:
                keys = [(self._order(q, g), q) for q, g in offered.items()]
                heapq.heapify(keys)
            elif gang is not None:
                heapq.heappush(keys, (self._order(queue, gang), queue))
        return Plan(admissions=tuple(self.admissions), preemptions=tuple(self.preemptions),
                    at=self.now)

    def _order(self, queue: str, gang: PendingGang) -> tuple:
        borrows = not self.cohort.fits(queue, gang.spec.min_total.units(GPU), borrow=False)
        return (borrows, -gang.priority, gang.seq, gang.gang_id)

    def _try(self, gang: PendingGang) -> None:
        # Gangs alike (shape, queue, priority) fare alike until something is admitted:
        # a backlog of thousands costs a search per kind, not per gang.
        spec = gang.spec
        key = (spec.strategy, spec.min_bundles, spec.layout, spec.queue, gang.priority)
        if key in self.failed:
            return
        request = spec.min_total.units(GPU)
        if self.cohort.fits(gang.queue, request):
            nodes = self._place(gang)
            if nodes is not None:
                self._admit(gang, nodes, [])
                return
        victims = self._victims(gang, request)
        if victims is None:
            self.failed.add(key)
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

    def _candidates(self, gang: PendingGang) -> list[PlacedGang]:
        # The same for every gang of a queue and priority until an admission changes who
        # runs and who borrows (`failed` is cleared at the same moments).
        key = (gang.queue, gang.priority)
        if key not in self.candidates:
            self.candidates[key] = self._find_candidates(gang)
        return self.candidates[key]

    def _find_candidates(self, gang: PendingGang) -> list[PlacedGang]:
        """The borrowing queues' gangs and the lower-priority ones of its own queue. Other
        queues first, lower priority first, most recently admitted first (one not yet
        running counts as admitted now); ties: the id, so that two runs decide the same."""
        queue, priority, now = gang.queue, gang.priority, self.now
        borrowing = self.cohort.borrowers()
        keyed = [(g.queue == queue, g.priority,
                  -(g.running_since if g.running_since is not None else now), g.gang_id, g)
                 for g in self.running
                 if (g.priority < priority if g.queue == queue else g.queue in borrowing)]
        keyed.sort()  # ids are unique: a comparison never reaches the gangs
        return [item[4] for item in keyed]

    def _victims(self, gang: PendingGang, request: int
                 ) -> tuple[tuple[str, ...], list[PlacedGang]] | None:
        candidates = self._candidates(gang)
        if not candidates:
            return None
        own = [g for g in candidates if g.queue == gang.queue]
        found = self._minimal(gang, request, candidates, borrow=len(own) == len(candidates))
        if found is None and own and len(own) < len(candidates):
            found = self._minimal(gang, request, own, borrow=True)
        return found

    def _minimal(self, gang: PendingGang, request: int, candidates: list[PlacedGang],
                 borrow: bool) -> tuple[tuple[str, ...], list[PlacedGang]] | None:
        if self._never_fits(gang, request, candidates, borrow):
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

    def _never_fits(self, gang: PendingGang, request: int, candidates: list[PlacedGang],
                    borrow: bool) -> bool:
        """Whether the cohort's test fails even with every candidate gone: the walk then
        frees each (on the nodes too) for nothing. Usage only falls as victims go, so
        the least it can reach is the usage now less all the candidates hold. The usual
        case: a queue at its nominal quota reclaiming, without borrowing, from others."""
        cohort, queue = self.cohort, gang.queue
        own = sum(g.total.units(GPU) for g in candidates if g.queue == queue)
        if not borrow and cohort.usage.get(queue, 0) - own + request > cohort.nominal.get(
                queue, 0):
            return True
        every = sum(g.total.units(GPU) for g in candidates)
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
            self.running = [g for g in self.running if g.gang_id not in taken]
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


