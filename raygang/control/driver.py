"""A gang driver: one admitted gang's life on the cluster, as an asyncio task.

It waits for the gangs whose capacity it takes to be gone, reserves, starts the members,
releases them past the launch barrier and waits for the end; told to stop (preemption),
it signals the members and gives them their grace period. Whatever happens is reported to
the lifecycle (`core.lifecycle.decide`) as an event, and the decision is applied to the
gang's record; every path ends in `_release`, which frees what the gang holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from raygang.control.journal import Journal
from raygang.control.ports import Cluster, GangRun, MemberFailure, ReservationTimeout
from raygang.control.records import GangRecord
from raygang.control.status import GangError
from raygang.control.tasks import Spawn, cancel_and_wait, run_to_completion, spawn_free
from raygang.core.gang import GangState
from raygang.core.spec import MemberSlot, Resize
from raygang.core.lifecycle import (
    Event,
    Finished,
    Interrupted,
    MemberFailed,
    PreemptionSignalled,
    Released,
    Reserved,
    ReservationTimedOut,
    RestartPolicy,
    StartLost,
    decide,
)

log = logging.getLogger(__name__)


def still_finishing(replies: Sequence[dict[str, Any]]) -> list[int]:
    """Ranks of the members a preempted gang's grace period still waits for: those whose
    body was running when they replied and that ran no hook (a body watching
    `get_context().preempted` may checkpoint and return). A member whose hooks returned
    is done (its hooks are its checkpoint), and so is a member with no body left to run
    (a service without `on_preempt()`: nothing in it can react), a dead one, and one
    that did not answer within the grace."""
    return [r["rank"] for r in replies
            if r.get("running") and not r.get("hooks") and r.get("error") is None]


async def grace_period(run: GangRun, grace_s: float,
                       members: Sequence[MemberSlot] | None = None) -> None:
    """Tell the gang's members (or only `members`) they are being stopped, and wait until
    none has anything left to finish, or `grace_s` passed (<= 0: no time to checkpoint,
    nothing is sent)."""
    if grace_s <= 0:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    replies = await run.signal_preempt(grace_s, members)
    busy = still_finishing(replies)
    if busy:
        await run.wait_bodies(busy, deadline - loop.time())


class GangDriver:
    def __init__(self, record: GangRecord, run: GangRun, *, cluster: Cluster, journal: Journal,
                 policy: Callable[[], RestartPolicy], clock: Callable[[], float],
                 wake_after: Callable[[float], None],
                 released: Callable[[GangDriver], None],
                 changed: Callable[[GangRecord], None],
                 ending: Callable[[GangRecord], Awaitable[None]] | None = None,
                 spawn: Spawn = spawn_free, settle_s: float = 0.0,
                 restarted: Callable[[GangRecord], None] | None = None):
        self.record = record
        self.run = run
        self._cluster = cluster
        self._journal = journal
        self._policy = policy
        self._clock = clock
        self._wake_after = wake_after
        self._released = released
        self._changed = changed  # the plane re-indexes and journals a gang that changed
        self._ending = ending  # after the run is closed, before its capacity is let go
        self._restarted = restarted  # told of each whole-gang restart (metrics count them)
        self._spawn = spawn
        self._settle_s = settle_s  # how long the cluster's view may lag a release
        self.task: asyncio.Task[None] | None = None
        self.done = False  # released: it holds nothing any more
        self._releasing = False
        self._stopping: asyncio.Task[Any] | None = None
        self._start_lost: str | None = None  # why its start was given up (`give_up_start`)
        self._released_event = asyncio.Event()
        # Resizes run one after another, each at the size decided by its turn (the book
        # and the run agree between any two): `_last_resize` is the last one queued.
        self._last_resize: asyncio.Task[Any] | None = None
        self._resizes: set[asyncio.Task[Any]] = set()  # queued or under way
        # Surplus members the run holds (added, or reserved for a restart, and not removed
        # yet): a removal queued behind an add that failed or was skipped has none to stop.
        self._held: set[str] = set()
        # member name -> done once what it held is free (its removal, or a restart's stop:
        # a gang admitted into that capacity waits for this, not for the restart)
        self.freeing: dict[str, asyncio.Future[Any]] = {}

    def start(self, waits_for: Sequence[asyncio.Future[Any]] = (),
              adopted: bool = False) -> None:
        if adopted:  # the surplus the previous process's run held, found with it
            self._held = set(self.record.live.surplus)
        self.task = self._spawn(self._drive(list(waits_for), adopted))

    def decide(self, event: Event) -> None:
        """Apply the lifecycle's decision on `event` to the gang."""
        now = self._clock()
        outcome = decide(self.record.life(), event, self._policy(), now)
        restarts = self.record.restarts
        self.record.apply(outcome, now)
        self._changed(self.record)
        if self._restarted is not None and self.record.restarts > restarts:
            self._restarted(self.record)
        if outcome.not_before is not None:  # a restart waits: look again when it may run
            self._wake_after(max(0.0, outcome.not_before - now))

    # The drive ------------------------------------------------------------------------
    async def _drive(self, waits_for: list[asyncio.Future[Any]], adopted: bool) -> None:
        record, run = self.record, self.run
        try:
            if adopted:  # started by the previous scheduler process: pick up its run
                results = await self._limited(run.resume())
            else:
                if waits_for:  # their resources are promised to this gang: wait until freed
                    await asyncio.wait(waits_for)
                    # ... and until the cluster's view shows it (at most the settle time):
                    # on Ray a placement group asked for earlier is placed only on a later
                    # retry of the GCS, up to a second after the room is free.
                    await self._cluster.until_free(record.placed_view().bundles,
                                                   self._settle_s)
                await run.reserve()
                self.decide(Reserved())
                await run.start_members()
                self.decide(Released())
                # Stored before the release: a restarted scheduler then adopts the gang.
                await run_to_completion(self._journal.write(record))
                results = await self._limited(run.run())
            if not record.live.stopping:
                record.live.result_refs = results
            self.decide(Finished())
        except ReservationTimeout as timeout:
            self.decide(ReservationTimedOut(str(timeout)))
        except MemberFailure as failure:
            self._failed(failure.error, failure.final)
        except asyncio.CancelledError:
            self.decide(Interrupted() if self._start_lost is None
                        else StartLost(self._start_lost))
        except Exception as error:  # an error of the cluster while applying: this gang only
            log.exception("launch of %s failed", record.gang_id)
            self._failed(GangError(error_type=type(error).__name__, message=str(error)))
        finally:
            await self._release()

    async def _limited(self, running: Awaitable[Any]) -> Any:
        """The run, cut at the gang's `max_runtime_s` since it started: then it ends as a
        user's cancellation does (`plane.cancel`: the intent stored first), the limit its
        reason. Slurm ends a job at its time limit; Kueue deactivates a Job past its
        max-exec-time-seconds."""
        limit, started = self.record.spec.max_runtime_s, self.record.started_at
        if limit is None:
            return await running
        left = limit - (self._clock() - started) if started is not None else limit
        try:
            return await asyncio.wait_for(running, max(0.0, left))
        except TimeoutError:
            if self.record.cancel_reason is None:
                self.record.cancel_reason = f"ran past its max_runtime_s ({limit:g} s)"
                self._changed(self.record)
                await run_to_completion(self._journal.write(self.record))
            raise asyncio.CancelledError() from None  # ends the drive: Interrupted

    def _failed(self, error: GangError, final: bool = False) -> None:
        if final or not self.record.live.stopping:  # else it ends as part of its preemption
            self.record.error = error
        self.decide(MemberFailed(error.summary, final))

    async def _release(self) -> None:
        """Free everything the gang's run holds. How the gang ended is written first: a
        scheduler restarting in between must not run it again."""
        if self._releasing:  # under way (a cancellation and a preemption at once)
            await self._released_event.wait()
            return
        self._releasing = True
        record = self.record
        for task in list(self._resizes):  # the run's close removes every member
            await cancel_and_wait(task)
        if self.freeing:  # a removal cancelled before its turn freed none: free them now
            self._freed(set(self.freeing))
        if record.state is GangState.SUCCEEDED and record.live.result_refs:
            await run_to_completion(self._journal.keep_results(record, self._cluster.fetch))
        if record.state.finished:
            await run_to_completion(self._journal.write(record))
        await self.run.close()
        if self._ending is not None:  # the gangs inside a job end with it
            await run_to_completion(self._ending(record))
        record.nodes = ()
        record.live.surplus, record.live.leaving = {}, {}
        record.live.stopping = None
        self.done = True
        self._released_event.set()
        self._released(self)

    # Resizing (elastic gangs: core/elastic.py) ------------------------------------------
    def grow(self, members: Sequence[str], nodes: Sequence[str]) -> None:
        """Add these surplus members on these nodes: they hold their capacity at once (the
        plan booked it), and start beside the running members once the resizes queued
        before have ended."""
        record = self.record
        for member, node in zip(members, nodes):
            record.live.surplus[member] = node
        self._queue_resize(lambda: self._grow(list(members)))

    async def _grow(self, members: list[str]) -> None:
        record = self.record
        # A member shrunk again while this waited for its turn is not added at all.
        names = [m for m in members if m in record.live.surplus]
        if not names:
            return
        slots = [(record.spec.slots_by_name[m], record.live.surplus[m]) for m in names]
        restart = record.spec.resize is Resize.RESTART
        try:
            problems: list[str] = []
            if restart:  # their room first: the gang is not stopped for nothing
                await self.run.reserve_members(slots)
            else:
                problems = await self.run.add_members(slots)
        except Exception as error:  # noqa: BLE001 - the gang runs on without them
            for name in names:
                record.live.surplus.pop(name, None)
            record.note(f"could not grow by {', '.join(names)}: "
                        f"{type(error).__name__}: {error}", self._clock())
            return
        self._held.update(names)
        if restart:
            await self._restart(f"added {', '.join(names)}")
        else:
            record.note(f"grew to {record.size} members (added {', '.join(names)})",
                        self._clock())
            self._note_problems(problems)

    def shrink(self, members: Sequence[str], why: str) -> None:
        """Remove these surplus members after the grace period, once the resizes queued
        before have ended (an add of the same members among them): the gang runs on."""
        record = self.record
        members = [m for m in members if m in record.live.surplus]
        loop = asyncio.get_running_loop()
        for member in members:
            record.live.leaving[member] = record.live.surplus.pop(member)
            self.freeing[member] = loop.create_future()
        record.note(f"shrinking to {record.size} members (removing {', '.join(members)}): "
                    f"{why}", self._clock())
        self._queue_resize(lambda: self._shrink(list(members)))

    async def _shrink(self, members: list[str]) -> None:
        record, names = self.record, set(members)
        held = [m for m in members if m in self._held]  # the others were never added
        try:
            if held:
                slots = [record.spec.slots_by_name[m] for m in held]
                if record.spec.resize is Resize.RESTART:
                    await self._restart(f"removed {', '.join(sorted(held))}",
                                        stopped=lambda: self._freed(names))
                else:
                    await grace_period(self.run, record.spec.preemption_grace_s, slots)
                    self._note_problems(await self.run.remove_members(slots))
                    self._held.difference_update(held)
        finally:
            self._freed(names)
            record.members[:] = [m for m in record.members  # in place: the run appends
                                 if f"{m.role}-{m.index}" not in names]  # to this list

    def _freed(self, names: set[str]) -> None:
        """What these leaving members held is free: off the book, and the gangs admitted
        into it may go on."""
        for name in names:
            self.record.live.leaving.pop(name, None)
            freeing = self.freeing.pop(name, None)
            if freeing is not None and not freeing.done():
                freeing.set_result(None)
        self._wake_after(0.0)

    def _note_problems(self, problems: Sequence[str]) -> None:
        for problem in problems:  # the gang runs on: its members were told, not all well
            self.record.note(f"resize: {problem}", self._clock())

    async def _restart(self, change: str, stopped: Callable[[], None] | None = None) -> None:
        """`resize: restart`: every member gets the grace period of a preemption (to
        save a checkpoint), then the whole gang starts again at its new size (its
        minimum and the surplus it holds and keeps), as Ray Train V2 restarts a worker
        group. A member failing to start fails the gang as a failure while it runs would."""
        record, spec = self.record, self.record.spec
        kept = {m for m in self._held if m in record.live.surplus}
        world = [s for s in spec.slots if s in spec.min_slots or s.name in kept]
        await grace_period(self.run, spec.preemption_grace_s)
        record.members[:] = []  # in place: the run appends to this list
        dropped = self._held - kept  # leaving: the restart frees what they held

        def gone() -> None:
            self._held = kept
            self._freed(dropped)
            if stopped is not None:
                stopped()

        try:
            await self.run.restart(world, gone)
        except Exception as error:  # noqa: BLE001 - the run fails the gang with it
            record.note(f"could not restart at {len(world)} members ({change}): "
                        f"{type(error).__name__}: {error}", self._clock())
            return
        record.note(f"restarted at {len(world)} members ({change})", self._clock())

    def _queue_resize(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run `work` once every resize queued before it has ended, whatever their end
        (each notes its own)."""
        previous = self._last_resize

        async def in_turn() -> None:
            if previous is not None and not previous.done():
                await asyncio.wait([previous])
            await work()

        task = self._spawn(in_turn())
        self._last_resize = task
        self._resizes.add(task)
        task.add_done_callback(self._resized)

    def _resized(self, task: asyncio.Task[Any]) -> None:
        self._resizes.discard(task)
        self._wake_after(0.0)  # what it freed or failed to take is there for a cycle

    # Stopping -------------------------------------------------------------------------
    def give_up_start(self, why: str) -> None:
        """Its start cannot finish (the cluster lost part of it): tear it down, and requeue
        it with no restart counted (`StartLost`). Only while it starts, and not stopping."""
        if self.record.state not in (GangState.RESERVED, GangState.STARTING) \
                or self.record.live.stopping is not None or self._start_lost is not None:
            return
        self._start_lost = why
        self._stopping = self._spawn(self.halt())

    def preempt(self, stopping: str, why: str) -> None:
        """Tell the gang it is being preempted (`stopping`: by whom), give it its grace
        period, then stop it; it goes back to its queue."""
        self.decide(PreemptionSignalled(stopping, why, self.record.spec.preemption_grace_s))
        self._stopping = self._spawn(self._stop())

    async def _stop(self) -> None:
        if self.record.state is GangState.RUNNING:
            await grace_period(self.run, self.record.spec.preemption_grace_s)
        await self.halt()

    async def halt(self) -> None:
        """Cancel the drive and wait until the gang is torn down. A drive cancelled before
        its first step never runs at all, not even its `finally` (a gang cancelled in the
        instant after admission): then do here what the drive would have."""
        task = self.task
        if task is None:
            return
        await cancel_and_wait(task)
        if not self._releasing:
            self.decide(Interrupted())
        await self._release()
