"""A Ray Train V2 run queued on its own, as a hand-off gang: its run (the `GangRun` port).

Its bundles are held as a budget (`handoff.budget.Budget`) and handed to Train's worker group
through one `TrainSession` (`handoff.train`: the exchange with the run's callback, which a
raygang job's Train runs share with it). An elastic run restarts at its new size through
Train's preemption path (`TrainLaunch.restart`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from raygang.control.ports import MemberFailure, ReservationTimeout
from raygang.control.status import GangError
from raygang.core.spec import GangSpec, MemberSlot
from raygang.runtime.handoff.budget import Budget
from raygang.runtime.handoff.train import TRAIN_TEARDOWN_S, TrainSession
from raygang.runtime.kinds.kind import NoLiveResize


class TrainLaunch(NoLiveResize):  # Train restarts its worker group to resize
    """The run of a Train gang queued on its own (the `GangRun` port)."""

    def __init__(self, gang_id: str, spec: GangSpec, nodes: Sequence[str], lease_s: float,
                 controller_id: str | None, sessions: dict[str, TrainSession]):
        self.gang_id = gang_id
        self.spec = spec
        # Admitted at its minimum (all of it for a fixed-size run); an elastic run's
        # surplus joins the budget as it grows (`reserve_members`), one bundle each.
        self.budget = Budget(gang_id, spec.min_bundles, nodes, spec.reservation_timeout_s)
        self.session = TrainSession(gang_id, spec.min_bundles, self.budget, lease_s,
                                    controller_id)
        self._sessions = sessions
        self._bundle = {slot.name: i for i, slot in enumerate(spec.min_slots)}  # budget index

    @classmethod
    def adopted(cls, gang_id: str, spec: GangSpec, nodes: Sequence[str], lease_s: float,
                controller_id: str | None, pg_id: str, placed: Sequence[str | None],
                sessions: dict[str, TrainSession],
                surplus: Mapping[str, str] | None = None) -> TrainLaunch:
        """A run a previous scheduler process handed over: its group `pg_id` is still
        there, its bundles on `placed`. `surplus`: an elastic run's workers beyond its
        minimum (name -> node)."""
        launch = cls(gang_id, spec, nodes, lease_s, controller_id, sessions)
        budget, surplus = launch.budget, dict(surplus or {})
        added = budget.add([spec.bundles[spec.slots_by_name[n].rank] for n in surplus],
                           list(surplus.values()))
        launch._bundle.update(zip(surplus, added))
        budget.claimed.update(range(len(budget.bundles)))
        launch.session.wanted = budget.bundles
        launch.session.nodes = list(budget.nodes)
        launch.session.claimed.set()
        launch.session.adopt(pg_id, placed)
        sessions[gang_id] = launch.session
        return launch

    def lost_members(self) -> list[str]:
        """Train starts its workers itself: none to tell."""
        return []

    async def reserve(self) -> None:
        await self.budget.hold()

    async def start_members(self) -> None:
        self._sessions[self.gang_id] = self.session
        await self.session.handed_over(self.spec.startup_timeout_s)

    async def run(self) -> list[Any]:
        await self.session.watch()
        return []

    async def resume(self) -> list[Any]:
        return await self.run()

    async def signal_preempt(self, grace_s: float,
                             members: Sequence[Any] | None = None) -> list[dict]:
        self.session.preempt(grace_s)
        return [{"member": "train", "rank": 0, "hooks": 0, "error": None, "running": True}]

    async def wait_bodies(self, ranks: Sequence[int], timeout: float) -> None:
        # Train keeps its workers until the deadline (they checkpoint meanwhile) and then
        # shuts the group down itself: that is when the capacity is free.
        await self.session.wait_released(timeout + TRAIN_TEARDOWN_S)

    # `resize: restart` (an elastic run: Ray Train restarts its worker group) -------------
    async def reserve_members(self, members: Sequence[tuple[MemberSlot, str]]) -> None:
        indices = await self.budget.extend(
            [self.spec.bundles[slot.rank] for slot, _ in members], [n for _, n in members])
        self._bundle.update({slot.name: i for (slot, _), i in zip(members, indices)})

    async def restart(self, world: Sequence[MemberSlot],
                      stopped: Callable[[], None] | None = None) -> None:
        """Once Train shut its group down (told through its preemption path: the grace
        period, a checkpoint), its next group claims `world`'s bundles: what the others
        held is freed. Train's scaling policy (`RaygangScalingPolicy`) asks for that group
        and sizes it to what it claims."""
        session = self.session
        try:
            if not session.released.is_set():
                if not session.asked_to_stop:  # no grace period was given: nothing told
                    session.preempt(0)
                await session.wait_released(TRAIN_TEARDOWN_S)
                if not session.released.is_set():
                    raise ReservationTimeout(
                        f"Ray Train did not stop its worker group within "
                        f"{TRAIN_TEARDOWN_S:g}s of being told to")
            names = {slot.name for slot in world}
            leaving = [n for n in self._bundle if n not in names]
            self.budget.drop([self._bundle.pop(n) for n in leaving])
            if stopped is not None:  # Train's group is gone, and these holds with it
                stopped()
            kept = sorted(self._bundle.values())
            self.budget.give_back(kept)  # held again until Train's next group claims them
            session.next_group([self.budget.bundles[i] for i in kept])
            await session.handed_over(self.spec.startup_timeout_s)
        except BaseException as error:
            session.broken = MemberFailure(GangError(
                error_type=type(error).__name__,
                message=f"restart at {len(world)} workers: {error}"))
            raise

    async def close(self) -> None:
        self.session.end_watch()
        try:
            await self.session.close()
        finally:
            await self.budget.close()
            if self._sessions.get(self.gang_id) is self.session:
                del self._sessions[self.gang_id]


