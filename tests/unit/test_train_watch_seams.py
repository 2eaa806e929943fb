"""The seams of the window in which raygang watches a Train run's workers for a lost
creation (`TrainSession.watch_workers`: from the claim of a group to its placing): a
placing, a new claim (a resize), a preemption, a cancel or the run's end at each point of
it — before a look, while a look reads the GCS, and once workers are overdue. The GCS's
actor table and the removal are stand-ins (a read can be held mid-way); the real outage:
tests/integration/test_train_gcs_outage.py."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest

from raygang.control.ports import MemberFailure
from raygang.core.resources import Resources
from raygang.runtime.handoff import train
from raygang.runtime.handoff.budget import Budget

CONTROLLER = "c1"


class Gcs:
    """Train's workers waiting with no process (worker -> its group), a read that can be
    held mid-way (`hold()`: the next read waits until `let_go()`), and the removals."""

    def __init__(self, waiting: dict[str, str | None]):
        self.waiting = dict(waiting)
        self.removed: list[str] = []
        self.reads = 0
        self.reading = threading.Event()  # a held read has begun
        self._gate = threading.Event()  # set: reads answer at once
        self._gate.set()

    def hold(self) -> None:
        self._gate = threading.Event()
        self.reading.clear()

    def let_go(self) -> None:
        self._gate.set()

    def unplaced_actors_of(self, owner: str, class_name: str) -> dict[str, str | None]:
        assert (owner, class_name) == (CONTROLLER, train.TRAIN_WORKER)
        self.reads += 1
        seen = {a: pg for a, pg in self.waiting.items() if pg not in self.removed}
        if not self._gate.is_set():  # the GCS answers what it had when asked, later
            self.reading.set()
            assert self._gate.wait(10)
        return seen

    def remove_group(self, pg_id: str) -> None:
        self.removed.append(pg_id)


@pytest.fixture
def gcs(monkeypatch) -> Gcs:
    found = Gcs({"w1": "pg1", "w2": "pg1"})
    monkeypatch.setattr(train, "unplaced_actors_of", found.unplaced_actors_of)
    monkeypatch.setattr(train, "remove_group", found.remove_group)
    monkeypatch.setattr(train, "LOST_WORKERS_S", 30.0)
    return found


class Clock:
    """The session's clock (the event loop keeps the real one)."""

    def __init__(self, monkeypatch):
        self.now = 1000.0
        monkeypatch.setattr(train, "time", SimpleNamespace(monotonic=lambda: self.now,
                                                           time=time.time))


async def claimed_session() -> train.TrainSession:
    """A run queued on its own whose group is claimed (Train places it next)."""
    budget = Budget("g", [Resources(GPU=1)] * 2, ["n1", "n2"], timeout_s=60)
    session = train.TrainSession("g", [Resources(GPU=1)] * 2, budget, lease_s=60,
                                 controller_id=CONTROLLER)
    session.claimable.set()
    assert await session.claim() == ["n1", "n2"]
    return session


async def look(session: train.TrainSession) -> None:
    session.watch_workers()
    if session._looking is not None:
        await session._looking


async def held_look(session: train.TrainSession, gcs: Gcs) -> asyncio.Future:
    """A look whose read of the GCS is under way (held until `gcs.let_go()`)."""
    gcs.hold()
    session.watch_workers()
    assert await asyncio.to_thread(gcs.reading.wait, 10)
    assert session._looking is not None and not session._looking.done()
    return session._looking


async def ended_in_hand_off(session: train.TrainSession, error: str) -> MemberFailure:
    """Train ends the run (`error`) while raygang waits for its group: how the hand-off
    fails."""
    waiting = asyncio.ensure_future(session.handed_over(claim_timeout=60))
    await asyncio.sleep(0.05)
    session.finish(error)
    with pytest.raises(MemberFailure) as failed:
        await asyncio.wait_for(waiting, 5)
    return failed.value


def test_workers_are_removed_only_once_waited_for_the_limit(gcs, monkeypatch):
    clock = Clock(monkeypatch)

    async def scenario():
        session = await claimed_session()
        await look(session)  # first seen
        clock.now += 29
        await look(session)
        assert gcs.removed == []
        clock.now += 1
        await look(session)
        assert gcs.removed == ["pg1"]  # once for both workers
        # Train's start then fails (its workers unschedulable), and it gives the run up:
        # the gang fails at once, saying what raygang did and why
        failed = await ended_in_hand_off(session, "ControllerError: the actor is not schedulable")
        assert failed.final
        message = failed.error.message
        assert "the GCS lost their creation" in message and "pg1" in message, message
        assert message.endswith("Train: ControllerError: the actor is not schedulable")
    asyncio.run(scenario())


