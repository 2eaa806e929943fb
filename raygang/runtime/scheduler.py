"""The scheduler: a detached, named async Ray actor that runs observe -> schedule -> apply.

It wakes on every submission, cancellation and gang completion, and at least every
`resync_interval_s` to notice changes it did not cause (nodes joining, other work ending).
Each admitted gang is driven by its own asyncio task; whatever happens to one gang is
caught there and recorded on that gang, so the loop itself never stops.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import time
import uuid
from collections.abc import Callable

import ray

from raygang.core.config import SchedulerConfig
from raygang.core.gang import GangState
from raygang.core.schedule import schedule, unschedulable_reason
from raygang.core.snapshot import ClusterSnapshot
from raygang.core.spec import GangSpec
from raygang.runtime.errors import GangNotFoundError, UnschedulableError
from raygang.runtime.launcher import GangLaunch, MemberFailure, ReservationTimeout
from raygang.runtime.observe import observe
from raygang.runtime.program import RoleProgram
from raygang.runtime.records import GangRecord
from raygang.runtime.status import GangError, GangEvent, GangStatus

log = logging.getLogger(__name__)

SCHEDULER_NAME = "raygang-scheduler"


class Scheduler:
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

    def _ensure_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.get_running_loop().create_task(self._loop())

    # Client-facing methods ------------------------------------------------------------
    async def ping(self) -> dict:
        self._ensure_loop()
        return {
            "config": self._config.model_dump(mode="json"),
            "gangs": len(self._gangs),
            "cycles": self._cycles,
            "last_cycle_error": self._last_cycle_error,
        }

    async def submit(self, spec: GangSpec, programs: dict[str, RoleProgram]) -> str:
        """Validate, check the gang could ever fit, and queue it. Returns the gang id."""
        self._ensure_loop()
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
        priority = self._config.resolve_priority(spec)
        # A recent view may accept; only a fresh one may refuse (a node may just have joined).
        reason = unschedulable_reason(spec, self._recent_snapshot()) and unschedulable_reason(
            spec, self._recent_snapshot(max_age=0)
        )
        if reason:
            raise UnschedulableError(f"gang {spec.name!r} can never fit on this cluster: {reason}")
        now = self._clock()
        record = GangRecord(
            gang_id=f"{spec.name}-{uuid.uuid4().hex[:8]}",
            spec=spec,
            programs=dict(programs),
            priority=priority,
            seq=next(self._seq),
            submitted_at=now,
        )
        record.events.append(
            GangEvent(at=now, from_state=None, to_state=GangState.PENDING, reason="submitted")
        )
        self._gangs[record.gang_id] = record
        self._wake.set()
        return record.gang_id

    async def status(self, gang_id: str) -> GangStatus:
        return self._get(gang_id).status()

    async def list_gangs(self, state: GangState | None = None) -> list[GangStatus]:
        return [r.status() for r in self._gangs.values() if state is None or r.state is state]

    async def wait(
        self, gang_id: str, timeout: float | None = None, until_running: bool = False
    ) -> GangStatus:
        """The gang's status once it has finished (or, with `until_running`, once it is
        past the launch barrier), or as it is after `timeout` seconds."""
        record = self._get(gang_id)
        event = record.released if until_running else record.finished
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return record.status()

    async def results(self, gang_id: str) -> list:
        """Object refs of the members' results in rank order (for a SUCCEEDED gang)."""
        return list(self._get(gang_id).result_refs or [])

    async def cancel(self, gang_id: str, reason: str = "cancelled by user") -> GangStatus:
        """Cancel a gang; returns once its members are gone and its resources released."""
        record = self._get(gang_id)
        if record.state is GangState.PENDING:
            record.move(GangState.CANCELLED, reason, self._clock())
            self._forget_finished(record)
        elif record.task is not None:
            record.reason = reason
            record.task.cancel()
            await asyncio.wait([record.task])
        return record.status()

    async def shutdown(self) -> int:
        """Cancel every unfinished gang (tearing down running ones). Returns how many."""
        unfinished = [r for r in self._gangs.values() if not r.state.finished]
        for record in unfinished:
            await self.cancel(record.gang_id, "scheduler shut down")
        if self._loop_task is not None:
            self._loop_task.cancel()
        return len(unfinished)

    # The loop ---------------------------------------------------------------------------
    async def _loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self._config.resync_interval_s)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            try:
                self._cycle()
            except Exception as error:  # never let one bad cycle stop scheduling
                log.exception("scheduling cycle failed")
                self._last_cycle_error = f"{type(error).__name__}: {error}"

    def _cycle(self) -> None:
        pending = [r for r in self._gangs.values() if r.state is GangState.PENDING]
        if not pending:
            return
        now = self._clock()
        snapshot = observe(self._held())
        self._observed = (now, snapshot)
        plan = schedule(snapshot, [r.pending_view() for r in pending], self._config, now)
        self._cycles += 1
        for admission in plan.admissions:
            self._admit(self._gangs[admission.gang_id], admission.nodes, now)
        for waiting in plan.waiting.values():
            self._gangs[waiting.gang_id].set_waiting(waiting.code, waiting.message)

    def _held(self):
        return [self._gangs[gang_id].placed_view() for gang_id in self._launches]

    def _recent_snapshot(self, max_age: float | None = None) -> ClusterSnapshot:
        """The last cycle's view if younger than `max_age` (default: one resync interval).
        Whether a gang could *ever* fit depends only on the nodes' totals, which change
        slowly; a burst of submissions then costs no GCS calls each."""
        max_age = self._config.resync_interval_s if max_age is None else max_age
        if self._observed and self._clock() - self._observed[0] < max_age:
            return self._observed[1]
        self._observed = (self._clock(), observe(self._held()))
        return self._observed[1]

    # Applying an admission ------------------------------------------------------------
    def _admit(self, record: GangRecord, nodes: tuple[str, ...], now: float) -> None:
        record.nodes = nodes
        record.members = []
        record.move(GangState.ADMITTED, f"placed on {len(set(nodes))} node(s)", now)
        launch = GangLaunch(
            record.gang_id, record.spec, record.programs, nodes,
            attempt=record.restarts, on_member_ready=record.members.append,
        )
        self._launches[record.gang_id] = launch
        record.task = asyncio.get_running_loop().create_task(self._drive(record, launch))

    async def _drive(self, record: GangRecord, launch: GangLaunch) -> None:
        try:
            await launch.reserve()
            record.move(GangState.RESERVED, "placement group ready", self._clock())
            record.move(GangState.STARTING, "starting members in role order", self._clock())
            await launch.start_members()
            record.move(GangState.RUNNING, "all members ready: released past the launch barrier",
                        self._clock())
            record.result_refs = await launch.run()
            record.move(GangState.SUCCEEDED, "all members finished", self._clock())
        except ReservationTimeout as timeout:
            record.move(GangState.PENDING, f"requeued: {timeout}", self._clock())
        except MemberFailure as failure:
            self._fail_or_restart(record, failure.error)
        except asyncio.CancelledError:
            record.move(GangState.CANCELLED, record.reason or "cancelled", self._clock())
        except Exception as error:  # a Ray error while applying: this gang only
            log.exception("launch of %s failed", record.gang_id)
            self._fail_or_restart(record, GangError(error_type=type(error).__name__,
                                                    message=str(error)))
        finally:
            launch.teardown()
            self._launches.pop(record.gang_id, None)
            record.nodes = ()
            record.task = None
            self._forget_finished(record)
            self._wake.set()

    def _fail_or_restart(self, record: GangRecord, error: GangError) -> None:
        record.error = error
        now = self._clock()
        if record.restarts < record.spec.max_restarts:
            record.restarts += 1
            record.move(GangState.RESTARTING,
                        f"restart {record.restarts}/{record.spec.max_restarts} after "
                        f"{error.summary}", now)
            record.move(GangState.PENDING, "requeued to restart whole", now)
        else:
            record.move(GangState.FAILED, error.summary, now)

    # Bookkeeping ------------------------------------------------------------------------
    def _get(self, gang_id: str) -> GangRecord:
        try:
            return self._gangs[gang_id]
        except KeyError:
            raise GangNotFoundError(f"no gang with id {gang_id!r}") from None

    def _forget_finished(self, record: GangRecord) -> None:
        """Keep the last `finished_gangs_kept` finished gangs (and their results)."""
        if not record.state.finished:
            return
        self._finished.append(record.gang_id)
        while len(self._finished) > self._config.finished_gangs_kept:
            self._gangs.pop(self._finished.popleft(), None)


# The actor: no resources of its own, many concurrent calls (waits are long polls).
SchedulerActor = ray.remote(num_cpus=0, max_concurrency=10_000)(Scheduler)
