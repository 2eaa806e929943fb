"""The scheduler's side of `RaygangTrain`'s calls: one Train run's hand-off, by session.

A session is a Train run's worker groups inside raygang capacity. Its id is the gang id of
a run queued on its own (kind "train"), or "<job id>/<run>" for a run a raygang job's
driver started (placed inside the job's budget). Every call is short, or a long poll
bounded by the caller's `timeout`.
"""

from __future__ import annotations

import asyncio
import time

from raygang.control import kinds
from raygang.control.errors import GangNotFoundError
from raygang.control.plane import ControlPlane
from raygang.control.status import MemberStatus
from raygang.core.gang import GangState
from raygang.core.spec import GangSpec
from raygang.runtime.handoff.budget import HandoffFailed
from raygang.runtime.handoff.train import TrainSession, requester_name
from raygang.runtime.ray_private import dead_requesters, group_nodes
from raygang.runtime.scheduler.cluster import RayCluster

POLL_S = 0.2
FINISH_WAIT_S = 10.0  # the most a finished run's call waits for its gang's teardown
SWEEP_S = 5.0  # how often queued runs are checked for a dead controller


class TrainDesk:
    def __init__(self, plane: ControlPlane, cluster: RayCluster):
        self._plane = plane
        self._cluster = cluster
        self._names: dict[str, int] = {}  # job id -> Train runs it opened
        self._sweeper: asyncio.Task | None = None

    def _sweep_soon(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def _sweep(self) -> None:
        """A run waiting in the queue whose requester died (a Train controller, its driver
        stopped; a Tune sweep's driver) will never claim: cancel it rather than admit it (an
        admitted one fails by itself). One look at the GCS per sweep, off the loop."""
        while True:
            await asyncio.sleep(SWEEP_S)
            waiting = {record.gang_id: requester for record in self._plane.registry.unfinished()
                       if record.state is GangState.PENDING
                       and (requester := kinds.of(record.kind).requester(record.workload))}
            if not waiting:
                continue
            try:
                dead = await asyncio.to_thread(dead_requesters, set(waiting.values()))
            except Exception:  # noqa: BLE001 - the GCS did not answer: no decision
                continue
            for gang_id, requester in waiting.items():
                if requester in dead:
                    await self._plane.cancel(
                        gang_id, f"{requester_name(requester)} died while it waited")

    async def open(self, spec: GangSpec, parent: str | None, controller: str | None,
                   key: str, kind: str = "train") -> str:
        """Queue the run (or, inside job `parent`, open a session in its budget); `kind`:
        "train", or "tune" for a Tune trial's group."""
        self._sweep_soon()
        if parent is None:
            return await self._plane.submit_train(spec, controller, idempotency_key=key,
                                                  kind=kind)
        launch = self._cluster.launches.get(parent)
        if launch is None:
            raise GangNotFoundError(
                f"job {parent} (RAYGANG_JOB_ID) is not running in raygang; unset "
                "RAYGANG_JOB_ID to queue the Train run on its own")
        self._names[parent] = self._names.get(parent, 0) + 1
        name = f"{spec.name}-{self._names[parent]}"
        return launch.open_session(name, spec.bundles, controller).session_id

    async def claim(self, session_id: str, timeout: float) -> list[str] | None:
        """The nodes for the run's next worker group, once raygang reserved them (None
        after `timeout`: ask again). Raises if the run's gang ended."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            session = self._cluster.sessions.get(session_id)
            if session is not None and session.claimable.is_set():
                try:
                    return await asyncio.wait_for(session.claim(), deadline - loop.time())
                except asyncio.TimeoutError:
                    return None
                except HandoffFailed:
                    await asyncio.sleep(POLL_S)
                    continue  # the gang requeues; the next admission opens a new session
            self._check_alive(session_id)
            await asyncio.sleep(POLL_S)
        return None

    def _check_alive(self, session_id: str) -> None:
        gang_id = session_id.split("/", 1)[0]
        record = self._plane.record(gang_id)
        if record.state.finished:
            raise RuntimeError(f"{record.display} {record.state.value.lower()}"
                               + (f": {record.reason}" if record.reason else ""))
        if "/" in session_id and record.state is not GangState.RUNNING:
            raise RuntimeError(f"job {gang_id} is not running ({record.state.value})")

    async def adopt(self, session_id: str, pg_id: str) -> list[str]:
        self._session(session_id)  # no read for a hand-off that is not under way
        # Where Train's group is: a GCS read, off the loop (issue 32: the GCS may be down).
        where = await asyncio.to_thread(group_nodes, pg_id)
        placed = self._session(session_id).adopt(pg_id, where)
        if "/" not in session_id:  # a run queued on its own: its record books the group
            record = self._plane.record(session_id)
            record.workload = {**(record.workload or {}), "group": pg_id}
            self._plane.changed(record)  # journaled: a restarted scheduler adopts the
            # group Train has now
            if len(placed) == len(record.nodes):
                record.nodes = tuple(placed)  # the book follows where Train placed them
            record.members = [MemberStatus(role="worker", index=i, rank=i,
                                           actor_name=f"Ray Train worker {i}", node_id=node,
                                           ready_at=time.time())
                              for i, node in enumerate(placed)]
        return placed

    def released(self, session_id: str, final: bool) -> None:
        session = self._cluster.sessions.get(session_id)
        if session is not None:
            session.release(final)

    async def finished(self, session_id: str, error: str | None) -> None:
        """The run ended (`error`: why, if it failed). A run queued on its own answers once
        its gang has ended too (up to FINISH_WAIT_S): its watch sees the end at once, and
        the gang's teardown follows; so `fit`, and a Tune trial's free, return with the
        gang already final, as a user listing gangs right after them expects."""
        session = self._cluster.sessions.get(session_id)
        if session is not None:
            session.finish(error)
            if "/" not in session_id:  # a gang of its own (a job's run: the job goes on)
                await self._plane.wait(session_id, timeout=FINISH_WAIT_S)
            return
        if "/" not in session_id:  # not admitted now (waiting in the queue): it ends there
            record = self._plane.record(session_id)
            if not record.state.finished:
                await self._plane.cancel(session_id, error or "the Train run ended")

    async def wait_preempt(self, session_id: str, timeout: float) -> dict | None:
        session = self._cluster.sessions.get(session_id)
        if session is None:
            return {"ended": True}
        return await session.wait_preempt(timeout)

    def _session(self, session_id: str) -> TrainSession:
        session = self._cluster.sessions.get(session_id)
        if session is None:
            raise GangNotFoundError(f"no Train hand-off {session_id} under way")
        return session
