"""One replay: a trace through raygang's control plane in virtual time, under one policy.

How it runs. The real `ControlPlane` (registry, journal, fleet of gang drivers, the
scheduling loop and `core.schedule`, the lifecycle) runs on a `VirtualTimeLoop`
(`control.virtual`) over a `SimCluster` (cluster.py: `control.memory`'s cluster with the
trace's jobs on it). Two settings of the plane say what differs from Ray, not what is
decided: the simulated cluster's view never lags a release, so there is no settling time
and no re-check cycle after one (`product_loop=True` keeps Ray's, which decides the same,
more slowly); and a baseline policy decides with its own function in place of
`core.schedule` (`sim.policies`). Jobs are submitted through
`ControlPlane.submit` at their trace times; the loop wakes, decides, and the fleet's
drivers reserve, start and run each admitted gang, whose body ends when its work is done;
preemptions go through the drivers' real grace-period path. Whenever every task waits,
the loop's clock jumps to the next timer (a job's end, a submission, the loop's resync, a
restart backoff), so the replay costs what the control plane does, not how long the
trace lasts. That is why this drives the event loop rather than calling the cycle step
by step: the order of wake-ups, the drivers waiting for their victims, the grace periods
and the journal's writes are the product's own code, not a re-enactment of it.

Deterministic: one thread, one event loop, timers ordered by time and then by the order
they were set, gang names fixed by trace order (`j000042`) so that no tie is broken by the
random part of a gang id. The same trace and settings give the same ledger.

A policy may run on its own partition of the cluster (a static partition: one control
plane per tenant, each on its own nodes, all on the same loop and clock) and may decide
with another function than `core.schedule` (a baseline: `sim.policies`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from raygang.control.config import SchedulerConfig
from raygang.control.errors import UnschedulableError
from raygang.control.journal import Journal
from raygang.control.loop import RELEASE_RECHECK_S
from raygang.control.plane import ControlPlane
from raygang.control.ports import NoMetrics
from raygang.control.program import RoleProgram
from raygang.control.records import GangRecord
from raygang.control.store import Store
from raygang.control.tasks import cancel_and_wait
from raygang.control.ticks import Replaying, Ticks
from raygang.core.gang import GangState
from raygang.core.plan import Preemption
from raygang.core.queues import DEFAULT_QUEUE
from raygang.core.resources import Resources
from raygang.core.spec import GangSpec, RoleSpec, Strategy
from raygang.control.virtual import VirtualTimeLoop
from raygang.sim.cluster import SimCluster
from raygang.sim.inference import INFERENCE_QUEUE, InferenceStream, ServiceLog
from raygang.sim.ledger import JobLog, TenantUsage
from raygang.sim.policies import Part, SimPolicy, tenant_quotas
from raygang.sim.settings import RACK, SimSettings
from raygang.sim.trace import Trace, TraceJob

Progress = Callable[[float, int, int], None]  # (simulated seconds, jobs done, jobs in all)
PROGRESS_EVERY_S = 3600.0  # of simulated time
STUCK_AFTER_S = 7 * 86400.0  # nothing running, nothing ending, jobs waiting: a bug


class SimulationStuck(RuntimeError):
    """The replay can never end: jobs wait for capacity the policy never gives them."""


@dataclass
class Replay:
    """What one replay produced: the ledger, per job and per tenant, and its cost."""

    policy: str
    jobs: dict[str, JobLog]  # gang name -> log, in trace order
    usage: TenantUsage
    end_s: float  # simulated time when the last job ended
    wall_s: float
    cycles: int
    gpus: int  # of the cluster
    quotas: dict[str, int]
    services: list[ServiceLog] = field(default_factory=list)  # the inference stream's
    inference_note: str | None = None  # why this policy ran without the stream


class DiscardingStore(Store):
    """A store that keeps nothing: a replay never restarts its scheduler. The journal does
    not serialize the records it writes here (`Store.discards`: a replay's speed is the
    simulator's, not the product's), but each write still takes its turn in the event
    loop, so that simultaneous events break ties as they did."""

    discards = True

    async def put(self, table: str, key: str, value: bytes) -> None:
        pass

    async def delete(self, table: str, key: str) -> None:
        pass

    async def load(self, table: str) -> dict[str, bytes]:
        return {}

    async def get(self, table: str, key: str) -> bytes | None:
        return None

    async def keys(self, table: str) -> list[str]:
        return []


class LedgerMetrics(NoMetrics):
    """The metrics port, feeding the ledger: who was stopped by which action, who ended."""

    def __init__(self, jobs: dict[str, JobLog], ended: Callable[[], None]):
        self._jobs = jobs
        self._ended = ended

    def preempted(self, victim: GangRecord, preemptor: GangRecord,
                  preemption: Preemption) -> None:
        self._jobs[victim.spec.name].stopped_for = (preemption.action,
                                                    int(preemptor.spec.total.get("GPU")))

    def finished(self, record: GangRecord) -> None:
        log = self._jobs.get(record.spec.name)
        if log is None:  # an inference deployment (sim.inference), undeployed
            return
        log.finished_at = record.finished_at
        if record.state is not GangState.SUCCEEDED:
            log.skipped = f"ended {record.state.value}: {record.reason}"
        self._ended()


def _replicas(members: int, settings: SimSettings) -> int | tuple[int, int]:
    """A job's members, as (min, max) when the replay makes it elastic."""
    share = settings.elastic_min
    if share is None or members < 2:
        return members
    return (max(1, math.ceil(members * share)), members)


