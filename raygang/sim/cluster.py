"""The simulated cluster: the in-memory cluster (`control.memory`) with a trace's jobs on it.

Nodes, bookings, observing and waiting are `control.memory.MemoryCluster`'s, the same
cluster the Ray-free test tier runs on; what this adds is the jobs' work. A member's body
ends on a timer set for the moment its work is done, so a run costs a few callbacks
whatever it lasts.

Work and checkpoints: a job needs `duration_s` seconds of work. An attempt that is
stopped keeps the work up to its last checkpoint (every `checkpoint_s` of running, from
its start) and loses the rest, which it must do again. Told of a preemption, a member
runs no hook (trace jobs have none): its body keeps running through the gang's grace
period and is then stopped, as `control.driver` does on Ray.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from raygang.control.memory import MemoryCluster
from raygang.control.ports import GangRun, ReservationTimeout
from raygang.control.records import GangRecord
from raygang.control.status import MemberStatus
from raygang.core.gang import GangState
from raygang.core.resources import Resources
from raygang.core.spec import Resize
from raygang.sim.inference import INFERENCE_QUEUE, ServiceLog
from raygang.sim.ledger import JobLog, Stop, TenantUsage
from raygang.sim.settings import RACK


class SimCluster(MemoryCluster):
    """The in-memory cluster (nodes, bookings, observe: `control.memory`) with a trace's
    jobs and their work on it (the `Cluster` port)."""

    # A replay has no outage: its loops do not ask, every few simulated seconds, whether
    # the cluster answers (a task each time, for an answer known in advance). No decision
    # changes: the probe's task ran alone, starting nothing and setting no timer.
    always_answers = True
    # Nor does a trace's job submit gangs from inside (`budget` is None): the plane's look
    # at job budgets wakes only on its interval, a timer as before, with no event to watch.
    gangs_inside_jobs = False
    # Every change here is the replay's (a job's start or end, a node's), and wakes the
    # plane's loop (`on_change`): a loop with an empty backlog sleeps until one comes, not
    # every resync interval for weeks (the static partitions run 14 such loops).
    tells_changes = True

    def __init__(self, nodes: Iterable[tuple[str, Resources]], jobs: dict[str, JobLog],
                 usage: TenantUsage, clock: Callable[[], float], checkpoint_s: float,
                 start_s: float = 0.0, end_s: float = 0.0,
                 labels: Mapping[str, Mapping[str, str]] | None = None):
        super().__init__(nodes, clock, labels=labels)
        self.jobs = jobs  # gang name -> its job's log
        self.usage = usage
        self.checkpoint_s = checkpoint_s
        self.start_s = start_s  # admitted -> running (SimSettings.start_s)
        self.end_s = end_s  # work done -> ended and torn down (SimSettings.end_s)
        self.services: dict[str, ServiceLog] = {}  # the inference stream's (sim.inference)
        # elastic jobs (SimSettings.elastic_min) add and remove members, or restart
        self.resizes: frozenset[Resize] = frozenset()
        self.restart_s = 0.0  # a restarted job's idle time (SimSettings.elastic_restart_s)

    # The port ------------------------------------------------------------------------
    def new_run(self, record: GangRecord, nodes: Sequence[str], attempt: int,
                on_member_ready: Callable[[MemberStatus], None]) -> GangRun:
        if record.spec.name in self.services:
            return ServiceRun(self, record, tuple(nodes), self.services[record.spec.name])
        return SimRun(self, record, tuple(nodes), on_member_ready)

    def adopt(self, record: GangRecord, leftovers: Any) -> GangRun | None:
        return None  # a replay starts on an empty cluster, and never restarts

    def budget(self, job_id: str) -> None:
        return None  # a trace's jobs submit nothing from inside


class SimRun:
    """One attempt of one job (the `GangRun` port). Its body ends when its work is done."""

    def __init__(self, cluster: SimCluster, record: GangRecord, nodes: tuple[str, ...],
                 on_member_ready: Callable[[MemberStatus], None]):
        self.cluster = cluster
        self.record = record
        self.log = cluster.jobs[record.spec.name]
        spec = record.spec
        self.bundles = list(zip(nodes, spec.min_bundles))
        self.on_member_ready = on_member_ready
        # An elastic job runs `size` of its `full` members; its work (`duration_s`, at full
        # size) progresses at size/full per second: linear scaling, and a live resize
        # loses nothing (the simulator's assumptions, said in docs/simulator.md).
        self.full = spec.world_size
        self.size = len(spec.min_slots)
        self.each = self.log.job.gpus_per_member
        self.gpus = self.size * self.each
        self._marks: list[tuple[float, float]] = []  # (time, work done) from each resize on
        self._sizes: list[int] = []  # the size from each mark on
        self._extra: dict[str, str] = {}  # surplus member -> its booking key
        self.started: float | None = None
        self._since: float | None = None  # its group started (the checkpoint cadence's origin)
        self._body: asyncio.Future | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def lost_members(self) -> list[str]:
        """A replay loses nothing."""
        return []

    async def reserve(self) -> None:
        """Book the bundles once they are free (the victims waited for are gone by now;
        only a plan decided on a stale view would wait), within the reservation timeout."""
        cluster = self.cluster
        deadline = cluster.clock() + self.record.spec.reservation_timeout_s
        if not await cluster.until(lambda: cluster.fits(self.bundles), deadline):
            raise ReservationTimeout(
                f"the reservation of gang {self.record.gang_id} was not ready within "
                f"{self.record.spec.reservation_timeout_s:g}s")
        cluster.book(self.record.gang_id, self.bundles)
        if self.log.first_admitted is None:
            self.log.first_admitted = cluster.clock()
        racks = {cluster.nodes[n].labels.get(RACK) for n, _ in self.bundles}
        self.log.racks = max(self.log.racks, len(racks - {None}))

    async def start_members(self) -> None:
        start_s = self.log.job.start_s
        start_s = self.cluster.start_s if start_s is None else start_s
        if start_s:
            await asyncio.sleep(start_s)
        now = self.cluster.clock()
        for slot, (node, _) in zip(self.record.spec.min_slots, self.bundles):
            self.on_member_ready(MemberStatus(
                role=slot.role, index=slot.index, rank=slot.rank,
                actor_name=f"sim-{self.record.gang_id}-{slot.role}-{slot.index}",
                node_id=node, ready_at=now))

    async def run(self) -> list[Any]:
        cluster, log = self.cluster, self.log
        now = cluster.clock()
        self.started = self._since = log.attempt_start = now
        log.attempts += 1
        if log.first_start is None:
            log.first_start = now
        queue = log.job.queue
        cluster.usage.change(now, queue, running=self.gpus, pending=-self.full * self.each,
                             pending_jobs=-1)
        cluster.on_change()
        loop = asyncio.get_running_loop()
        self._body = loop.create_future()
        if self.size == self.full:  # a rigid job's arithmetic, exactly as it always was
            self._timer = loop.call_at(now + log.remaining_s, _finish, self._body)
        else:
            self._marks, self._sizes = [(now, 0.0)], [self.size]
            self._reschedule(now)
        await self._body
        if cluster.end_s:  # still holding its capacity while it ends
            await asyncio.sleep(cluster.end_s)
        return [None] * self.size

    async def resume(self) -> list[Any]:
        raise NotImplementedError("the simulated scheduler never restarts")

    # Elastic jobs -----------------------------------------------------------------------
    def _done(self, now: float) -> float:
        """Work done in this attempt by `now` (in seconds at full size)."""
        if not self._marks:
            return 0.0 if self.started is None else now - self.started
        at, done = self._marks[-1]
        return done + (now - at) * self._sizes[-1] / self.full

    def _done_at(self, when: float) -> float:
        """Work done by an earlier time `when` of this attempt (its last checkpoint)."""
        for (at, done), size in zip(reversed(self._marks), reversed(self._sizes)):
            if at <= when:
                return done + (when - at) * size / self.full
        return 0.0

    def _resize(self, now: float, by: int) -> None:
        if not self._marks:  # it ran at full size until now
            self._marks, self._sizes = [(self.started, 0.0)], [self.size]
        self._marks.append((now, self._done(now)))
        self.size += by
        self._sizes.append(self.size)
        self.gpus = self.size * self.each
        self.cluster.usage.change(now, self.log.job.queue, running=by * self.each)
        if self._body is not None and not self._body.done():
            self._reschedule(now)

    def _reschedule(self, now: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        left = max(0.0, self.log.remaining_s - self._done(now))
        self._timer = asyncio.get_running_loop().call_at(
            now + left * self.full / self.size, _finish, self._body)

    def _last_checkpoint(self, now: float) -> float:
        """When the group running at `now` saved its last checkpoint (every
        `checkpoint_s` of its running)."""
        every = self.cluster.checkpoint_s
        return self._since + math.floor((now - self._since) / every) * every

    async def reserve_members(self, members: Sequence[tuple[Any, str]]) -> None:
        cluster, gang = self.cluster, self.record.gang_id
        wanted = [(f"{gang}/{slot.name}", [(node, Resources(GPU=self.each))])
                  for slot, node in members]
        deadline = cluster.clock() + self.record.spec.reservation_timeout_s
        if not await cluster.until(lambda: cluster.fits([b for _, bs in wanted for b in bs]),
                                   deadline):
            raise ReservationTimeout(f"members of gang {gang} were not reserved within "
                                     f"{self.record.spec.reservation_timeout_s:g}s")
        if self._closed:
            raise RuntimeError(f"gang {gang} ended before its members were added")
        for key, bundles in wanted:
            cluster.book(key, bundles)
        for (slot, _), (key, _) in zip(members, wanted):
            self._extra[slot.name] = key

    async def add_members(self, members: Sequence[tuple[Any, str]]) -> list[str]:
        await self.reserve_members(members)
        if self.started is not None and not self._closed:
            self._resize(self.cluster.clock(), len(members))
        return []  # a trace job has no resize hooks

    async def restart(self, world: Sequence[Any],
                      stopped: Callable[[], None] | None = None) -> None:
        """`resize: restart` (Ray Train V2's way): the job goes back to its last checkpoint
        (the work since is redone) and does no work while its `world` starts again
        (`restart_s`); then it runs at its new size. What the others held is freed."""
        cluster, log = self.cluster, self.log
        names = {slot.name for slot in world}
        for name in [n for n in self._extra if n not in names]:
            cluster.unbook(self._extra.pop(name))
        if stopped is not None:
            stopped()
        if self.started is None or self._closed or self._body is None or self._body.done():
            self.size, self.gpus = len(world), len(world) * self.each
            return
        now = cluster.clock()
        if not self._marks:
            self._marks, self._sizes = [(self.started, 0.0)], [self.size]
        done = self._done(now)
        saved = self._done_at(self._last_checkpoint(now)) if cluster.checkpoint_s else done
        before = self.gpus
        self.size, self.gpus = len(world), len(world) * self.each
        cluster.usage.change(now, log.job.queue, running=self.gpus - before)
        self._marks.append((now, saved))  # back to the checkpoint, and idle while starting
        self._sizes.append(0)
        self._since = now  # (stopped while starting, it keeps what it restored)
        if self._timer is not None:
            self._timer.cancel()
        if cluster.restart_s:
            await asyncio.sleep(cluster.restart_s)
        if self._closed or self._body.done():
            return
        started = cluster.clock()
        self._since = started
        self._marks.append((started, saved))
        self._sizes.append(self.size)
        log.resize_restarts += 1
        log.resize_lost_gpu_s += (done - saved) * self.full * self.each \
            + (started - now) * self.gpus
        self._reschedule(started)

    async def remove_members(self, members: Sequence[Any]) -> list[str]:
        # (A trace job runs no hook: its members worked through their grace period.)
        gone = [slot.name for slot in members if slot.name in self._extra]
        if self.started is not None and not self._closed and gone:
            self._resize(self.cluster.clock(), -len(gone))
        for name in gone:
            self.cluster.unbook(self._extra.pop(name))
        return []

    async def signal_preempt(self, grace_s: float,
                             members: Sequence[Any] | None = None) -> list[dict]:
        running = self._body is not None and not self._body.done()
        return [{"member": f"{s.role}-{s.index}", "rank": s.rank, "hooks": 0, "error": None,
                 "running": running}
                for s in (self.record.spec.slots if members is None else members)]

    async def wait_bodies(self, ranks: Sequence[int], timeout: float) -> None:
        if self._body is not None and not self._body.done():
            await asyncio.wait([self._body], timeout=max(0.0, timeout))

    async def close(self) -> None:
        """Free the nodes; account for the attempt: done, or stopped (work lost since the
        last checkpoint, the job pending again)."""
        if self._closed:
            return
        self._closed = True
        cluster, log = self.cluster, self.log
        cluster.unbook(self.record.gang_id)
        for key in self._extra.values():
            cluster.unbook(key)
        self._extra = {}
        if self.started is None:
            return  # stopped before it ran: nothing done, nothing lost
        now = cluster.clock()
        ran = now - self.started
        log.running_s += ran
        log.attempt_start = None
        queue = log.job.queue
        if self._timer is not None:
            self._timer.cancel()
        # An elastic job that ran below full size did its sizes' work, not its time's; a
        # rigid job's arithmetic stays exactly as it always was (no marks).
        resized = bool(self._marks)
        done = self._done(now) if resized else ran
        if self.record.state is not GangState.PENDING:  # it ended (succeeded, or failed)
            log.remaining_s = max(0.0, log.remaining_s - done)
            cluster.usage.change(now, queue, running=-self.gpus)
            return
        # Requeued (preempted; a body that ended during its grace period counts as
        # stopped too, as the lifecycle has it: it runs again, with nothing left to do).
        # It keeps the work done by its last checkpoint (every `checkpoint_s` of running).
        every = cluster.checkpoint_s
        if done >= log.remaining_s:
            saved = log.remaining_s
        elif every <= 0:
            saved = done
        elif resized:
            saved = self._done_at(self._last_checkpoint(now))
        else:
            saved = math.floor(ran / every) * every
        lost = max(0.0, min(done, log.remaining_s) - saved)
        log.remaining_s -= saved
        action, for_gpus = log.stopped_for or ("unknown", 0)
        log.stopped_for = None
        log.stops.append(Stop(at=now, ran_s=ran, lost_s=lost, gpus=self.gpus, action=action,
                              started_at=self.started, for_gpus=for_gpus))
        cluster.usage.change(now, queue, running=-self.gpus, pending=self.full * self.each,
                             pending_jobs=1)


class ServiceRun:
    """One inference deployment of the stream: it runs until undeployed (cancelled); it is
    never preempted (a non-preemptible class)."""

    def __init__(self, cluster: SimCluster, record: GangRecord, nodes: tuple[str, ...],
                 log: ServiceLog):
        self.cluster = cluster
        self.record = record
        self.bundles = list(zip(nodes, record.spec.bundles))
        self.log = log
        self._running = False

    def lost_members(self) -> list[str]:
        """A replay loses nothing."""
        return []

    async def reserve(self) -> None:
        cluster = self.cluster
        await cluster.until(lambda: cluster.fits(self.bundles))  # a stale plan: wait (no
        # timeout: it serves)
        cluster.book(self.record.gang_id, self.bundles)

    async def start_members(self) -> None:
        if self.cluster.start_s:
            await asyncio.sleep(self.cluster.start_s)

    async def run(self) -> list[Any]:
        now = self.cluster.clock()
        self.log.running_at = now if self.log.running_at is None else self.log.running_at
        self._running = True
        self.cluster.usage.change(now, INFERENCE_QUEUE, running=self.log.gpus)
        self.cluster.on_change()
        await asyncio.get_running_loop().create_future()  # until undeployed
        return []

    async def resume(self) -> list[Any]:
        raise NotImplementedError("the simulated scheduler never restarts")

    async def signal_preempt(self, grace_s: float,
                             members: Sequence[Any] | None = None) -> list[dict]:
        return []

    async def wait_bodies(self, ranks: Sequence[int], timeout: float) -> None:
        return None

    async def close(self) -> None:
        self.cluster.unbook(self.record.gang_id)
        if self._running:
            self._running = False
            now = self.cluster.clock()
            self.log.ended_at = now
            self.cluster.usage.change(now, INFERENCE_QUEUE, running=-self.log.gpus)


def _finish(body: asyncio.Future) -> None:
    if not body.done():
        body.set_result(None)