def test_a_look_under_way_when_the_group_is_placed_removes_nothing(gcs, monkeypatch):
    clock = Clock(monkeypatch)

    async def scenario():
        session = await claimed_session()
        await look(session)
        clock.now += 60  # overdue by the time the held read answers
        looking = await held_look(session, gcs)
        session.adopt("pg1", ["n1", "n2"])  # Train placed it meanwhile
        gcs.let_go()
        await looking
        assert gcs.removed == []
        await look(session)  # placed: no more looks
        assert gcs.reads == 2
    asyncio.run(scenario())


def test_a_look_under_way_across_a_new_claim_removes_nothing(gcs, monkeypatch):
    """A resize: the group is given up (released), the next one claimed, while a look
    begun for the first is reading; the next group's workers are timed anew."""
    clock = Clock(monkeypatch)

    async def scenario():
        session = await claimed_session()
        await look(session)
        clock.now += 60
        looking = await held_look(session, gcs)
        session.release()
        session.next_group([Resources(GPU=1)])
        session.budget.claimed.clear()  # given back (with no Ray: no hold made again)
        assert await session.claim() == ["n1"]
        gcs.let_go()
        await looking
        assert gcs.removed == []
        gcs.waiting = {"w3": "pg3"}
        await look(session)  # w3 first seen now
        clock.now += 29
        await look(session)
        assert gcs.removed == []
        clock.now += 1
        await look(session)
        assert gcs.removed == ["pg3"]
    asyncio.run(scenario())


def test_a_preempted_run_whose_workers_wait_still_has_their_group_removed(gcs, monkeypatch):
    """A preemption cannot reach a Train stuck starting its workers (its watcher starts
    once the group is placed): the watch goes on, and its removal ends that start."""
    clock = Clock(monkeypatch)

    async def scenario():
        session = await claimed_session()
        await look(session)
        session.preempt(grace_s=30)
        clock.now += 30
        await look(session)
        assert gcs.removed == ["pg1"]
    asyncio.run(scenario())


@pytest.mark.parametrize("point", ["before any look", "workers seen", "a look under way"])
def test_a_session_ended_in_the_window_removes_waiting_workers_at_once(gcs, monkeypatch,
                                                                       point):
    """A cancel, or a preemption whose grace ran out, closes the session while Train
    starts its group: its waiting workers are not waited for (nobody would remove them
    afterwards, and a Train whose workers' creation was lost waits for ever)."""
    Clock(monkeypatch)

    async def scenario():
        session = await claimed_session()
        looking = None
        if point != "before any look":
            await look(session)
        if point == "a look under way":
            looking = await held_look(session, gcs)
            threading.Timer(0.2, gcs.let_go).start()
        session.end_watch()
        await session.close()
        assert gcs.removed[:1] == ["pg1"]
        if looking is not None:
            await looking
        assert set(gcs.removed) == {"pg1"}
        assert session.gave_up is None  # the gang ended: no lost creation to tell of
    asyncio.run(scenario())


def test_a_session_ended_once_its_group_is_placed_looks_for_no_workers(gcs, monkeypatch):
    async def scenario():
        session = await claimed_session()
        session.adopt("pg1", ["n1", "n2"])
        session.pg_id = None  # Train released it already: nothing of the group is left
        await session.close()
        assert gcs.reads == 0 and gcs.removed == []
    asyncio.run(scenario())


def test_a_gcs_that_does_not_answer_removes_nothing_in_looks_or_at_the_close(monkeypatch):
    def down(owner: str, class_name: str) -> dict[str, str | None]:
        raise ConnectionError("GCS unreachable")

    removed: list[str] = []
    monkeypatch.setattr(train, "unplaced_actors_of", down)
    monkeypatch.setattr(train, "remove_group", removed.append)
    monkeypatch.setattr(train, "LOST_WORKERS_S", 0.0)  # overdue at the first look

    async def scenario():
        session = await claimed_session()
        for _ in range(3):
            await look(session)
        await session.close()
    asyncio.run(scenario())
    assert removed == []


def test_a_run_that_ends_while_its_group_is_placed_fails_the_hand_off_at_once(gcs):
    """Train gave up the run while raygang waited for its group (its start failed for
    good): the gang fails with Train's error at once, not when the lease runs out."""
    async def scenario():
        session = await claimed_session()
        failed = await ended_in_hand_off(session, "ControllerError: worker group start failed")
        assert failed.final
        assert failed.error.message == "ControllerError: worker group start failed"
    asyncio.run(scenario())
