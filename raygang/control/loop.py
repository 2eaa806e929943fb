"""The scheduling loop: observe the cluster -> `core.schedule` -> apply the plan.

It wakes on every submission, cancellation and gang completion, and at least every
`resync_interval_s` to notice changes it did not cause (nodes joining, other work
ending). A cycle that fails is logged and kept as `last_error`; the loop goes on. With
scaling on, a second loop sizes the cluster to what waits after every cycle.
A cluster that does not answer is no view (`sight.ClusterView`): no cycle decides then;
once it answers again, the loop looks for what the outage left or lost (`outage.py`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import Awaitable, Callable, Collection, Coroutine
from typing import Any

from raygang.control.config import SchedulerConfig
from raygang.control.dumps import CycleDumps, Prepared
from raygang.control.fleet import Fleet
from raygang.control.history import History
from raygang.control.ports import Cluster, Metrics, NoMetrics, Scaling, Tallies
from raygang.control.records import GangRecord
from raygang.control.registry import Registry
from raygang.control.status import QueueHistory
from raygang.control.outage import AfterOutage
from raygang.control.sight import ClusterView
from raygang.control.tasks import first_set, spawn_free
from raygang.control.ticks import Replaying, Ticks
from raygang.control.usage import LoopUsage, UsageKeeper
from raygang.core.backlog import Backlog
from raygang.core.config import PolicyConfig
from raygang.core.elastic import member_id, member_of
from raygang.core.gang import GangState
from raygang.core.memory import CycleMemory
from raygang.core.plan import Plan, Waitings
from raygang.core.report import QueueReport, queue_report
from raygang.core.scale import scale_candidates
from raygang.core.schedule import Scheduler
from raygang.core.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)

METRICS_REFRESH_S = 1.0
NODE_WAIT_POLL_S = 0.2
RELEASE_RECHECK_S = (0.1, 0.3, 1.0)  # wakes after a gang is released (GCS view lag)

# What a cycle decides with: a `core.schedule.Scheduler` (one per loop), or a baseline's.
Decide = Callable[[ClusterSnapshot, Backlog, PolicyConfig, float], Plan]


class SchedulingLoop:
    def __init__(self, registry: Registry, fleet: Fleet, cluster: Cluster, metrics: Metrics,
                 scaling: Scaling | None, config: Callable[[], SchedulerConfig],
                 clock: Callable[[], float], decide: Decide | None = None,
                 release_recheck_s: tuple[float, ...] = RELEASE_RECHECK_S,
                 history: History | None = None,
                 spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]] = spawn_free,
                 usage_due: Callable[[UsageKeeper], None] | None = None,
                 replay: Replaying | None = None):
        """`usage_due`: told when the queues' usage over time is due to be written;
        `replay`: how a replay's loop looks (`control.ticks.Replaying`), None on a cluster."""
        self._registry = registry
        self._fleet = fleet
        self._cluster = cluster
        self._metrics = metrics
        self.scaling = scaling
        self._config = config
        self._clock = clock
        self._decide = Scheduler() if decide is None else decide
        # what admission checks keep (core.memory): the scheduler's own, where it has one
        self.memory = self._decide.memory if isinstance(self._decide, Scheduler) \
            else CycleMemory()
        self.history = history  # None: none kept (the simulator)
        self._release_recheck_s = release_recheck_s  # () where the view never lags (sim)
        self._wake = asyncio.Event()
        self._scale_wake = asyncio.Event()
        self.settle = None if replay is None else replay.settle
        self.ticks = None if replay is None else replay.ticks
        # Whether each cycle writes why gangs wait on their records (a status reads them);
        # a replay reads none, and its plans work their reasons out only when asked.
        self.explains = replay is None
        self.cycles = 0
        self.last_error: str | None = None
        self.last_plan = Plan()
        self._waiting_seen: object = frozenset()
        self._started = 0.0
        self._idle = False  # the last look found nothing to decide
        self._phase_at = 0.0  # when the cycle's last phase (observe, decide) ended
        self.waits: dict[tuple[str, str], int] = {}  # (queue, wait code) -> gangs, last cycle
        self.waiting_since: dict[str, float] = {}  # queue -> the earliest of their `since`s
        self._metrics_at = float("-inf")  # when the gauges were last refreshed
        # Metrics keeping no gauges (the simulator's, the tests') get none: each costs a walk
        self._gauges = type(metrics).refresh is not NoMetrics.refresh
        self.after_outage = AfterOutage(cluster, registry, fleet, clock, spawn)
        self.sight = ClusterView(cluster, fleet, clock, self._draining, self.wake, spawn,
                                 back=self.after_outage.answers_again)
        self._noted: set[str] = set()  # pending gangs with a scale note
        self._dumps = CycleDumps(self.wake, lambda: self.last_error)  # for the next cycle
        # The queues' usage over time, when time-based fair share is on (control.usage)
        self.usage = LoopUsage(lambda: self._config().usage)
        if usage_due is not None:
            self.usage.due = usage_due

    # Waking ---------------------------------------------------------------------------
    def wake(self) -> None:
        self._wake.set()

    def wake_after(self, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self._wake.set)

    def released(self) -> None:
        """A gang let go of what it held: look at once, and again shortly. The GCS view of
        free resources lags a placement group's removal by tens of milliseconds, and a cycle
        counts the smaller of that view and its own (runtime/scheduler/observe.py): the one
        just woken may still see the GPUs taken; do not leave a waiting gang to the resync."""
        self._wake.set()
        for delay in self._release_recheck_s:
            self.wake_after(delay)

    async def _woken(self, event: asyncio.Event, timeout: float | None = None,
                     settle: Callable[[], Awaitable[None]] | None = None) -> bool:
        """Until `event` is set or `timeout` (a resync interval; inf: none) passed, and
        `settle`d; clear it. Whether it was set (False: the time passed)."""
        timeout = timeout or self._config().resync_interval_s
        await first_set([event], None if timeout == math.inf else timeout)
        if settle is not None:
            await settle()
        told = event.is_set()
        event.clear()
        return told

    def _cycle_timeout(self) -> float:
        """A gang waiting for nodes that were asked for starts as soon as they are up: a
        cycle then observes the nodes every NODE_WAIT_POLL_S (a few ms of cluster reads)."""
        resync = self._config().resync_interval_s
        if self.scaling is not None and self.scaling.requested:
            return min(NODE_WAIT_POLL_S, resync)
        if self._told_all() and (self._idle or not self._config().policy.decides_by_time):
            # Either nothing waits or a look decides as the last one did until something
            # changes: no look until told.
            return math.inf
        return resync

    def _told_all(self) -> bool:
        """Whether nothing changes unsaid (a replay) and a look keeps nothing but its plan.
        (Usage over time and the queues' history are kept by looks, idle ones too.)"""
        return self._cluster.tells_changes and self.scaling is None and self.history is None \
            and self.usage.keeper is None

    def _ticks(self) -> Ticks | None:
        """The replay's ticks (`control.ticks`), where nothing changes unsaid."""
        return self.ticks if self.ticks is not None and self._told_all() else None

    async def _next_look(self) -> bool:
        """Until a change is told (True) or the interval passed (False)."""
        timeout, ticks = self._cycle_timeout(), self._ticks()
        tick = ticks.start(timeout) if ticks is not None and timeout != math.inf else None
        try:
            return await self._woken(self._wake, timeout, self.settle)
        finally:
            if tick is not None:
                tick.cancel()

    # Cycles ---------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            told = await self._next_look()
            if not told and (ticks := self._ticks()) is not None \
                    and ticks.steady(self.last_plan, self._clock()):
                continue  # a look would decide as the last one did (control.ticks)
            try:
                await self.cycle_off_loop()
            except Exception as error:  # never let one bad cycle stop scheduling
                log.exception("scheduling cycle failed")
                self.last_error = f"{type(error).__name__}: {error}"
            if self.scaling is not None and self._last_plan_changed():
                self._scale_wake.set()  # else the scale loop's own interval is soon enough
            # Ray drops a gauge not set within two report intervals (10 s each); once a
            # second is plenty, at the cost of the registry's counts, not of every gang.
            self.sight.probe()
            now = self._clock()
            if self._gauges and now - self._metrics_at >= METRICS_REFRESH_S:
                self._metrics_at = now
                self._metrics.refresh(list(self._fleet), self._config().queues,
                                      self._registry.counts(), self._tallies())
            if self.history is not None and self.history.due(now):
                self.history.sample(now, self._config().policy.queue_tree,
                                    self._registry.counts(), self._fleet.held())

    def _last_plan_changed(self) -> bool:
        """Whether the last cycle changed what waits (or admitted or preempted anything)."""
        plan, seen, waiting = self.last_plan, self._waiting_seen, self.last_plan.waiting
        self._waiting_seen = (waiting.signature() if isinstance(waiting, Waitings)
                              else frozenset(waiting))
        return (bool(plan.admissions or plan.preemptions or plan.growths)
                or self._waiting_seen != seen)

    def cycle(self) -> None:
        """One cycle, in this thread (tests drive it by hand)."""
        prepared = self._prepare()
        if prepared is None:
            return
        now, snapshot, backlog, policy = prepared
        try:
            plan = self._decided(snapshot, backlog, policy, now)
        except Exception as error:
            self._dumps.answer(prepared, error=error)
            raise
        self._apply(now, plan, snapshot)
        self._dumps.answer(prepared, plan)

    async def cycle_off_loop(self) -> None:
        """One cycle; the decision runs in a thread of its own, so that the event loop
        answers calls meanwhile (a cycle over a busy cluster takes a while). It decides
        on copies: what changes meanwhile is checked when the plan is applied. A cluster
        that does not answer makes no cycle."""
        begun = self._begin()
        if begun is None:
            return
        snapshot = await self.sight.observe_off_loop()
        if snapshot is None:
            return
        prepared = self._prepared(*begun, snapshot)
        now, snapshot, backlog, policy = prepared
        try:
            plan = await asyncio.to_thread(self._decided, snapshot, backlog, policy, now)
        except Exception as error:
            await self._dumps.answer_off_loop(prepared, error=error)
            raise
        self._apply(now, plan, snapshot)
        await self._dumps.answer_off_loop(prepared, plan)

    def _decided(self, snapshot: ClusterSnapshot, backlog: Backlog, policy: PolicyConfig,
                 now: float) -> Plan:
        """The decider's plan, its reasons worked out in this thread (the cycle's: the
        event loop only writes them on the records), unless nobody reads them."""
        plan = self._decide(snapshot, backlog, policy, now)
        if self.explains and isinstance(plan.waiting, Waitings):
            plan.waiting.work_out()
        return plan

    def _prepare(self) -> Prepared | None:
        begun = self._begin()
        return None if begun is None else self._prepared(*begun, self.observe())

    def _begin(self) -> tuple[float, Backlog] | None:
        """A cycle's time and backlog, or None if there is nothing to decide."""
        now = self._clock()
        backlog = self._registry.backlog(now)
        self._idle = not backlog.lines and not self._fleet.may_grow() and not self._dumps
        if self._idle:
            self.last_plan = Plan()
            self.waits, self.waiting_since = {}, {}
            self.usage.idle(now, self._fleet.held)
            return None
        self._started = self._metrics.cycle_started()
        return now, backlog

    def _prepared(self, now: float, backlog: Backlog, snapshot: ClusterSnapshot) -> Prepared:
        self._phase_at = self._metrics.phase_done("observe", self._started)
        snapshot = self.usage.observed(now, snapshot)  # with the queues' usage over time
        self.sight.observed = (now, snapshot)
        return now, snapshot, backlog, self._config().policy

    def _apply(self, now: float, plan: Plan, snapshot: ClusterSnapshot) -> None:
        applying = self._metrics.phase_done("decide", self._phase_at)
        self.last_plan = plan
        self.cycles += 1
        admitted = self._still_admitted(plan, snapshot)
        # Victims first: an admission that needs them waits for them to be gone.
        for preemption in plan.preemptions:
            if preemption.preemptor in admitted:
                self._fleet.preempt(preemption)
        charges = []
        for admission in plan.admissions:
            if admission.gang_id in admitted:
                admitting = self._registry.get(admission.gang_id)
                self._fleet.admit(admitting, admission, now)
                charges.append((admitting.spec.queue, admitting.spec.min_total))
        self.usage.admitted(now, charges)  # held from now on, and Kueue's entry penalty
        for growth in plan.growths:  # on settled capacity: nobody waits for it
            self._fleet.grow(growth)
        self._fleet.note_growth(plan.grow_waits)
        if self.explains:
            self.waits, self.waiting_since = self._registry.note_waiting(plan)
        self._metrics.phase_done("apply", applying)
        self._metrics.cycle_done(self._started, plan)

    def _still_admitted(self, plan: Plan, snapshot: ClusterSnapshot) -> set[str]:
        """The plan's admissions still to carry out. A gang cancelled while the plan was
        decided is not admitted, so its victims are not stopped; then neither is a gang
        that would take what those victims free (it would wait for them for ever)."""
        admitted = {a.gang_id for a in plan.admissions if self._admissible(a.gang_id)}
        # Gangs leaving anyway (stopped in an earlier cycle, or ended): an admission may
        # wait for them whatever this plan does.
        leaving = {g.gang_id for g in snapshot.placed if g.draining}
        leaving |= {member_id(g.gang_id, m) for g in snapshot.placed
                    if g.elastic is not None for m in g.elastic.leaving}
        # Right after a gang let go, the view may still show its GPUs taken: stop no gang
        # on it (a re-check cycle decides again once the view has caught up).
        preempting = not self._fleet.settling()
        while True:
            stopping = leaving | {gone for p in plan.preemptions
                                  if p.preemptor in admitted and preempting
                                  for gone in ([member_id(p.victim, m) for m in p.members]
                                               or [p.victim])}
            stranded = {a.gang_id for a in plan.admissions if a.gang_id in admitted
                        and not all(g in stopping or member_of(g)[0] in stopping
                                    for g in a.waits_for)}  # a gang stopped whole: its
            # surplus members go with it
            if not stranded:
                return admitted
            admitted -= stranded

    def _admissible(self, gang_id: str) -> bool:
        """Still pending, stored and not being cancelled (the plan was decided off the
        loop: a cancellation may have come meanwhile)."""
        record = self._registry.find(gang_id)
        return (record is not None and record.state is GangState.PENDING and record.live.saved
                and record.cancel_reason is None)

    def explain(self, record: GangRecord) -> None:
        """Bring a waiting gang's reason and place in line up to the last cycle: the
        cycle itself set them only for the gangs it looked at, not for those behind a
        blocked queue head (`core.backlog`)."""
        if record.state is not GangState.PENDING:
            return
        plan = self.last_plan
        waiting = plan.waiting.get(record.gang_id)
        if waiting is not None:
            record.set_waiting(waiting.code, waiting.message,
                               plan.positions.get(record.gang_id))

    # Dumping a cycle, on request -------------------------------------------------------
    async def dump_next(self, timeout_s: float) -> dict[str, Any]:
        """The next cycle's inputs and plan (`control.dumps`)."""
        return await self._dumps.next(timeout_s)

    # What the cluster looks like ------------------------------------------------------
    def observe(self) -> ClusterSnapshot:
        return self.sight.observe()

    def _draining(self) -> Collection[str]:
        return self.scaling.draining if self.scaling is not None else ()

    def _tallies(self) -> Tallies:
        now = self._clock()
        longest = {queue: max(0.0, now - at) for queue, at in self.waiting_since.items()}
        return Tallies(self._registry.kind_counts(), self.waits, self._queue_report, longest,
                       reachable=self.sight.unreachable is None)

    def _queue_report(self) -> list[QueueReport]:
        """Usage and fair shares as of now, on the nodes the last cycle saw: metrics read
        no cluster (with no cycle yet, no row)."""
        observed = self.sight.observed
        if observed is None:
            return []
        snapshot = self.sight.with_held(observed[1])
        return queue_report(snapshot, self._registry.pending_totals(), self._config().policy)

    def queue_history(self, queues: Collection[str] | None = None) -> QueueHistory:
        """The queues over the last hours (empty where no history is kept)."""
        if self.history is None:
            return QueueHistory(interval_s=0.0, points=[])
        return self.history.view(queues)

    async def view(self, max_age: float | None = None) -> ClusterSnapshot:
        """The last view if younger than `max_age` (a resync interval), else one read now."""
        return await self.sight.view(
            self._config().resync_interval_s if max_age is None else max_age)

    async def held_view(self) -> ClusterSnapshot:
        """A recent view of the nodes with what raygang holds now (usage must be current),
        and the queues' usage over time if it is kept (fair shares move with it)."""
        return self.usage.shown(self.sight.with_held(await self.view()))

    # Scaling the cluster --------------------------------------------------------------
    async def run_scaling(self) -> None:
        """After every cycle (and every resync interval), size the cluster to what waits;
        one step at a time, while cycles go on (its requests run in a thread)."""
        scaling = self.scaling
        assert scaling is not None
        while True:
            await self._woken(self._scale_wake)
            if self.sight.unreachable is not None:
                continue  # no view of the cluster: no scale decision either
            plan = self.last_plan
            waiting = scale_candidates(plan, self._registry.pending_gang,
                                       self._config().policy)
            busy = {node for a in plan.admissions for node in a.nodes}
            # The notes as soon as the step has decided (its requests may take seconds);
            # if it failed, again: from the last plan, as the scaler then answers.
            notes = functools.partial(self._scale_notes, scaling, {g.gang_id for g in waiting})
            if await scaling.step(self.observe, waiting, busy, planned=notes) is None:
                notes()
                continue
            now = self._clock()
            asked = {g.gang_id for g in waiting}  # noted even if it runs already (the
            for gang_id, request in scaling.fresh.items():  # nodes came before the call returned)
                if (record := self._registry.find(gang_id)) is not None and gang_id in asked:
                    n = request.nodes
                    record.note(f"requested {n} node{'' if n == 1 else 's'} of group "
                                f"{request.group}", now)

    def _scale_notes(self, scaling: Scaling, waiting: set[str]) -> None:
        """Each pending gang's note: the nodes it waits for, as the scaler says. Only a
        gang the step looked at has one: the others keep none, and a long line held by a
        limit is not walked."""
        noted, self._noted = self._noted, set()
        for gang_id in noted | waiting:
            record = self._registry.find(gang_id)
            if record is not None and record.state is GangState.PENDING:
                note = scaling.note(gang_id)
                record.set_scale_note(note)
                if note is not None:
                    self._noted.add(gang_id)
