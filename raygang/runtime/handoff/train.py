"""A Ray Train V2 run's worker groups handed capacity raygang reserved (the scheduler's side).

Ray Train's controller asks raygang for its worker group through `RaygangTrain` (its
callback, `runtime/client/train_callback.py`): the run waits in raygang's queue like any
gang; once its bundles are reserved, the callback claims their nodes (the holds go, Train's
worker group placement group is pinned there) and reports the group it made, which is
checked and adopted. A `TrainSession` is that exchange for one run, shared by two kinds:
a run queued on its own (`kinds/train`: `TrainLaunch`, the gang's run) and a run a raygang
job's driver started, inside the job's budget (`kinds/job`: `JobLaunch.open_session`).

Preemption goes through Train's own path: the callback is told (`wait_preempt`) and marks
each worker preempted with a deadline (`ray.train.get_preemption_info()`); Train lets the
workers checkpoint, tears its worker group down at the deadline and asks raygang again,
so the run waits in the queue holding nothing and resumes from its checkpoint. raygang
never removes a running Train group to preempt it (Train would count that as a failure
and end the run); it does so only to cancel the run, or when the controller is dead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Sequence

from raygang.control.outage import LOST_START_S
from raygang.control.ports import MemberFailure, ReservationTimeout
from raygang.control.status import GangError
from raygang.control.tasks import first_set
from raygang.core.resources import Resources
from raygang.runtime.handoff.budget import Budget, HandoffFailed, check_group, remove_group
from raygang.runtime.ray_private import (
    JOB_REQUESTER,
    dead_requesters,
    group_nodes,
    unplaced_actors_of,
)

log = logging.getLogger(__name__)
WATCH_INTERVAL_S = 1.0
# After its preemption deadline, Train notices on its next poll of the workers (every few
# seconds) and removes its group itself; only past this much more does raygang remove it.
TRAIN_TEARDOWN_S = 20.0
LIVENESS_S = 2.0  # a read of the controller's state: how long the loop waits for it
# A worker of a claimed group that the GCS has had waiting for its creation, with no
# process, this long: its creation was lost (Ray 2.60 loses an actor's creation when its
# GCS dies while scheduling it), and Train, which waits for its workers with no timeout,
# would wait for ever. The same wait as for a gang's members after an outage.
LOST_WORKERS_S = LOST_START_S
TRAIN_WORKER = "RayTrainWorker"  # the class of Train V2's worker actors


def requester_name(requester: str) -> str:
    """Who claims a session's groups, in words: a Train controller, or a Tune sweep's
    driver (its trials' requester)."""
    return "the Ray Tune driver" if requester.startswith(JOB_REQUESTER) \
        else "the Ray Train controller"


class Unplaced:
    """Actors seen waiting for their creation with no process, and since when."""

    def __init__(self) -> None:
        self.since: dict[str, float] = {}

    def overdue(self, waiting: Collection[str], now: float, limit_s: float) -> list[str]:
        """Those of `waiting` (a look at `now`) seen waiting in every look for `limit_s`
        or more (forgotten once returned); one missing from a look starts anew."""
        self.since = {actor: self.since.get(actor, now) for actor in waiting}
        due = [actor for actor, since in self.since.items() if now - since >= limit_s]
        for actor in due:
            del self.since[actor]
        return due


class TrainSession:
    """One Train run's worker group inside capacity raygang admitted: claim, adopt,
    preempt, release. Lives in the scheduler; the callback drives it by RPC."""

    def __init__(self, session_id: str, wanted: Sequence[Resources], budget: Budget,
                 lease_s: float, controller_id: str | None,
                 on_release: Callable[[TrainSession], None] | None = None):
        self.session_id = session_id
        self.wanted = tuple(wanted)
        self.budget = budget
        self.lease_s = lease_s
        self.controller_id = controller_id
        self._on_release = on_release
        self.indices: list[int] = []
        self.nodes: list[str] = []
        self.pg_id: str | None = None
        self.placed: list[str] = []  # the adopted group's node per bundle
        self.claimable = asyncio.Event()  # the budget is reserved: a claim may take it
        self.claimed = asyncio.Event()
        self.adopted = asyncio.Event()
        self.released = asyncio.Event()  # Train shut its group down (after adopt)
        self.failed: str | None = None  # the hand-off failed: why
        self.handoff_failed = asyncio.Event()
        self.finished: tuple[bool, str | None] | None = None  # (ok, error) of the run
        self.ended = asyncio.Event()
        self.preempt_deadline_ms: int | None = None
        self.preempting = asyncio.Event()  # set once preempted, or once the gang ended
        self.over = False  # the gang ended: the callback's watcher may stop
        self.broken: MemberFailure | None = None  # the run fails with it (a failed resize)
        self.final = False  # the last group was released: the run is ending
        self._liveness: asyncio.Future[set[str]] | None = None  # the controller's, in flight
        self._looking: asyncio.Future[None] | None = None  # a look for lost workers
        self._unplaced = Unplaced()  # its workers with no process
        self._claims = 0  # claims made: which group a look for lost workers was about
        self.gave_up: str | None = None  # why raygang removed a group Train was starting

    # Driven by the callback --------------------------------------------------------
    async def claim(self) -> list[str]:
        """Take the bundles for the group (waiting for room in a job's budget) and return
        their nodes; the lease to adopt starts now."""
        if self.claimed.is_set() and not self.adopted.is_set():
            # Train asks again before its group was placed: it gave up waiting for it
            # (work outside raygang took the nodes in the hand-off window).
            why = ("Train asked for its nodes again before its worker group was placed on "
                   "them (placed elsewhere or not at all)")
            if self._on_release is None:  # a gang of its own: it requeues
                self._fail(why)
                raise HandoffFailed(why)
            log.warning("%s: %s; taking the job's bundles again", self.session_id, why)
            self._on_release(self)  # in a job: the bundles go back, and are taken again
            self._next_group()
        if self.released.is_set():  # Train restarts its group inside the same budget
            self._next_group()
        while True:
            chosen = None if self.budget.closing else self.budget.take(self.wanted)
            if chosen is not None:
                break
            await self.budget.changed.wait()
        self.indices = chosen
        self.nodes = [self.budget.nodes[i] for i in chosen]
        self._claims += 1
        self.claimed.set()
        return list(self.nodes)

    def adopt(self, pg_id: str, placed: Sequence[str | None] | None) -> list[str]:
        """Check Train's group (`placed`: its bundles' nodes, `group_nodes`) against the
        nodes handed over and book it to the gang."""
        try:
            self.placed = check_group(pg_id, placed, self.nodes)
        except HandoffFailed as error:
            self._fail(str(error))
            raise
        self.pg_id = pg_id
        self.adopted.set()
        return self.placed

    def release(self, final: bool = False) -> None:
        """Train shut its worker group down: for good (`final`: the run ends), or to
        start another (preempted, or a worker failed)."""
        self.pg_id = None
        self.final = final
        if self.asked_to_stop and self._on_release is None:
            # raygang asked for it (a preemption, or a resize): Train asks for its next
            # group at once, and waits until the gang's run says what that group is.
            self.claimable.clear()
        self.released.set()
        if self._on_release is not None:
            self._on_release(self)

    @property
    def asked_to_stop(self) -> bool:
        """raygang told the group to stop (preempted, or resized): its release is not a
        failure."""
        return self.preempt_deadline_ms is not None

    def next_group(self, wanted: Sequence[Resources]) -> None:
        """The run restarts at a new size (an elastic resize): its next group claims
        `wanted`."""
        self.wanted = tuple(wanted)
        self._next_group()

    def _next_group(self) -> None:
        for event in (self.claimed, self.adopted, self.released, self.preempting):
            event.clear()
        self.preempt_deadline_ms = None
        self.placed = []

    def finish(self, error: str | None) -> None:
        self.finished = (error is None, error)
        self.ended.set()

    async def wait_preempt(self, timeout: float) -> dict | None:
        """What the callback's watcher waits for: {"deadline_ms"} once preempted, or
        {"cancelled"}; None after `timeout` (it asks again)."""
        if not await first_set([self.preempting], timeout):
            return None
        if self.preempt_deadline_ms is None:
            return {"ended": True}
        return {"deadline_ms": self.preempt_deadline_ms}

    def end_watch(self) -> None:
        self.over = True
        self.preempting.set()

    # Driven by the gang's run ------------------------------------------------------
    def preempt(self, grace_s: float) -> None:
        self.preempt_deadline_ms = int((time.time() + grace_s) * 1000)
        self.preempting.set()

    def _fail(self, why: str) -> None:
        self.claimable.clear()
        self.failed = why
        self.handoff_failed.set()

    async def handed_over(self, claim_timeout: float) -> None:
        """Wait for the claim (up to `claim_timeout`) and then the adopt (within the
        lease); ReservationTimeout if either does not come or the hand-off fails."""
        self.claimable.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + claim_timeout
        while not await first_set((self.claimed, self.handoff_failed), WATCH_INTERVAL_S):
            await self.check_controller()
            if loop.time() > deadline:
                raise ReservationTimeout(f"the Train run did not claim its reserved nodes "
                                         f"within {claim_timeout:g}s")
        # The claim may have come from a requester that has died since (its call goes on
        # in this actor): the controller is watched through the lease too.
        lease_end = loop.time() + self.lease_s
        while not await first_set((self.adopted, self.handoff_failed, self.ended),
                                  WATCH_INTERVAL_S):
            await self.check_controller()
            self.watch_workers()
            if loop.time() > lease_end:
                self._fail(f"Train's worker group was not placed on the reserved nodes "
                           f"within the {self.lease_s:g}s lease")
        if self.failed:
            raise ReservationTimeout(f"hand-off failed: {self.failed}")
        if not self.adopted.is_set() and self.finished is not None:
            # The run ended while its group was being placed (Train gave up on it): it
            # failed, and waits in the queue no more (its driver's `fit` has returned)
            ended = self.finished[1] or "the Train run ended before its worker group was placed"
            raise MemberFailure(GangError(
                error_type="TrainingFailed",
                message=ended if self.gave_up is None else f"{self.gave_up}; Train: {ended}"),
                final=True)

    async def watch(self) -> None:
        """Until the run ends: raise MemberFailure if it failed or its controller died, if
        a resize failed, or if Train restarts its group on its own (a worker failed: the
        gang restarts, so the run waits in the queue again holding nothing; Train's
        FailureConfig, not raygang, decides when the run has failed for good)."""
        while True:
            if self.broken is not None:
                raise self.broken
            if self.finished is not None:
                ok, error = self.finished
                if ok:
                    return
                raise MemberFailure(GangError(error_type="TrainingFailed", message=error or ""),
                                    final=True)
            if self.released.is_set() and not self.final and not self.asked_to_stop:
                raise MemberFailure(GangError(
                    error_type="TrainRestart",
                    message="Ray Train restarts its worker group (a worker failed); the run "
                            "waits in the queue again"))
            # A group stopped as asked is the gang's run's to follow: it is stopped (the
            # lifecycle requeues it), or restarted at its new size (`TrainLaunch.restart`).
            await self.check_controller()
            events = (self.ended,) if self.final or self.released.is_set() \
                else (self.ended, self.released)
            await first_set(events, WATCH_INTERVAL_S)

    async def check_controller(self) -> None:
        """MemberFailure (final) if the run's controller is dead: nothing will claim,
        adopt or release for it any more."""
        if await self._controller_dead():
            raise MemberFailure(GangError(
                error_type="ControllerDied",
                message=f"{requester_name(self.controller_id or '')} died"), final=True)

    async def _controller_dead(self) -> bool:
        """Whether the GCS says the controller is dead. Read in a thread, never on the
        scheduler's loop; a GCS that does not answer within LIVENESS_S decides nothing
        (False), and its read goes on, looked at next time, with never two in flight (a
        long outage must not fill the loop's thread pool)."""
        if not self.controller_id:
            return False
        read = self._liveness
        if read is None:
            read = self._liveness = asyncio.ensure_future(
                asyncio.to_thread(dead_requesters, {self.controller_id}))
            # Its error is read below, or by nobody if the session ends first: say so
            read.add_done_callback(lambda done: done.cancelled() or done.exception())
        # Two may wait on one read (the run's watch, and a resize's hand-off): each keeps
        # its own reference, and the first to find it done lets the next call read anew.
        done, _ = await asyncio.wait({read}, timeout=LIVENESS_S)
        if not done:
            return False
        if self._liveness is read:
            self._liveness = None
        if read.exception() is not None:
            log.debug("%s: reading its controller's state failed: %r", self.session_id,
                      read.exception())
            return False
        return bool(read.result())

    def _placing(self) -> bool:
        """A group claimed and not yet placed, of a Train controller (not a Tune driver's
        trials): the window in which Train waits for its workers with no timeout."""
        controller = self.controller_id or ""
        return (bool(controller) and not controller.startswith(JOB_REQUESTER)
                and self.claimed.is_set() and not self.adopted.is_set())

    def watch_workers(self) -> None:
        """Start a look (one at a time) for workers of the group claimed and not yet
        placed that the GCS has had waiting with no process for LOST_WORKERS_S, and remove
        the placement group they were to start in: Train's start of that group then fails
        (its workers are dead) and Train, told by its failure policy, asks for a group
        again. Called while the run waits for its group (each second, or each poll of its
        job)."""
        if not self._placing() or (self._looking is not None and not self._looking.done()):
            return
        self._looking = asyncio.ensure_future(self._look(self._claims, LOST_WORKERS_S))
        self._looking.add_done_callback(lambda done: done.cancelled() or done.exception())

    async def _look(self, claim: int, limit_s: float) -> None:
        """Read the controller's waiting workers off the loop, then decide here, against
        the session as it is now (a look begun before the group was placed, before a new
        claim or before the session ended decides nothing), and remove off the loop. A
        GCS that does not answer decides nothing. (An actor is killed by id only through
        a handle, which only its owner, Train's controller, has: its group is removed.)"""
        try:
            waiting = await asyncio.to_thread(unplaced_actors_of, self.controller_id or "",
                                              TRAIN_WORKER)
        except Exception:  # noqa: BLE001 - looked at again next time
            log.debug("%s: reading its workers failed", self.session_id, exc_info=True)
            return
        if claim != self._claims or not self._placing():
            return
        lost = self._unplaced.overdue(waiting, time.monotonic(), limit_s)
        for pg_id in sorted({pg for actor in lost if (pg := waiting[actor]) is not None}):
            log.warning("%s: Ray Train's workers %s waited %.0f s or more with no process "
                        "(their creation lost by the GCS, or the run's gang ending while "
                        "they start): removing their placement group %s, so that Train "
                        "gives up this start of its worker group", self.session_id,
                        sorted(lost), limit_s, pg_id)
            if limit_s:
                self.gave_up = (f"Ray Train's workers waited {limit_s:.0f} s with no process "
                                f"(the GCS lost their creation, as Ray does when it dies "
                                f"while scheduling them): raygang removed their placement "
                                f"group {pg_id}, so that Train did not wait for them for ever")
            await asyncio.to_thread(remove_group, pg_id)

    async def wait_released(self, timeout: float) -> None:
        await first_set((self.released, self.ended), timeout)

    async def close(self) -> None:
        """Leave no group behind: Train's own, if the run is cancelled or its controller
        is dead (during a preemption Train removes it itself; it gets TRAIN_TEARDOWN_S past
        its deadline first)."""
        if self._placing():
            # The session ends while Train starts its group: workers still waiting for
            # their creation now are not waited for (nothing would remove them if the GCS
            # lost it, and Train would wait for ever holding their placement group)
            await self._look(self._claims, 0.0)
        if self.pg_id is None:
            return
        if self.preempt_deadline_ms:
            left = self.preempt_deadline_ms / 1000 - time.time() + TRAIN_TEARDOWN_S
            if left > 0 and not await self._controller_dead():
                await self.wait_released(left)
        if self.pg_id is not None:  # in a thread: the GCS may be down (it waits for it)
            await asyncio.to_thread(self._remove_group, self.pg_id)
        self.pg_id = None

    def _remove_group(self, pg_id: str) -> None:
        if group_nodes(pg_id) is not None:
            log.warning("removing Ray Train's placement group %s of %s", pg_id,
                        self.session_id)
            remove_group(pg_id)