# Why a job of a tenant without a partition of its own (the `static` policy: a GPU quota
# below one node, or none) is skipped; the report counts them (`metrics.summarize`).
NO_PARTITION = "no partition holds queue"


def gang_of(job: TraceJob, name: str, queue: str, priority: int | str,
            settings: SimSettings) -> GangSpec:
    """The gang a trace job is submitted as: its members, each with its GPUs."""
    return GangSpec(
        name=name, queue=queue, priority=priority, strategy=Strategy.PACK,
        roles=(RoleSpec(name="worker", replicas=_replicas(job.members, settings),
                        resources=Resources(GPU=job.gpus_per_member)),),
        preemption_grace_s=settings.preemption_grace_s,
        reservation_timeout_s=settings.reservation_timeout_s,
        checkpoint_interval_s=settings.checkpoint_s or None,  # what the job declares
        resize=settings.elastic_resize,
        topology=settings.job_topology(job.members),
        max_runtime_s=settings.job_max_runtime(job.duration_s),
    )


def replay(trace: Trace, policy: SimPolicy, settings: SimSettings,
           config: SchedulerConfig | None = None, progress: Progress | None = None) -> Replay:
    """Replay `trace` under `policy` on `settings.nodes` nodes; returns the ledger."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(
            _Replayer(trace, policy, settings, config or SchedulerConfig(), loop, progress)
            .run())
    finally:
        loop.close()


class _Replayer:
    def __init__(self, trace: Trace, policy: SimPolicy, settings: SimSettings,
                 config: SchedulerConfig, loop: VirtualTimeLoop, progress: Progress | None):
        self.trace, self.policy, self.settings = trace, policy, settings
        self.loop, self.progress = loop, progress
        self.jobs = {f"j{i:06d}": JobLog(job, f"j{i:06d}", job.duration_s)
                     for i, job in enumerate(trace.jobs)}
        self.parts = policy.parts(trace, settings, config)
        self.quotas = tenant_quotas(trace, config)
        self.usage = TenantUsage(self.quotas)
        self.left = len(self.jobs)
        self.done = asyncio.Event()
        self.stuck: BaseException | None = None
        self.services: dict[str, ServiceLog] = {}
        self.inference_note: str | None = None
        if settings.inference_gpus and policy.partitioned:
            self.inference_note = ("without the inference stream: a static partition has "
                                   "no nodes for it")

    def _ticker_ended(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.stuck = task.exception()
            self.done.set()  # the replay stops here, with the error

    def _ended(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.done.set()

    async def run(self) -> Replay:
        started = time.perf_counter()
        clock = self.loop.time
        metrics = LedgerMetrics(self.jobs, self._ended)
        planes: dict[str, ControlPlane] = {}  # queue -> the plane its jobs go to
        all_planes = []
        for part in self.parts:
            plane = self._plane(part, metrics, clock)
            all_planes.append(plane)
            for queue in part.tenants:
                planes[queue] = plane
        for plane in all_planes:
            await plane.ready()
        submissions = []
        self.feeding_done = False
        stream = None
        if self.settings.inference_gpus and self.inference_note is None:
            queue = DEFAULT_QUEUE if self.policy.shared_queue else INFERENCE_QUEUE
            stream = self.loop.create_task(InferenceStream(
                all_planes[0], self.settings, queue, clock, _hour_of(self.trace.start),
                self.services).run())
        ticker = self.loop.create_task(self._tick())
        ticker.add_done_callback(self._ticker_ended)
        for name, log in self.jobs.items():
            delay = log.job.submit_s - self.loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            plane = planes.get(log.job.queue)
            submissions.append(self.loop.create_task(self._submit(plane, name, log)))
        await asyncio.gather(*submissions)
        self.feeding_done = True
        if self.left:
            await self.done.wait()
        if self.stuck is not None:
            raise self.stuck
        end = self.loop.time()
        self.usage.close(end)
        ticker.remove_done_callback(self._ticker_ended)
        ticker.cancel()
        if stream is not None:
            await cancel_and_wait(stream)
        for plane in all_planes:
            await plane.shutdown()  # every gang has ended: this stops its loop and writer
        # ... which asyncio may not have let go yet (a cancellation can be swallowed
        # before 3.12): what still runs is cancelled until it ends.
        left = asyncio.all_tasks() - {asyncio.current_task()}
        await asyncio.gather(*map(cancel_and_wait, left))
        if self.progress:
            self.progress(end, len(self.jobs), len(self.jobs))
        return Replay(self.policy.name, self.jobs, self.usage, end,
                      time.perf_counter() - started,
                      sum(p.loop.cycles for p in all_planes),
                      self.settings.nodes * self.settings.gpus_per_node, self.quotas,
                      list(self.services.values()), self.inference_note)

    def _plane(self, part: Part, metrics: LedgerMetrics, clock: Callable[[], float]
               ) -> ControlPlane:
        gpus = Resources(GPU=self.settings.gpus_per_node)
        width = len(str(max(part.nodes - 1, 1)))
        nodes = [(f"{part.prefix}n{i:0{width}d}", gpus) for i in range(part.nodes)]
        per_rack = self.settings.rack_nodes
        labels = {} if per_rack is None else {
            node_id: {RACK: f"{part.prefix}r{i // per_rack}"}
            for i, (node_id, _) in enumerate(nodes)}
        cluster = SimCluster(nodes, self.jobs, self.usage, clock, self.settings.checkpoint_s,
                             self.settings.start_s, self.settings.end_s, labels)
        cluster.services = self.services
        cluster.resizes = frozenset(
            {self.settings.elastic_resize} if self.settings.elastic_min is not None else ())
        cluster.restart_s = self.settings.elastic_restart_s
        config = SchedulerConfig.model_validate({
            **part.config.model_dump(), "resync_interval_s": self.settings.resync_s,
            "state": {"store": "memory", "results_max_bytes": 0}})
        product = self.settings.product_loop  # Ray's lagging view, re-checked (see above)
        plane = ControlPlane(config, cluster, Journal(DiscardingStore(), config.state),
                             clock, metrics=metrics, decide=self.policy.decider(),
                             settle_s=0.0,
                             release_recheck_s=RELEASE_RECHECK_S if product else (),
                             replay=Replaying(Ticks(self.loop.quiet),
                                              self.loop.settled
                                              if self.settings.one_cycle_per_instant
                                              else None))
        cluster.on_change = plane.loop.wake
        return plane

    async def _submit(self, plane: ControlPlane | None, name: str, log: JobLog) -> None:
        job = log.job
        log.submitted_at = self.loop.time()
        if plane is None:
            log.skipped = f"{NO_PARTITION} {job.queue!r}"
            self._ended()
            return
        spec = gang_of(job, name, self.policy.queue(job), self.policy.priority(job),
                       self.settings)
        self.usage.change(log.submitted_at, job.queue, pending=job.gpus, pending_jobs=1)
        try:
            await plane.submit(spec, {"worker": _PROGRAM})
        except UnschedulableError as error:  # larger than the cluster (or its partition)
            self.usage.change(log.submitted_at, job.queue, pending=-job.gpus, pending_jobs=-1)
            log.skipped = str(error)
            self._ended()

    async def _tick(self) -> None:
        """Report progress every simulated hour, and stop a replay that can never end:
        jobs wait while nothing runs and nothing has happened for `STUCK_AFTER_S`."""
        last = (-1, 0)
        since = self.loop.time()
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            now = self.loop.time()
            done = len(self.jobs) - self.left
            if self.progress is not None:
                self.progress(now, done, len(self.jobs))
            state = (done, self.usage.total_running)
            if state != last or self.usage.total_running:
                last, since = state, now
            elif now - since >= STUCK_AFTER_S and self.feeding_done:
                waiting = [n for n, log in self.jobs.items()
                           if log.submitted_at is not None and log.finished_at is None
                           and log.skipped is None]
                raise SimulationStuck(
                    f"policy {self.policy.name}: {len(waiting)} jobs wait and nothing has "
                    f"run for {STUCK_AFTER_S / 3600:g} simulated hours (first: "
                    f"{', '.join(waiting[:5])})")


def _hour_of(start: str | None) -> float:
    """The hour of the day at simulated time 0 (the trace's clock; midnight if unknown)."""
    try:
        at = datetime.fromisoformat(start) if start else None
    except ValueError:
        at = None
    return 0.0 if at is None else at.hour + at.minute / 60


_PROGRAM = RoleProgram(target="raygang.sim:trace_job")  # never run: the cluster is simulated
