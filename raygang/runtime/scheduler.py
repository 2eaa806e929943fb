"""The scheduler: a detached, named async Ray actor that runs observe -> schedule -> apply.

It wakes on every submission, cancellation and gang completion, and at least every
`resync_interval_s` to notice changes it did not cause (nodes joining, other work ending).
Each admitted gang is driven by its own asyncio task; whatever happens to one gang is
caught there and recorded on that gang, so the loop itself never stops.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import itertools
import json
import logging
import time
import uuid
from collections.abc import Callable, Collection
from typing import Any

import ray
from ray import cloudpickle

from raygang.core.config import SchedulerConfig
from raygang.core.queues import QueueSpec
from raygang.core.resources import Resources
from raygang.core.gang import GangState, PendingGang
from raygang.core.plan import Admission, Plan, Preemption
from raygang.core.report import queue_report
from raygang.core.scale import never_hosted, scale_candidates
from raygang.core.schedule import schedule, unschedulable_reason
from raygang.core.snapshot import ClusterSnapshot
from raygang.core.spec import DeploymentSpec, GangSpec
from raygang.runtime import recovery
from raygang.runtime.book import STORE_RETRY_S, DurableBook
from raygang.runtime.durable import GANGS, QUEUES, RESULTS, dump_queue, open_store
from raygang.runtime.errors import (
    DeploymentExistsError,
    GangNotFoundError,
    ResultsLostError,
    SchedulerRecoveringError,
    UnschedulableError,
)
from raygang.runtime.deployment import ServeLaunch
from raygang.runtime.dry_run import dry_run_result
from raygang.runtime.idempotency import IdempotencyKeys
from raygang.runtime.launcher import (
    GangLaunch,
    MemberFailure,
    ReservationTimeout,
    run_to_completion,
    still_finishing,
)
from raygang.runtime.observe import observe
from raygang.runtime.program import RoleProgram
from raygang.runtime.records import GangRecord
from raygang.runtime.scaling import ScaleDriver
from raygang.runtime.status import (
    ClusterStatus,
    DryRunResult,
    GangError,
    GangEvent,
    GangStatus,
    HeldBundle,
    NodeStatus,
    QueueStatus,
)

log = logging.getLogger(__name__)

SCHEDULER_NAME = "raygang-scheduler"
# `cluster()` observes Ray afresh at most this often (status pages poll it every few s).
CLUSTER_VIEW_MAX_AGE_S = 0.25
METRICS_REFRESH_S = 1.0
NODE_WAIT_POLL_S = 0.2
RELEASE_RECHECK_S = (0.1, 0.3, 1.0)  # wakes after a gang is released (GCS view lag)


class Scheduler(DurableBook):
    def __init__(self, config: SchedulerConfig, clock: Callable[[], float] = time.time):
        self._config = config
        self._clock = clock
        self._gangs: dict[str, GangRecord] = {}
        self._launches: dict[str, GangLaunch] = {}
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task | None = None
        self._cycles = 0
        self._last_cycle_error: str | None = None
        self._finished: collections.deque[str] = collections.deque()  # oldest first
        self._observed: tuple[float, ClusterSnapshot] | None = None
        self._deployments: dict[str, str] = {}  # deployment name -> its latest gang id
        self._idempotent = IdempotencyKeys()
        from raygang.runtime.metrics import SchedulerMetrics  # made in the actor process
        self._metrics = SchedulerMetrics()
        self._metrics_at = float("-inf")  # when the gauges were last refreshed
        self._last_plan = Plan()
        self._waiting_seen: frozenset[str] = frozenset()
        self._scale = ScaleDriver(config.scaling, clock=clock) if config.scaling.mode != "off" else None
        self._scale_wake = asyncio.Event()
        self._scale_task: asyncio.Task | None = None
        self._store = open_store(config.state)
        self._recovered = asyncio.Event()
        self._recovery_task: asyncio.Task | None = None
        self._recovery: dict[str, Any] = {}  # what the last rebuild found
        self._instance = uuid.uuid4().hex
        self._dirty: dict[str, GangRecord | None] = {}  # gang id -> to write (None: delete)
        self._dirty_wake = asyncio.Event()
        self._writer_task: asyncio.Task | None = None

    def _ensure_loop(self) -> None:
        """Start the loops; after a (re)start, first read the state back from the store."""
        loop = asyncio.get_running_loop()
        if self._recovery_task is None:
            self._recovery_task = loop.create_task(self._recover())
        if not self._recovered.is_set():
            return
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = loop.create_task(self._loop())
        if self._writer_task is None or self._writer_task.done():
            self._writer_task = loop.create_task(self._writer())
        if self._scale is not None and (self._scale_task is None or self._scale_task.done()):
            self._scale_task = loop.create_task(self._scale_loop())

    async def _ready(self) -> None:
        """Wait (up to `state.recovery_wait_s`) until the state is read back."""
        self._ensure_loop()
        if self._recovered.is_set():
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._recovered.wait()),
                                   self._config.state.recovery_wait_s)
        except asyncio.TimeoutError:
            raise SchedulerRecoveringError(
                "the raygang scheduler restarted and is still recovering its state "
                f"({self._last_cycle_error or 'reading the store'}); try again shortly"
            ) from None

    # Client-facing methods ------------------------------------------------------------
    async def ping(self) -> dict:
        self._ensure_loop()
        return {
            "config": self._config.model_dump(mode="json"),
            "ready": self._recovered.is_set(),
            "instance": self._instance,  # a new one after every restart of the actor
            "recovery": dict(self._recovery),
            "gangs": len(self._gangs),
            "cycles": self._cycles,
            "last_cycle_error": self._last_cycle_error,
        }

    async def submit(
        self, spec: GangSpec, programs: dict[str, RoleProgram], idempotency_key: str | None = None
    ) -> str:
        """Validate, check the gang could ever be admitted, and queue it. Returns its id.

        With an `idempotency_key`, a retry of the same submission returns the first one's
        id instead of queueing a second gang; the same key with a different submission is
        an IdempotencyConflictError. Safe under concurrent retries: nothing awaits between
        the look-up and the enqueue, so the actor's event loop runs them as one step.
        """
        await self._ready()
        if not isinstance(spec, GangSpec):
            raise TypeError(f"submit() takes a GangSpec, got {type(spec).__name__}")
        if not isinstance(programs, dict) or not all(
            isinstance(p, RoleProgram) for p in programs.values()
        ):
            raise TypeError("submit() takes programs as a dict of role name -> RoleProgram")
        spec = GangSpec.model_validate(spec.model_dump())  # never trust a pickled model
        missing = sorted({r.name for r in spec.roles} - set(programs))
        if missing:
            raise ValueError(f"roles without a program to run: {', '.join(missing)}")
        if idempotency_key is None:
            return await self._saved(self._enqueue(spec, dict(programs), "gang"))
        fingerprint = _fingerprint(spec, programs)
        gang_id = self._idempotent.submit(
            idempotency_key, fingerprint, self._clock(),
            lambda: self._enqueue(spec, dict(programs), "gang", idempotency_key,
                                  fingerprint).gang_id,
        )
        record = self._gangs.get(gang_id)
        return gang_id if record is None else await self._saved(record)

    async def deploy(self, deployment: DeploymentSpec, app: Any = None) -> str:
        """Queue a Serve application as a gang (see `runtime.deployment`). Returns its id."""
        await self._ready()
        if not isinstance(deployment, DeploymentSpec):
            raise TypeError(f"deploy() takes a DeploymentSpec, got {type(deployment).__name__}")
        deployment = DeploymentSpec.model_validate(deployment.model_dump())
        app = app if app is not None else deployment.import_path
        if app is None:
            raise ValueError("deployment needs an application: a bound Serve app or import_path")
        current = self._gangs.get(self._deployments.get(deployment.name, ""))
        if current is not None and not current.state.finished:
            raise DeploymentExistsError(
                f"deployment {deployment.name!r} exists ({current.state.value}); "
                "undeploy it first"
            )
        record = self._enqueue(deployment.gang_spec(), {}, "deployment",
                               deployment=deployment, app=app)
        self._deployments[deployment.name] = record.gang_id
        return await self._saved(record)

    async def undeploy(self, name: str) -> GangStatus:
        """Stop a deployment and free its capacity; returns once its app is deleted."""
        await self._ready()
        gang_id = self._deployments.get(name)
        if gang_id is None or gang_id not in self._gangs:
            raise GangNotFoundError(f"no deployment named {name!r}")
        return await self.cancel(gang_id, "undeployed")

    async def list_deployments(self) -> list[GangStatus]:
        """Deployments queued, running, or failed (until redeployed); undeployed ones are
        history (their gangs stay in `list_gangs`)."""
        await self._ready()
        records = [self._gangs[g] for g in self._deployments.values() if g in self._gangs]
        return [r.status() for r in records if r.state is not GangState.CANCELLED]

    async def queues(self) -> list[QueueStatus]:
        """The queue tree with usage and fair shares as of now."""
        await self._ready()
        pending = [r.pending_view() for r in self._pending()]
        # Usage is what raygang holds now; only the nodes (for fair shares) may be cached.
        snapshot = dataclasses.replace(self._recent_snapshot(), placed=tuple(self._held()))
        rows = queue_report(snapshot, pending, self._config)
        return [
            QueueStatus(
                name=r.name, parent=r.parent, leaf=r.leaf, weight=r.weight,
                quota=r.quota.to_dict(), limit=None if r.limit is None else r.limit.to_dict(),
                usage=r.usage.to_dict(), fair_share=r.fair_share,
                share_ratio=min(r.share_ratio, 1e9), pending=r.pending, running=r.running,
            )
            for r in rows
        ]

    async def dry_run(self, spec: GangSpec) -> DryRunResult:
        """What a cycle would do with `spec` submitted now, without doing any of it."""
        await self._ready()
        if not isinstance(spec, GangSpec):
            raise TypeError(f"dry_run() takes a GangSpec, got {type(spec).__name__}")
        spec = GangSpec.model_validate(spec.model_dump())
        cls = self._config.priority_class(spec)
        snapshot = self._recent_snapshot(max_age=0)
        reason = unschedulable_reason(spec, snapshot, self._config)
        if reason:
            return DryRunResult(outcome="rejected", reason=reason)
        now = self._clock()
        pending = [r.pending_view() for r in self._due(now)]
        # After every gang submitted so far, as a real submission would be; the counter
        # is not advanced (a what-if uses up nothing).
        seq = max((r.seq for r in self._gangs.values()), default=-1) + 1
        probe = PendingGang("(dry run)", spec, cls.value, seq, cls.preemptible)
        plan = schedule(snapshot, [*pending, probe], self._config, now)
        return dry_run_result(plan, probe, snapshot, self._gangs)

    async def status(self, gang_id: str) -> GangStatus:
        await self._ready()
        return self._get(gang_id).status()

    async def list_gangs(
        self, state: GangState | None = None, queues: Collection[str] | None = None
    ) -> list[GangStatus]:
        """Gangs in submission order, optionally only in `state` and in `queues`."""
        await self._ready()
        return [r.status() for r in self._matching(state, queues)]

    async def gang_page(
        self, state: GangState | None, queues: Collection[str] | None, offset: int,
        limit: int, newest_first: bool = False,
    ) -> tuple[list[GangStatus], int]:
        """One page of `list_gangs` and how many match in all: only the page's statuses
        are built and sent (a status page polls this with thousands of gangs kept)."""
        await self._ready()
        matching = self._matching(state, queues)
        if newest_first:
            matching.reverse()
        return [r.status() for r in matching[offset : offset + limit]], len(matching)

    def _matching(self, state: GangState | None,
                  queues: Collection[str] | None) -> list[GangRecord]:
        return [
            r for r in self._gangs.values()
            if (state is None or r.state is state) and (queues is None or r.spec.queue in queues)
        ]

    async def cluster(self) -> ClusterStatus:
        """Nodes with their total, free and used resources, and which gang holds what."""
        await self._ready()
        now = self._clock()
        snapshot = self._recent_snapshot(max_age=CLUSTER_VIEW_MAX_AGE_S)
        held: dict[str, list[HeldBundle]] = {}
        for gang_id in self._launches:
            record = self._gangs[gang_id]
            for rank, (node_id, bundle) in enumerate(zip(record.nodes, record.spec.bundles)):
                held.setdefault(node_id, []).append(HeldBundle(
                    gang_id=gang_id, name=record.spec.name, queue=record.spec.queue,
                    rank=rank, resources=bundle.to_dict(),
                ))
        nodes = [
            NodeStatus(
                node_id=n.node_id, name=n.display, alive=n.alive, labels=dict(n.labels),
                total=n.total.to_dict(), free=n.free.to_dict(),
                used=(n.total - n.free).to_dict(), bundles=held.get(n.node_id, []),
            )
            for n in snapshot.nodes
        ]
        alive = snapshot.alive_nodes
        return ClusterStatus(
            observed_at=self._observed[0] if self._observed else now, nodes=nodes,
            total=sum((n.total for n in alive), Resources()).to_dict(),
            free=sum((n.free for n in alive), Resources()).to_dict(),
            scaling=self._scale.status() if self._scale is not None else None,
        )

    async def set_queue(self, queue: QueueSpec) -> list[QueueStatus]:
        """Add a queue or replace one's quota, limit, weight or parent (admin only over
        REST). The new tree is validated whole; a queue holding gangs stays a leaf."""
        await self._ready()
        queue = QueueSpec.model_validate(queue.model_dump())
        holding = {r.spec.queue for r in self._gangs.values() if not r.state.finished}
        if queue.parent in holding:
            raise ValueError(
                f"parent: queue {queue.parent!r} holds gangs, so it cannot become a parent "
                "(only leaf queues hold gangs)"
            )
        config = self._with_queues([queue])
        await self._store.put(QUEUES, queue.name, dump_queue(queue))  # durable, then applied
        self._config = config
        self._wake.set()  # a larger quota or limit may admit waiting gangs
        return await self.queues()

    async def wait(
        self, gang_id: str, timeout: float | None = None, until_running: bool = False
    ) -> GangStatus:
        """The gang's status once it has finished (or, with `until_running`, once it is
        past the launch barrier), or as it is after `timeout` seconds."""
        await self._ready()
        record = self._get(gang_id)
        event = record.released if until_running else record.finished
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return record.status()

    async def results(self, gang_id: str) -> list:
        """Object refs of the members' results in rank order (for a SUCCEEDED gang). After
        a restart of the scheduler they come from the store, if they were kept there."""
        await self._ready()
        record = self._get(gang_id)
        if record.state is GangState.SUCCEEDED and record.result_refs is None:
            raw = await self._store.get(RESULTS, gang_id) if record.results_kept else None
            if raw is None:
                raise ResultsLostError(
                    f"gang {gang_id} succeeded, but its results were lost when the scheduler "
                    f"restarted (kept only up to {self._config.state.results_max_bytes} "
                    f"bytes, for {self._config.state.results_retention_s:g}s)")
            record.result_refs = [ray.put(value) for value in cloudpickle.loads(raw)]
        return list(record.result_refs or [])

    async def cancel(self, gang_id: str, reason: str = "cancelled by user") -> GangStatus:
        """Cancel a gang; returns once its members are gone and its resources released."""
        await self._ready()
        record = self._get(gang_id)
        if record.state.finished:
            return record.status()
        await self._saved(record)
        if record.cancel_reason is None:
            record.cancel_reason = reason
            await self._write(record)  # the intent is durable before anything is done
        if record.state is GangState.PENDING:
            record.move(GangState.CANCELLED, record.cancel_reason, self._clock())
            self._on_finished(record)
        elif record.task is not None:
            await self._halt(record)
        return record.status()

    async def shutdown(self) -> int:
        """Cancel every unfinished gang (tearing down running ones). Returns how many."""
        await self._ready()
        unfinished = [r for r in self._gangs.values() if not r.state.finished]
        # All at once: a thousand gangs torn down one after another take minutes.
        await asyncio.gather(*(self.cancel(r.gang_id, "scheduler shut down") for r in unfinished))
        for task in (self._loop_task, self._scale_task, self._writer_task):
            if task is not None:
                task.cancel()
        # A shutdown ends this scheduler's history (a crash keeps it): the next start is clean.
        for table in (GANGS, QUEUES, RESULTS):
            for key in await self._store.keys(table):
                await self._store.delete(table, key)
        return len(unfinished)

    def _enqueue(self, spec: GangSpec, programs: dict[str, RoleProgram], kind: str,
                 idempotency_key: str | None = None, fingerprint: str | None = None,
                 deployment: DeploymentSpec | None = None, app: Any = None) -> GangRecord:
        """Add the gang to the book (in this step, with no await: see `submit`); it is
        admitted only once `_saved` has written it to the store."""
        cls = self._config.priority_class(spec)
        # A recent view may accept; only a fresh one may refuse (a node may just have joined).
        reason = unschedulable_reason(spec, self._recent_snapshot(), self._config) and (
            unschedulable_reason(spec, self._recent_snapshot(max_age=0), self._config)
        )
        if reason and self._scale is not None and not self._config.queue_tree.problem(spec):
            # Nodes the cluster can add count too; until their groups are read, accept
            # (the gang's status then says if no group can ever host it).
            never = never_hosted(spec, self._scale.groups) if self._scale.groups else None
            reason = never and f"{reason}; and no worker group can ever host it: {never}"
        if reason:
            raise UnschedulableError(f"{kind} {spec.name!r} can never be admitted: {reason}")
        now = self._clock()
        record = GangRecord(
            gang_id=f"{spec.name}-{uuid.uuid4().hex[:8]}",
            spec=spec,
            programs=programs,
            priority=cls.value,
            seq=next(self._seq),
            submitted_at=now,
            preemptible=cls.preemptible,
            min_runtime_s=cls.min_runtime_s,
            kind=kind,
            deployment=deployment,
            app=app,
            idempotency_key=idempotency_key,
            fingerprint=fingerprint,
            on_change=self._mark_dirty,
        )
        record.events.append(
            GangEvent(at=now, from_state=None, to_state=GangState.PENDING, reason="submitted")
        )
        self._gangs[record.gang_id] = record
        self._wake.set()
        return record

    # The loop ---------------------------------------------------------------------------
    async def _woken(self, event: asyncio.Event, timeout: float | None = None) -> None:
        """Until `event` is set or `timeout` (default: a resync interval) has passed; then
        clear it."""
        try:
            await asyncio.wait_for(event.wait(), timeout or self._config.resync_interval_s)
        except asyncio.TimeoutError:
            pass
        event.clear()

    def _cycle_timeout(self) -> float:
        """A gang waiting for nodes that were asked for starts as soon as they are up: a
        cycle then observes the nodes every NODE_WAIT_POLL_S (a few ms of GCS reads)."""
        if self._scale is not None and self._scale.requested:
            return min(NODE_WAIT_POLL_S, self._config.resync_interval_s)
        return self._config.resync_interval_s

    async def _loop(self) -> None:
        while True:
            await self._woken(self._wake, self._cycle_timeout())
            try:
                self._cycle()
            except Exception as error:  # never let one bad cycle stop scheduling
                log.exception("scheduling cycle failed")
                self._last_cycle_error = f"{type(error).__name__}: {error}"
            if self._scale is not None and self._last_plan_changed():
                self._scale_wake.set()  # else the scale loop's own interval is soon enough
            # Ray drops a gauge not set within two report intervals (10 s each); once a
            # second is plenty, and keeps a scan of every remembered gang off the path of
            # a burst of submissions (each wakes the loop).
            now = self._clock()
            if now - self._metrics_at >= METRICS_REFRESH_S:
                self._metrics_at = now
                self._metrics.refresh(self._gangs.values(), self._config.queues)

    def _last_plan_changed(self) -> bool:
        """Whether the last cycle changed what waits (or admitted or preempted anything)."""
        plan, seen = self._last_plan, self._waiting_seen
        self._waiting_seen = frozenset(plan.waiting)
        return bool(plan.admissions or plan.preemptions) or self._waiting_seen != seen

    def _due(self, now: float) -> list[GangRecord]:
        """Pending gangs a cycle at `now` considers: those not waiting out a restart backoff."""
        return [r for r in self._pending() if r.not_before is None or r.not_before <= now]

    def _cycle(self) -> None:
        now = self._clock()
        pending = self._due(now)
        if not pending:
            self._last_plan = Plan()
            return
        started = self._metrics.cycle_started()
        snapshot = self._observe()
        self._observed = (now, snapshot)
        plan = schedule(snapshot, [r.pending_view() for r in pending], self._config, now)
        self._last_plan = plan
        self._cycles += 1
        # Victims first: an admission that needs them waits for them to be gone.
        for preemption in plan.preemptions:
            self._preempt(preemption)
        for admission in plan.admissions:
            self._admit(self._gangs[admission.gang_id], admission, now)
        for waiting in plan.waiting.values():
            self._gangs[waiting.gang_id].set_waiting(
                waiting.code, waiting.message, plan.positions.get(waiting.gang_id)
            )
        self._metrics.cycle_done(started, plan)

    def _pending(self) -> list[GangRecord]:
        """Gangs to schedule: stored, and not being cancelled."""
        return [r for r in self._gangs.values()
                if r.state is GangState.PENDING and r.saved and r.cancel_reason is None]

    def _held(self):
        return [self._gangs[gang_id].placed_view() for gang_id in self._launches]

    def _recent_snapshot(self, max_age: float | None = None) -> ClusterSnapshot:
        """The last cycle's view if younger than `max_age` (default: one resync interval).
        Whether a gang could *ever* fit depends only on the nodes' totals, which change
        slowly; a burst of submissions then costs no GCS calls each."""
        max_age = self._config.resync_interval_s if max_age is None else max_age
        if self._observed and self._clock() - self._observed[0] < max_age:
            return self._observed[1]
        self._observed = (self._clock(), self._observe())
        return self._observed[1]

    def _observe(self) -> ClusterSnapshot:
        draining = self._scale.draining if self._scale is not None else ()
        return observe(self._held(), draining)

    # Scaling the cluster --------------------------------------------------------------
    async def _scale_loop(self) -> None:
        """After every cycle (and every resync interval), size the cluster to what waits;
        one step at a time, while cycles go on (its requests run in a thread)."""
        assert self._scale is not None
        while True:
            await self._woken(self._scale_wake)
            plan = self._last_plan
            pending = [r.pending_view() for r in self._pending()]
            waiting = scale_candidates(pending, plan, self._config)
            busy = {node for a in plan.admissions for node in a.nodes}
            if await self._scale.step(self._observe, waiting, busy) is None:
                continue
            now = self._clock()
            for gang_id, request in self._scale.fresh.items():
                record = self._gangs.get(gang_id)
                if record is not None and record.state is GangState.PENDING:
                    plural = "node" if request.nodes == 1 else "nodes"
                    record.events.append(GangEvent(
                        at=now, from_state=GangState.PENDING, to_state=GangState.PENDING,
                        reason=f"requested {request.nodes} {plural} of group {request.group}",
                    ))
            for record in self._pending():
                record.set_scale_note(self._scale.note(record.gang_id))

    # Applying a plan ------------------------------------------------------------------
    def _admit(self, record: GangRecord, admission: Admission, now: float) -> None:
        self._metrics.admitted(record, now)
        record.nodes = admission.nodes
        record.members = []
        # Its own victims, and those of other gangs whose freed capacity it takes (the
        # same cycle's): until they are gone it neither reserves nor starts its timeout.
        victims = [self._gangs[v].task for v in admission.waits_for if self._gangs[v].task]
        note = f"; waiting for {len(victims)} preempted gang(s) to stop" if victims else ""
        record.move(GangState.ADMITTED, f"placed on {len(set(admission.nodes))} node(s){note}",
                    now)
        launch: GangLaunch | ServeLaunch
        if record.kind == "deployment":
            launch = ServeLaunch(record.gang_id, record.spec, record.deployment, record.app,
                                 admission.nodes, self._config.serve_http_port)
        else:
            launch = GangLaunch(
                record.gang_id, record.spec, record.programs, admission.nodes,
                attempt=record.restarts + record.preemptions,
                on_member_ready=record.members.append,
            )
        self._launches[record.gang_id] = launch
        record.task = asyncio.get_running_loop().create_task(
            self._drive(record, launch, victims)
        )

    def _adopt(self, record: GangRecord, launch: GangLaunch | ServeLaunch) -> None:
        """Take over a running gang a previous scheduler process started (recovery)."""
        self._launches[record.gang_id] = launch
        record.events.append(GangEvent(
            at=self._clock(), from_state=GangState.RUNNING, to_state=GangState.RUNNING,
            reason="adopted by the restarted scheduler: members and placement group kept",
        ))
        record.task = asyncio.get_running_loop().create_task(
            self._drive(record, launch, [], adopted=True))

    def _preempt(self, preemption: Preemption) -> None:
        """Tell the victim, give it its grace period, then stop it (see _stop)."""
        victim = self._gangs[preemption.victim]
        preemptor = self._gangs[preemption.preemptor]
        if victim.task is None or victim.stopping is not None:
            return  # it ended on its own meanwhile
        self._metrics.preempted(victim, preemptor, preemption)
        verb = "reclaimed" if preemption.action == "reclaim" else "preempted"
        victim.stopping = f"{verb} by {preemptor.display}"
        victim.events.append(GangEvent(
            at=self._clock(), from_state=victim.state, to_state=victim.state,
            reason=f"{victim.stopping}: {preemption.reason}; grace "
                   f"{victim.spec.preemption_grace_s:g}s",
        ))
        asyncio.get_running_loop().create_task(self._stop(victim))

    async def _stop(self, record: GangRecord) -> None:
        task, launch = record.task, self._launches.get(record.gang_id)
        if task is None:
            return
        grace = record.spec.preemption_grace_s
        if record.state is GangState.RUNNING and launch is not None and grace > 0:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + grace
            replies = await launch.signal_preempt(grace)
            # The grace period ends as soon as no member has anything left to finish.
            busy = still_finishing(replies)
            if busy:
                await launch.wait_bodies(busy, deadline - loop.time())
        await self._halt(record)

    async def _halt(self, record: GangRecord) -> None:
        """Cancel the gang's task and wait until the gang is torn down. A task cancelled
        before its first step never runs `_drive` at all, not even its `finally` (a gang
        cancelled in the instant after admission): then do here what `_drive` would have."""
        task, launch = record.task, self._launches.get(record.gang_id)
        if task is None:
            return
        await _cancel(task)
        if record.task is task and launch is not None:
            self._interrupted(record)
            await self._release(record, launch)

    async def _drive(self, record: GangRecord, launch, victims: list[asyncio.Task],
                     adopted: bool = False) -> None:
        try:
            if adopted:  # started by the previous scheduler process: pick up its run
                results = await launch.resume()
            else:
                if victims:  # their resources are promised to this gang: wait until freed
                    await asyncio.wait(victims)
                await launch.reserve()
                record.move(GangState.RESERVED, "placement group ready", self._clock())
                record.move(GangState.STARTING, "starting members in role order",
                            self._clock())
                await launch.start_members()
                record.move(GangState.RUNNING,
                            "all members ready: released past the launch barrier", self._clock())
                # Stored before the release: a restarted scheduler then adopts the gang.
                await run_to_completion(self._write(record))
                results = await launch.run()
            if record.stopping:  # it returned after being told it is preempted
                raise asyncio.CancelledError
            record.result_refs = results
            record.move(GangState.SUCCEEDED, "all members finished", self._clock())
        except ReservationTimeout as timeout:
            record.move(GangState.PENDING, f"requeued: {timeout}", self._clock())
        except MemberFailure as failure:
            self._fail_or_restart(record, failure.error)
        except asyncio.CancelledError:
            self._interrupted(record)
        except Exception as error:  # a Ray error while applying: this gang only
            log.exception("launch of %s failed", record.gang_id)
            self._fail_or_restart(record, GangError(error_type=type(error).__name__,
                                                    message=str(error)))
        finally:
            await self._release(record, launch)

    def _interrupted(self, record: GangRecord) -> None:
        """Where a stopped gang goes: back to its queue if preempted, else CANCELLED."""
        if record.stopping and record.cancel_reason is None:
            self._requeue_preempted(record)
        else:
            record.move(GangState.CANCELLED, record.cancel_reason or "cancelled", self._clock())

    async def _release(self, record: GangRecord, launch) -> None:
        """Free everything the gang's launch holds and forget the launch. How the gang
        ended is written first: a scheduler restarting in between must not run it again."""
        if record.state is GangState.SUCCEEDED and record.result_refs:
            await run_to_completion(self._keep_results(record))
        if record.state.finished:
            await run_to_completion(self._write(record))
        await launch.close()
        self._launches.pop(record.gang_id, None)
        record.nodes = ()
        record.task = None
        record.stopping = None
        self._on_finished(record)
        self._wake.set()
        # The GCS view of free resources lags the placement group's removal by tens of
        # milliseconds, and a cycle counts the smaller of that view and its own (observe.py):
        # the cycle just woken may still see the GPUs taken. Look again shortly, rather
        # than leave a waiting gang to the resync timer.
        loop = asyncio.get_running_loop()
        for delay in RELEASE_RECHECK_S:
            loop.call_later(delay, self._wake.set)

    def _requeue_preempted(self, record: GangRecord) -> None:
        """Back to its queue with the same id and submission order, preemption counted."""
        now = self._clock()
        record.move(GangState.PREEMPTED, record.stopping or "preempted", now)
        record.preempted_by = record.stopping
        record.move(GangState.PENDING, record.stopping or "preempted", now)

    def _fail_or_restart(self, record: GangRecord, error: GangError) -> None:
        record.error = error
        now = self._clock()
        if record.restarts < record.spec.max_restarts:
            record.restarts += 1
            # Exponential backoff: a gang that keeps crashing does not hog the queue head.
            delay = min(self._config.restart_backoff_max_s,
                        self._config.restart_backoff_s * 2 ** (record.restarts - 1))
            record.not_before = now + delay
            asyncio.get_running_loop().call_later(delay, self._wake.set)
            record.move(GangState.RESTARTING,
                        f"restart {record.restarts}/{record.spec.max_restarts} after "
                        f"{error.summary}", now)
            record.move(GangState.PENDING,
                        f"requeued to restart whole, not before {delay:g}s from now", now)
        else:
            record.move(GangState.FAILED, error.summary, now)

    def _with_queues(self, changed: Collection[QueueSpec]) -> SchedulerConfig:
        """The config with these queues added or replaced (the tree validated whole)."""
        names = {q.name for q in changed}
        queues = [q for q in self._config.queues if q.name not in names] + list(changed)
        return SchedulerConfig.model_validate(
            {**self._config.model_dump(), "queues": [q.model_dump() for q in queues]}
        )

    async def _recover(self) -> None:
        """Read the state back (after a restart of the actor, or a first start: then the
        store is empty), until that works; then start the loops."""
        while True:
            try:
                self._recovery = await recovery.rebuild(self)
                break
            except Exception as error:
                log.exception("recovering the scheduler's state failed; retrying")
                self._last_cycle_error = f"recovery: {type(error).__name__}: {error}"
                await asyncio.sleep(STORE_RETRY_S)
        self._recovered.set()
        self._ensure_loop()
        self._wake.set()

    # Bookkeeping ------------------------------------------------------------------------
    def _get(self, gang_id: str) -> GangRecord:
        try:
            return self._gangs[gang_id]
        except KeyError:
            raise GangNotFoundError(f"no gang with id {gang_id!r}") from None

    def _on_finished(self, record: GangRecord) -> None:
        """Once a gang has reached its final state: count it, and keep only the last
        `finished_gangs_kept` finished gangs (and their results)."""
        if not record.state.finished:
            return
        self._metrics.finished(record)
        self._finished.append(record.gang_id)
        while len(self._finished) > self._config.finished_gangs_kept:
            gone = self._finished.popleft()
            dropped = self._gangs.pop(gone, None)
            self._dirty[gone] = None  # out of the store too
            if dropped is not None and dropped.results_kept:
                asyncio.get_running_loop().create_task(self._store.delete(RESULTS, gone))
            self._dirty_wake.set()


def _fingerprint(spec: GangSpec, programs: dict[str, RoleProgram]) -> str:
    """What makes two submissions the same one (for idempotency keys)."""
    described = {
        name: [p.display, repr(p.args), repr(sorted(p.kwargs.items())), repr(p.runtime_env)]
        for name, p in sorted(programs.items())
    }
    text = json.dumps([spec.model_dump(mode="json"), described], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


async def _cancel(task: asyncio.Task) -> None:
    """Cancel a gang's task and wait until it has torn the gang down. Cancels again until
    it ends: a library call may swallow one cancellation (asyncio.wait_for before 3.12
    does when its inner future completes at the same moment)."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=1.0)


# The actor: no resources of its own, many concurrent calls (waits are long polls).
# Ray restarts it whenever it dies (its process or its node); it then recovers its state
# from the store (runtime/recovery.py). Calls in flight are not retried by Ray: the
# client retries them (the Python API's submissions carry an idempotency key).
SchedulerActor = ray.remote(num_cpus=0, max_concurrency=10_000, max_restarts=-1)(Scheduler)
