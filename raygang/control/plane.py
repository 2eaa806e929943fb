"""The control plane: what a scheduler does, whatever runs it.

`ControlPlane` is the whole public surface (submit, cancel, wait, status, queues, dry run,
deployments...) as coroutines, built from the registry (the book of gangs), the journal
(what survives a restart), the fleet (one driver per gang holding capacity) and the
scheduling loop, over the cluster's ports. The Ray actor (`runtime/scheduler/actor.py`) is
a thin RPC facade over one; tests and the trace simulator use one directly, on an
in-memory cluster.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Callable, Collection, Coroutine
from typing import TYPE_CHECKING, Any

from raygang.control import kinds, recovery
from raygang.control.api import SchedulerAPI
from raygang.control.config import SchedulerConfig
from raygang.control.dry_run import what_if
from raygang.control.errors import (GangNotFoundError, ResultsLostError,
                                    SchedulerRecoveringError)
from raygang.control.fleet import SETTLE_S, Fleet
from raygang.control.history import History
from raygang.control.idempotency import submission_fingerprint
from raygang.control.inside import Inside
from raygang.control.intake import Intake, Submission, programs_checked, revalidated
from raygang.control.kinds.deployment import Served
from raygang.control.kinds.job import RayJob
from raygang.control.journal import STORE_RETRY_S, Journal
from raygang.control.loop import RELEASE_RECHECK_S, Decide, SchedulingLoop
from raygang.control.ports import Cluster, Metrics, NoMetrics, Scaling
from raygang.control.program import RoleProgram
from raygang.control.records import GangRecord
from raygang.control.registry import Registry
from raygang.control.tasks import TaskSet, first_set
from raygang.control.ticks import Replaying
from raygang.control.status import (ClusterStatus, DryRunResult, GangStatus, QueueHistory,
                                    QueueStatus)
from raygang.control.views import cluster_status, queue_statuses
from raygang.core.gang import GangState
from raygang.core.lifecycle import CancelledWhilePending, decide
from raygang.core.queues import QueueSpec
from raygang.core.schedule import schedule
from raygang.core.spec import GangSpec
from raygang.core.workload_specs import DeploymentSpec, JobSpec

log = logging.getLogger(__name__)
CLUSTER_VIEW_MAX_AGE_S = 0.25  # `cluster()` observes afresh at most this often
DUMP_WAIT_S = 30.0  # a cycle dump asked for: how long to wait for the cycle


class ControlPlane:
    """What the environment decides comes in here, once, when the plane is built:

    - `clock`: seconds, for timestamps, backoffs and ages (wall time on Ray; the virtual
      loop's time in tests and in `raygang sim`);
    - `decide`: what a cycle decides with (`core.schedule`; a baseline's in the simulator);
    - `settle_s` and `release_recheck_s`: how long the cluster's view may lag a release
      (on Ray, the GCS shows a removed placement group's resources tens of milliseconds
      late: no gang is preempted for `settle_s` after a release, and the loop looks again
      at each of `release_recheck_s`); 0 and () where the view never lags;
    - `ids`: where gang ids' random part comes from (a seeded `random.Random` makes a
      run repeatable; None: `uuid4`); `replay`: how a replay's loop looks (`Replaying`).
    """

    def __init__(self, config: SchedulerConfig, cluster: Cluster, journal: Journal,
                 clock: Callable[[], float], metrics: Metrics | None = None,
                 scaling: Scaling | None = None, *, decide: Decide = schedule,
                 settle_s: float = SETTLE_S,
                 release_recheck_s: tuple[float, ...] = RELEASE_RECHECK_S,
                 ids: random.Random | None = None, history: History | None = None,
                 replay: Replaying | None = None):
        self.config = config
        self._cluster = cluster
        self.journal = journal
        self._clock = clock
        self._metrics = metrics or NoMetrics()
        self._ids = ids
        self.tasks = TaskSet()  # every task this plane starts: `close` ends them all
        self.registry = Registry(config.finished_gangs_kept, clock)
        self.fleet = Fleet(self.registry, cluster, journal, self._metrics,
                           lambda: self.config.restart_policy, clock,
                           wake_after=lambda delay: self.loop.wake_after(delay),
                           released=self._released, changed=self.changed,
                           ending=self._ending,
                           spawn=self.tasks.spawn, settle_s=settle_s)
        self.loop = SchedulingLoop(self.registry, self.fleet, cluster, self._metrics, scaling,
                                   lambda: self.config, clock, decide, release_recheck_s, history,
                                   self.tasks.spawn, journal.usage_changed, replay)
        self.inside = Inside(self.registry, self.fleet, cluster, clock,
                             lambda: self.config.resync_interval_s, self.cancel,
                             spawn=self.tasks.spawn)
        self.intake = Intake(self.registry, journal, cluster, self.loop, self.inside,
                             lambda: self.config, clock, self._new_id)
        self.instance = self._new_id(128)  # a new one after every restart of the process
        self.recovery: dict[str, Any] = {}  # what the last rebuild found
        self._recovery_calls = recovery.RecoveryCalls(cluster)  # shared by every try
        self._recovered = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[Any]] = {}

    def _new_id(self, bits: int) -> str:
        if self._ids is None:
            return uuid.uuid4().hex[:bits // 4]
        return f"{self._ids.getrandbits(bits):0{bits // 4}x}"

    # Starting -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the tasks (idempotent); after a (re)start, first read the state back."""
        if "recover" not in self._tasks:
            self._spawn("recover", self._recover)
        if not self._recovered.is_set():
            return
        self._spawn("loop", self.loop.run)
        self._spawn("writer", self.journal.writer)
        if self._cluster.gangs_inside_jobs:  # (a replay's jobs have no budget to look at)
            self._spawn("inside", self.inside.run)
        if self.loop.scaling is not None:
            self._spawn("scaling", self.loop.run_scaling)

    def _spawn(self, name: str, work: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        task = self._tasks.get(name)
        if task is None or (task.done() and name != "recover"):
            self._tasks[name] = self.tasks.spawn(work(), name=f"raygang-{name}")

    async def ready(self) -> None:
        """Wait (up to `state.recovery_wait_s`) until the state is read back."""
        self.start()
        if self._recovered.is_set():
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._recovered.wait()),
                                   self.config.state.recovery_wait_s)
        except asyncio.TimeoutError:
            raise SchedulerRecoveringError(
                "the raygang scheduler restarted and is still recovering its state "
                f"({self.loop.last_error or 'reading the store'}); try again shortly"
            ) from None

    async def _recover(self) -> None:
        """Read the state back (after a restart, or a first start: then the store is
        empty), until that works; then start the loops."""
        while True:
            try:
                self.recovery = await recovery.rebuild(
                    self.journal, self.registry, self.fleet, self._recovery_calls,
                    self.config.restart_policy, self._clock, self._apply_queues,
                    self.changed, self.loop.usage.restore)
                break
            except Exception as error:
                log.exception("recovering the scheduler's state failed; retrying")
                self.loop.last_error = f"recovery: {type(error).__name__}: {error}"
                await asyncio.sleep(STORE_RETRY_S)
        for record in list(self.fleet):  # adopted inside a job adopted before them
            self.inside.recovered(record)
        if self.recovery.get("gangs"):  # a restart: perhaps of a head replaced meanwhile
            self.loop.after_outage.watch_starts("after the scheduler restarted")
        self._recovered.set()
        self.start()
        self.loop.wake()

    # Submitting -----------------------------------------------------------------------
    async def ping(self) -> dict[str, Any]:
        self.start()
        return {
            "config": self.config.model_dump(mode="json"),
            "ready": self._recovered.is_set(),
            "instance": self.instance, "recovery": dict(self.recovery),
            "gangs": len(self.registry),
            "cycles": self.loop.cycles,
            "last_cycle_error": self.loop.last_error,
            "unreachable": self.loop.sight.unreachable,  # (since, why): control/sight.py
            "after_outage": self.loop.after_outage.last,  # leftovers removed after the last
        }

    async def submit(self, spec: GangSpec, programs: dict[str, RoleProgram],
                     idempotency_key: str | None = None, parent: str | None = None) -> str:
        """Validate, check the gang could ever be admitted, and queue it. Returns its id.

        With a `parent` (a running job's id: its driver submits the gang), the gang is
        placed inside that job's budget instead of queued (control/inside.py).

        With an `idempotency_key`, a retry of the same submission returns the first one's
        id instead of queueing a second gang (`Intake.queue`).
        """
        await self.ready()
        spec = revalidated(spec, GangSpec, "submit")
        programs = programs_checked(spec, programs)
        if parent is not None:
            self.inside.check(spec, parent)
        fingerprint = submission_fingerprint(spec, programs) if idempotency_key else None
        return await self.intake.queue(spec, Submission("gang", programs, parent=parent),
                                       idempotency_key, fingerprint)

    async def deploy(self, deployment: DeploymentSpec, app: Any = None,
                     parent: str | None = None) -> str:
        """Queue a Serve application as a gang (see `runtime.kinds.deployment`); with a `parent`
        job, place it inside the job's budget (as `submit`). Returns its id."""
        await self.ready()
        deployment = revalidated(deployment, DeploymentSpec, "deploy")
        app = app if app is not None else deployment.import_path
        if app is None:
            raise ValueError("deployment needs an application: a bound Serve app or import_path")
        spec = deployment.gang_spec()
        self.intake.refuse_existing(spec, "deployment")  # at once (and again when queued)
        if parent is not None:
            self.inside.check(spec, parent)
        return await self.intake.queue(spec, Submission(
            "deployment", workload=Served(deployment, app), parent=parent))

    async def submit_job(self, job: JobSpec, idempotency_key: str | None = None) -> str:
        """Queue a Ray Job (see `runtime.kinds.job`): started through Ray's Job Submission API
        once its budget is admitted and reserved. Returns its id."""
        await self.ready()
        job = revalidated(job, JobSpec, "submit_job")
        return await self.intake.queue(job.gang_spec(), Submission("job", workload=RayJob(job)),
                                       idempotency_key, job.model_dump_json())

    async def submit_train(self, spec: GangSpec, controller: str | None,
                           idempotency_key: str | None = None, kind: str = "train") -> str:
        """Queue a Ray Train run's worker group (`runtime.client.train_callback`), or a Tune
        trial's group (`kind` "tune": `runtime.client.tune`): admitted as a gang, handed
        over to Train (or Tune) once reserved. Returns its id."""
        await self.ready()
        spec = revalidated(spec, GangSpec, "submit_train")
        return await self.intake.queue(
            spec, Submission(kinds.handed_over(kind), workload={"controller": controller}),
            idempotency_key, spec.model_dump_json())

    async def list_jobs(self, state: GangState | None = None) -> list[GangStatus]:
        """Ray Jobs queued through raygang, in submission order."""
        await self.ready()
        return [self._status(r) for r in self.registry.jobs(state)]

    async def job_logs(self, gang_id: str) -> str:
        """The output of the job's Ray job (its last attempt's); empty before it started."""
        await self.ready()
        record = self.registry.get(gang_id)
        if not kinds.of(record.kind).ray_job:
            raise GangNotFoundError(f"{gang_id} is a {record.kind}, not a job")
        ray_job_id = kinds.of(record.kind).shown(record.workload).get("ray_job_id")
        if ray_job_id is None:
            return ""
        return await self._cluster.job_logs(ray_job_id)

    def record(self, gang_id: str) -> GangRecord:
        """The gang's record (for the runtime's hand-off calls)."""
        return self.registry.get(gang_id)

    def changed(self, record: GangRecord) -> None:
        """A gang's state changed (its driver, cancel, recovery, a hand-off says so): it
        moves in the registry's indexes, and the journal writes it."""
        self.registry.changed(record)
        self.journal.changed(record)

    def _status(self, record: GangRecord) -> GangStatus:
        self.loop.explain(record)
        return record.status()

    # Reading --------------------------------------------------------------------------
    async def status(self, gang_id: str) -> GangStatus:
        await self.ready()
        return self._status(self.registry.get(gang_id))

    async def list_gangs(self, state: GangState | None = None,
                         queues: Collection[str] | None = None) -> list[GangStatus]:
        """Gangs in submission order, optionally only in `state` and in `queues`."""
        await self.ready()
        return [self._status(r) for r in self.registry.matching(state, queues)]

    async def gang_page(self, state: GangState | None, queues: Collection[str] | None,
                        offset: int, limit: int, newest_first: bool = False,
                        ) -> tuple[list[GangStatus], int]:
        """One page of `list_gangs` and how many match in all: only the page's statuses
        are built and sent (a status page polls this with thousands of gangs kept)."""
        await self.ready()
        page, total = self.registry.page(state, queues, offset, limit, newest_first)
        return [self._status(r) for r in page], total

    async def list_deployments(self) -> list[GangStatus]:
        """Deployments queued, running, or failed (until redeployed); undeployed ones are
        history (their gangs stay in `list_gangs`)."""
        await self.ready()
        return [self._status(r) for r in self.registry.deployments()
                if r.state is not GangState.CANCELLED]

    async def queues(self) -> list[QueueStatus]:
        """The queue tree with usage and fair shares as of now."""
        await self.ready()
        # Usage is what raygang holds now; only the nodes (for fair shares) may be cached.
        return queue_statuses(await self.loop.held_view(), self.registry.pending_totals(),
                              self.config.policy)

    async def history(self, queues: Collection[str] | None = None) -> QueueHistory:
        await self.ready()
        return self.loop.queue_history(queues)

    async def cluster(self) -> ClusterStatus:
        """Nodes with their total, free and used resources, and which gang holds what."""
        await self.ready()
        snapshot = await self.loop.view(max_age=CLUSTER_VIEW_MAX_AGE_S)
        observed = self.loop.sight.observed[0] if self.loop.sight.observed else self._clock()
        scaling = self.loop.scaling
        return cluster_status(snapshot, list(self.fleet), observed,
                              scaling.status() if scaling is not None else None,
                              self.loop.sight.unreachable)

    async def dry_run(self, spec: GangSpec) -> DryRunResult:
        """What a cycle would do with `spec` submitted now, without doing any of it."""
        await self.ready()
        return what_if(spec, await self.loop.view(max_age=0), self.registry,
                       self.config.policy, self._clock())

    async def debug_cycle(self, timeout_s: float = DUMP_WAIT_S) -> dict[str, Any]:
        """The next cycle's inputs and plan (`core.cycle_dump`), to replay it offline."""
        await self.ready()
        return await self.loop.dump_next(timeout_s)

    async def wait(self, gang_id: str, timeout: float | None = None,
                   until_running: bool = False) -> GangStatus:
        """The gang's status once it has finished (or, with `until_running`, once it is
        past the launch barrier), or as it is after `timeout` seconds."""
        await self.ready()
        record = self.registry.get(gang_id)
        live = record.live
        await first_set([live.released if until_running else live.finished], timeout)
        return self._status(record)

    async def results(self, gang_id: str) -> list[Any]:
        """The members' results in rank order (for a SUCCEEDED gang), as its run returned
        them. After a restart of the scheduler they come from the store, if kept there."""
        await self.ready()
        record = self.registry.get(gang_id)
        if record.state is GangState.SUCCEEDED and record.live.result_refs is None:
            values = await self.journal.results(record)
            if values is None:
                state = self.config.state
                raise ResultsLostError(
                    f"gang {gang_id} succeeded, but its results were lost when the scheduler "
                    f"restarted (kept only up to {state.results_max_bytes} bytes, for "
                    f"{state.results_retention_s:g}s)")
            record.live.result_refs = self._cluster.restore_results(values)
        return list(record.live.result_refs or [])

    # Changing -------------------------------------------------------------------------
    async def cancel(self, gang_id: str, reason: str = "cancelled by user") -> GangStatus:
        """Cancel a gang; returns once its members are gone and its resources released."""
        await self.ready()
        record = self.registry.get(gang_id)
        if record.state.finished:
            return record.status()
        await self.intake.saved(record)
        if record.cancel_reason is None:
            record.cancel_reason = reason
            self.registry.changed(record)  # no cycle may admit it any more
            await self.journal.write(record)  # the intent is durable before anything is done
        if record.state is GangState.PENDING:
            now = self._clock()
            record.apply(decide(record.life(), CancelledWhilePending(record.cancel_reason),
                                self.config.restart_policy, now), now)
            self.changed(record)
            self._finished(record)
        else:
            await self.fleet.halt(gang_id)
        return record.status()

    async def undeploy(self, name: str) -> GangStatus:
        """Stop a deployment and free its capacity; returns once its app is deleted."""
        await self.ready()
        record = self.registry.deployment(name)
        if record is None:
            raise GangNotFoundError(f"no deployment named {name!r}")
        return await self.cancel(record.gang_id, "undeployed")

    async def set_queue(self, queue: QueueSpec) -> list[QueueStatus]:
        """Add a queue or replace one's quota, limit, weight or parent (admin only over
        REST). The new tree is validated whole; a queue holding gangs stays a leaf."""
        await self.ready()
        queue = revalidated(queue, QueueSpec, "set_queue")
        holding = {r.spec.queue for r in self.registry.unfinished()}
        if queue.parent in holding:
            raise ValueError(
                f"parent: queue {queue.parent!r} holds gangs, so it cannot become a parent "
                "(only leaf queues hold gangs)"
            )
        config = self.config.with_queues([queue])
        await self.journal.put_queue(queue)  # durable, then applied
        self.config = config
        self.loop.wake()  # a larger quota or limit may admit waiting gangs
        return await self.queues()

    async def shutdown(self) -> int:
        """Cancel every unfinished gang (tearing down running ones). Returns how many."""
        await self.ready()
        unfinished = self.registry.unfinished()
        # All at once: a thousand gangs torn down one after another take minutes.
        await asyncio.gather(*(self.cancel(r.gang_id, "scheduler shut down") for r in unfinished))
        await self.fleet.let_go()  # and gangs that ended, their teardown under way
        for name in ("loop", "scaling", "writer", "inside"):
            task = self._tasks.get(name)
            if task is not None:
                task.cancel()
        # A shutdown ends this scheduler's history (a crash keeps it): the next start is clean.
        await self.journal.clear()
        return len(unfinished)

    async def close(self, timeout_s: float = 1.0) -> list[asyncio.Task[Any]]:
        """End every task this plane started (its loops, each gang's drive, resize and
        stop), as a process ending would, and wait for them, up to `timeout_s`. Gangs are
        not cancelled first (see `shutdown`): a drive that ends tears its gang down, as
        it does when cancelled. Returns the tasks that did not end (none, unless one
        ignores cancellation)."""
        return await self.tasks.close(timeout_s)

    # Bookkeeping ----------------------------------------------------------------------
    def _apply_queues(self, queues: list[QueueSpec]) -> None:
        self.config = self.config.with_queues(queues)

    def _released(self, record: GangRecord) -> None:
        """A gang's driver let go of everything it held."""
        self._finished(record)
        if record.parent is not None:
            self.inside.released(record)
        else:
            self.loop.released()

    async def _ending(self, record: GangRecord) -> None:
        """A gang's run is closed, its capacity not let go yet: a job's gangs end now."""
        await self.inside.ended(record)

    def _finished(self, record: GangRecord) -> None:
        """Once a gang has reached its final state: count it, and keep only the last
        `finished_gangs_kept` finished gangs (and their results)."""
        if not record.state.finished:
            return
        self._metrics.finished(record)
        for dropped in self.registry.finished(record):
            self.journal.forget(dropped)


if TYPE_CHECKING:  # mypy checks here that the plane offers every call of the protocol
    def _a_plane_is_a_scheduler(plane: ControlPlane) -> SchedulerAPI:
        return plane
