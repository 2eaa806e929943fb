"""A Train run's workers whose creation the GCS lost have their placement group removed,
so that Train gives up that start of its worker group
(`runtime.handoff.train.TrainSession.watch_workers`): Ray 2.60 loses an actor's creation
when its GCS dies while scheduling it, and Train waits for its workers with no timeout.
The GCS's actor table and the removal are replaced here by stand-ins; the real outage:
`python -m tests.integration.train_gcs_outage` (by hand)."""

from __future__ import annotations

import asyncio

from raygang.core.resources import Resources
from raygang.runtime.handoff import train
from raygang.runtime.handoff.budget import Budget
from raygang.runtime.ray_private import JOB_REQUESTER


def test_an_actor_is_overdue_only_once_every_look_for_the_limit_saw_it_waiting():
    unplaced, limit = train.Unplaced(), 30.0
    assert unplaced.overdue({"a", "b"}, now=0.0, limit_s=limit) == []
    assert unplaced.overdue({"a", "b"}, now=20.0, limit_s=limit) == []
    assert unplaced.overdue({"a"}, now=25.0, limit_s=limit) == []  # b started: forgotten
    assert unplaced.overdue({"a", "b"}, now=29.0, limit_s=limit) == []  # b waits again: anew
    assert unplaced.overdue({"a", "b"}, now=30.0, limit_s=limit) == ["a"]
    assert unplaced.overdue({"b"}, now=58.0, limit_s=limit) == []
    assert unplaced.overdue({"b"}, now=59.0, limit_s=limit) == ["b"]
    assert unplaced.since == {}


class Gcs:
    """The actor table's waiting workers per controller (with their placement groups),
    and the groups removed (their workers then are gone too)."""

    def __init__(self, waiting: dict[str, dict[str, str | None]]):
        self.waiting = waiting
        self.reads: list[str] = []
        self.removed: list[str] = []

    def unplaced_actors_of(self, owner: str, class_name: str) -> dict[str, str | None]:
        assert class_name == "RayTrainWorker"
        self.reads.append(owner)
        return {a: pg for a, pg in self.waiting.get(owner, {}).items()
                if pg not in self.removed}

    def remove_group(self, pg_id: str) -> None:
        self.removed.append(pg_id)


def looks(session: train.TrainSession, times: int) -> None:
    async def run():
        for _ in range(times):
            session.watch_workers()
            if session._looking is not None:
                await session._looking
    asyncio.run(run())


def test_a_claimed_groups_lost_workers_lose_their_group_and_nobody_else(monkeypatch):
    gcs = Gcs({"c1": {"w1": "pg1", "w2": "pg1", "w5": None}, "c2": {"w3": "pg2"},
               f"{JOB_REQUESTER}j": {"w4": "pg4"}})
    monkeypatch.setattr(train, "unplaced_actors_of", gcs.unplaced_actors_of)
    monkeypatch.setattr(train, "remove_group", gcs.remove_group)
    monkeypatch.setattr(train, "LOST_WORKERS_S", 0.0)  # overdue at the first look

    def session(controller: str, claimed: bool, adopted: bool) -> train.TrainSession:
        budget = Budget("g", [Resources(GPU=1)] * 2, ["n1", "n1"], timeout_s=60)
        made = train.TrainSession("job/1", [Resources(GPU=1)] * 2, budget, lease_s=60,
                                  controller_id=controller)
        if claimed:
            made.claimed.set()
        if adopted:
            made.adopted.set()
        return made

    looks(session("c2", claimed=False, adopted=False), 2)  # its group not asked for yet
    looks(session("c2", claimed=True, adopted=True), 2)  # placed and started
    looks(session(f"{JOB_REQUESTER}j", claimed=True, adopted=False), 2)  # a Tune driver
    assert gcs.reads == [] and gcs.removed == []
    looks(session("c1", claimed=True, adopted=False), 2)
    assert gcs.removed == ["pg1"]  # once, for both its workers (w5 has no group)
    assert gcs.reads == ["c1", "c1"]

