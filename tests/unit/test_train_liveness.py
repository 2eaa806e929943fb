"""A Train run's session asks the GCS whether its controller is dead without ever holding
the scheduler's event loop (`runtime.handoff.train.TrainSession`): the read runs in a
thread; a GCS that does not answer decides nothing, and never has two reads in flight.
The GCS read itself is replaced here by one that blocks as Ray's does in an outage (the
real outage: tests/integration/test_gcs_outage.py)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from raygang.control.ports import MemberFailure
from raygang.core.resources import Resources
from raygang.runtime.handoff import train
from raygang.runtime.handoff.budget import Budget


def session() -> train.TrainSession:
    budget = Budget("g", [Resources(GPU=1)], ["n1"], timeout_s=60)
    return train.TrainSession("s", [Resources(GPU=1)], budget, lease_s=60,
                              controller_id="ab" * 16)


def test_an_unanswered_read_decides_nothing_and_is_not_made_twice(monkeypatch):
    answer, reads = threading.Event(), []

    def gcs_down(requesters):  # as Ray's read does while the GCS is down
        reads.append(requesters)
        answer.wait(10)
        return set(requesters)  # the GCS is back: the controller died meanwhile

    monkeypatch.setattr(train, "dead_requesters", gcs_down)
    monkeypatch.setattr(train, "LIVENESS_S", 0.2)

    async def run():
        run_session = session()
        started = time.monotonic()
        for _ in range(3):  # the watch's rounds while the GCS is down
            await run_session.check_controller()
        assert time.monotonic() - started < 2.0  # 3 x 0.2 s, not the read's 10 s
        assert len(reads) == 1  # the first read is still in flight: no second one
        answer.set()
        with pytest.raises(MemberFailure, match="controller died"):
            for _ in range(20):
                await run_session.check_controller()
        assert len(reads) == 1

    asyncio.run(run())


def test_a_failed_read_decides_nothing(monkeypatch):
    def gcs_error(requesters):
        raise ConnectionError("GCS unreachable")

    monkeypatch.setattr(train, "dead_requesters", gcs_error)

    async def run():
        run_session = session()
        await run_session.check_controller()  # no MemberFailure: nothing decided
        monkeypatch.setattr(train, "dead_requesters", lambda requesters: set())
        await run_session.check_controller()

    asyncio.run(run())


def test_a_controller_that_dies_between_its_claim_and_its_group_fails_the_start(monkeypatch):
    """The claim of a requester that died since (a Tune driver killed while its claim call
    went on in the scheduler) is not waited out for the whole lease: the controller is
    watched until the group is placed. (A clean-clone run held such a trial STARTING for
    over 75 s of its 120 s lease.)"""
    dead: set[str] = set()
    monkeypatch.setattr(train, "dead_requesters", lambda requesters: requesters & dead)
    monkeypatch.setattr(train, "WATCH_INTERVAL_S", 0.05)

    async def run():
        run_session = session()
        starting = asyncio.ensure_future(run_session.handed_over(claim_timeout=60))
        assert await run_session.claim() == ["n1"]
        await asyncio.sleep(0.2)
        assert not starting.done()  # a live controller has its lease to place the group
        dead.add(run_session.controller_id)
        began = time.monotonic()
        with pytest.raises(MemberFailure, match="controller died"):
            await asyncio.wait_for(starting, 5)
        assert time.monotonic() - began < 1.0

    asyncio.run(run())


def test_two_callers_may_wait_on_one_read(monkeypatch):
    """A resize's hand-off and the run's watch both check the controller: they share the
    read in flight, and neither fails when the other took its answer first."""
    answer = threading.Event()

    def slow(requesters):
        answer.wait(10)
        return set()

    monkeypatch.setattr(train, "dead_requesters", slow)
    monkeypatch.setattr(train, "LIVENESS_S", 1.0)

    async def run():
        run_session = session()
        both = asyncio.gather(run_session.check_controller(), run_session.check_controller())
        await asyncio.sleep(0.1)
        answer.set()
        await both  # neither raises

    asyncio.run(run())
