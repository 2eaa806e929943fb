"""An elastic gang on Ray (`replicas=(min, max)`): its minimum is one placement group, as
any gang's (`launch.GangLaunch`), and each surplus member has a group of its own (Ray
cannot resize a placement group: ray-project/ray #16403), so members come and go one at a
time while the others run on, each resize told to every member (`resize: live`), or the
whole gang starts again at its new size (`resize: restart`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from ray.util.placement_group import PlacementGroup, placement_group

from raygang.control.ports import MemberFailure, ReservationTimeout
from raygang.control.status import GangError
from raygang.control.tasks import run_to_completion
from raygang.core.spec import MemberSlot
from raygang.runtime.kinds.gang.launch import GangLaunch
from raygang.runtime.kinds.gang.steps import (
    discard_group,
    kill_member,
    off_the_loop,
    names_free,
    ready_within,
    remove_group,
    role_sizes,
)
from raygang.runtime.member.context import World
from raygang.runtime.names import NODE_ID_LABEL, member_name
from raygang.runtime.placement import SETTLE_S, wait_ready

log = logging.getLogger(__name__)


class ElasticLaunch(GangLaunch):
    """A gang whose world changes while it runs: `present` is who is in it now."""

    # Resizes (elastic gangs, `resize: live`) ------------------------------------------
    async def add_members(self, members: Sequence[tuple[MemberSlot, str]]) -> list[str]:
        """Reserve each new member a placement group of its own on its node, start it,
        tell every member already there the new world and wait for their `on_resize`
        hooks (the barrier), then release the new members. Whatever fails on the way is
        undone (the gang runs on without them) and raised; what went wrong in the
        barrier (a hook raised, a member did not answer) is returned."""
        slots = [slot for slot, _ in members]
        await self.reserve_members(members)
        try:
            world = sorted([*self.present, *slots], key=lambda s: s.rank)
            await self._create_off_the_loop(slots, world)
            await self._all_or_first_error(
                [self._await_ready(slot) for slot in slots], self.spec.startup_timeout_s,
                f"members {', '.join(s.name for s in slots)} were not ready within "
                f"{self.spec.startup_timeout_s:g}s")
            async with self._world_lock:
                self.present = sorted([*self.present, *slots], key=lambda s: s.rank)
                worlds, problems = await self._tell_world(added=slots, removed=())
                peers = self._peers()
                for slot in slots:  # past the barrier: the new members start their bodies
                    self._watch(slot, *self.handles[slot.rank].__raygang_run__.remote(
                        peers, worlds[slot.rank]))
        except BaseException:
            self.present = [s for s in self.present if s not in slots]
            self._wake()  # run() may be waiting for them to be released
            await run_to_completion(self._drop(slots))
            raise
        return problems

    async def remove_members(self, members: Sequence[MemberSlot]) -> list[str]:
        """Stop these members (told before, as a preemption: `preempted`, `on_preempt`,
        the grace period), free their groups, then tell the members staying the new world
        and wait for their `on_resize` hooks; what went wrong there is returned."""
        slots = [s for s in members if s in self.present or self.handles[s.rank] is not None]
        async with self._world_lock:
            for slot in slots:
                self._forget(slot)
            self.present = [s for s in self.present if s not in slots]
            await run_to_completion(self._drop(slots))
            return (await self._tell_world(added=(), removed=slots))[1]

    async def reserve_members(self, members: Sequence[tuple[MemberSlot, str]]) -> None:
        """A placement group per member, pinned to its node; ready within the gang's
        reservation timeout (else ReservationTimeout, and the groups are removed)."""
        names = {slot.name for slot, _ in members}
        timeout = self.spec.reservation_timeout_s
        made: dict[str, PlacementGroup] = {}

        def create() -> None:  # in a GCS-call thread (steps.off_the_loop)
            for slot, node in members:
                made[slot.name] = placement_group(
                    [self.spec.bundles[slot.rank].to_dict()], strategy="PACK",
                    name=member_name(self.gang_id, slot), lifetime="detached",
                    bundle_label_selector=[{NODE_ID_LABEL: node}])

        def undo() -> None:
            for name, pg in made.items():
                discard_group(pg, name)

        try:
            try:
                await off_the_loop(create, undo, timeout)
            except TimeoutError as error:
                raise ReservationTimeout(f"placement groups of members {', '.join(names)} "
                                         f"were not created: {error}") from None
            self.member_pgs.update(made)
            self._unsettled |= names  # until ready, or a whole timeout: see close()
            ready = await ready_within([self.member_pgs[n] for n in names],
                                        self.spec.reservation_timeout_s)
            self._unsettled -= names
            if not ready:
                raise ReservationTimeout(
                    f"placement groups of members {', '.join(s.name for s, _ in members)} "
                    f"were not ready within {self.spec.reservation_timeout_s:g}s")
        except BaseException:
            await run_to_completion(self._drop([slot for slot, _ in members]))
            raise

    async def restart(self, world: Sequence[MemberSlot],
                      stopped: Callable[[], None] | None = None) -> None:
        """`resize: restart`: stop every member (their grace period is over), free the
        groups of those not in `world`, then start `world` afresh at the next generation
        in the groups kept (role after role, all ready before any is released: the launch
        barrier, as at the gang's first start) and release them together. A member
        failing to start fails the gang's run too (its members are gone)."""
        async with self._world_lock:
            self._stopping_whole = True
            try:
                stopping = [s for s in self.spec.slots if self.handles[s.rank] is not None]
                for slot in stopping:
                    self._forget(slot)
                await run_to_completion(self._drop(
                    [s for s in self.spec.surplus_slots if s not in world]))
                if stopped is not None:  # their groups (and members in them) are gone
                    stopped()
                for slot in stopping:
                    handle, self.handles[slot.rank] = self.handles[slot.rank], None
                    kill_member(handle, member_name(self.gang_id, slot))
                await names_free([member_name(self.gang_id, s) for s in stopping])
                self.generation += 1
                self.present = sorted(world, key=lambda s: s.rank)
                await self.start_members()
                peers = self._peers()
                for slot in self.present:
                    self._watch(slot, *self.handles[slot.rank].__raygang_run__.remote(peers))
            except BaseException as error:
                self._broken = error if isinstance(error, MemberFailure) else MemberFailure(
                    GangError(error_type=type(error).__name__,
                              message=f"restart at {len(world)} members: {error}"))
                raise
            finally:
                self._stopping_whole = False
                self._wake()

    def _forget(self, slot: MemberSlot) -> None:
        """Stop following `slot`'s run: its end is not the gang's (removed on purpose)."""
        watch = self._watching.pop(slot.rank, None)
        if watch is not None:
            watch.cancel()
        self._markers.pop(slot.rank, None)
        self._results.pop(slot.rank, None)

    async def _drop(self, slots: Sequence[MemberSlot]) -> None:
        """Kill these members and remove their own groups (one still being prepared may
        settle first: see close())."""
        for slot in slots:
            handle, self.handles[slot.rank] = self.handles[slot.rank], None
            kill_member(handle, member_name(self.gang_id, slot))
            pg = self.member_pgs.pop(slot.name, None)
            if pg is not None and slot.name in self._unsettled:
                await wait_ready(pg, SETTLE_S)
                self._unsettled.discard(slot.name)
            remove_group(pg, member_name(self.gang_id, slot))

    async def _tell_world(self, added: Sequence[MemberSlot], removed: Sequence[MemberSlot]
                          ) -> tuple[dict[int, World], list[str]]:
        """The next generation's world, as each present member sees it (by gang rank);
        told to every released member that stays, whose replies are awaited (the barrier,
        up to the startup timeout). A hook that raised, or a member that did not answer,
        is returned (the gang's events say so) and the gang runs on (a member that died
        fails it through its run)."""
        self.generation += 1
        names = tuple(s.name for s in self.present)
        peers = self._peers()
        sizes = role_sizes(self.spec, self.present)
        worlds = {slot.rank: World(
            generation=self.generation, size=len(self.present), rank=i, members=names,
            peers=peers, role_sizes=sizes, added=tuple(s.name for s in added),
            removed=tuple(s.name for s in removed)) for i, slot in enumerate(self.present)}
        told = [s for s in self.present if s.rank in self._markers and s not in added]
        calls = [asyncio.ensure_future(self._await(
            s, self.handles[s.rank].__raygang_resize__.remote(worlds[s.rank]))) for s in told]
        problems = []
        if calls:
            done, pending = await asyncio.wait(calls, timeout=self.spec.startup_timeout_s)
            for slot, call in zip(told, calls):
                if call in pending:
                    call.cancel()
                    problems.append(f"{slot.name} did not answer the resize to "
                                    f"{len(self.present)} members within "
                                    f"{self.spec.startup_timeout_s:g}s")
                elif call.exception() is not None or call.result().get("error"):
                    problems.append(f"the resize hooks of {slot.name} failed: "
                                    f"{call.exception() or call.result()['error']}")
        for problem in problems:
            log.warning("%s: %s", self.gang_id, problem)
        return worlds, problems
