"""Everything Ray does for one admitted gang: reserve, start, barrier, run, tear down
(resizes: `elastic.py`; the single steps on Ray: `steps.py`).

`GangLaunch` is the Ray implementation of the control plane's `GangRun` port: it only
acts and reports (it raises `ReservationTimeout` or `MemberFailure`), and the gang's
driver decides what that means (requeue, restart, fail). `teardown()` is idempotent and
safe at any point, including after a cancellation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from raygang.control.ports import MemberFailure, ReservationTimeout
from raygang.control.program import RoleProgram
from raygang.control.status import GangError, MemberStatus
from raygang.control.tasks import run_to_completion
from raygang.core.spec import GangSpec, MemberSlot
from raygang.runtime.kinds.gang.steps import (
    describe_failure, discard_group, kill_member, off_the_loop, preempt_entry, ready_within,
    remove_group, role_sizes, settled,
)
from raygang.runtime.kinds.kind import NoLiveResize, NoRestartResize
from raygang.runtime.member.actor import DONE, constructor_args, member_actor_class
from raygang.runtime.member.context import GangContext, dense_role_ranks
from raygang.runtime.names import NAMESPACE, NODE_ID_LABEL, member_name, pg_name
from raygang.runtime.placement import SETTLE_S, actor_resource_options, wait_ready
from raygang.runtime.ray_private import actor_unplaced, placement_group as ray_placement_group



class GangLaunch(NoLiveResize, NoRestartResize):  # fixed size: ElasticLaunch resizes
    """One gang on Ray: a placement group for its minimum (all of a rigid gang), a member
    actor in each bundle. An elastic gang's members beyond its minimum come and go in
    groups of their own (`elastic.ElasticLaunch`, which also finds them again
    after a restart: `member_pgs`); `present` is who is in the gang's world now."""

    def __init__(
        self,
        gang_id: str,
        spec: GangSpec,
        programs: dict[str, RoleProgram],
        nodes: Sequence[str],
        attempt: int,
        on_member_ready: Callable[[MemberStatus], None] = lambda m: None,
        pins: Sequence[Mapping[str, str]] = (),
    ):
        self.gang_id = gang_id
        self.spec = spec
        self.programs = programs
        self.nodes = tuple(nodes)
        # Per bundle, labels its node must carry beyond its id (a topology's domains).
        self.pins = tuple(pins) or ({},) * len(self.nodes)
        self.attempt = attempt
        self.on_member_ready = on_member_ready
        self.pg: PlacementGroup | None = None  # the minimum's (a rigid gang: all of it)
        self.member_pgs: dict[str, PlacementGroup] = {}  # surplus member -> its own group
        self._unsettled: set[str] = set()  # surplus members whose group is being prepared
        # The placement group is not being prepared: it was reported ready, or it waited a
        # whole reservation timeout (so it is pending for lack of room, not mid-prepare).
        self._at_rest = False
        self.handles: list[Any] = [None] * spec.world_size  # by gang rank (slot.rank)
        # The members in the gang's world, in rank order: the minimum at first (a rigid
        # gang's minimum is all of it); a resize changes it and tells every member.
        self.present: list[MemberSlot] = list(spec.min_slots)
        self.generation = 0  # resizes so far
        self._bundle_index = {slot.rank: i for i, slot in enumerate(spec.min_slots)}
        self._markers: dict[int, Any] = {}  # by gang rank, once released: its run's marker
        self._results: dict[int, Any] = {}  # by gang rank: its run's result ref
        self._watching: dict[int, asyncio.Task] = {}  # by gang rank: until its run ends
        self._changed: asyncio.Future | None = None  # wakes run() when members change
        self._world_lock = asyncio.Lock()  # one resize at a time tells the members
        # Told to stop whole (a halt or a restart follows), or restarting: the bodies
        # ending now are not the gang's outcome (a body watching `preempted` returns when
        # told; a restart's new generation, or the halt, ends the run).
        self._stopping_whole = False
        self._broken: MemberFailure | None = None  # a restart failed: so does the run
        self._tasks: list[asyncio.Task] = []

    @classmethod
    def adopt(cls, gang_id: str, spec: GangSpec, nodes: Sequence[str], attempt: int,
              pg_id: str, surplus: dict[str, str] | None = None,
              programs: dict[str, RoleProgram] | None = None, on_member_ready: Callable[
                  [MemberStatus], None] = lambda m: None) -> GangLaunch | None:
        """The launch of a gang that a previous scheduler process started: its members
        (detached, named), its placement group `pg_id` (hex) and, for an elastic gang, the
        surplus members it had added (member name -> its own group's id); None if a
        member is gone. `programs`, `on_member_ready`: for the members it grows."""
        launch = cls(gang_id, spec, programs or {}, nodes, attempt, on_member_ready)
        surplus = surplus or {}
        launch.present = [s for s in spec.slots
                          if s.rank in launch._bundle_index or s.name in surplus]
        try:
            for slot in launch.present:
                launch.handles[slot.rank] = ray.get_actor(member_name(gang_id, slot),
                                                          namespace=NAMESPACE)
        except ValueError:
            return None
        launch.pg = ray_placement_group(pg_id)
        launch.member_pgs = {name: ray_placement_group(g) for name, g in surplus.items()}
        launch._at_rest = True
        return launch

    # 1. Reserve ------------------------------------------------------------------------
    async def reserve(self) -> None:
        """One placement group, each bundle pinned to the node the plan chose; created
        off the event loop (`steps.off_the_loop`: a GCS call)."""
        made: list[PlacementGroup] = []
        name, timeout = pg_name(self.gang_id), self.spec.reservation_timeout_s

        def create() -> None:
            made.append(placement_group(
                [b.to_dict() for b in self.spec.min_bundles],
                strategy=self.spec.strategy.value,
                name=name,
                lifetime="detached",  # the gang must outlive a restart of the scheduler
                bundle_label_selector=[{**pin, NODE_ID_LABEL: n}
                                       for n, pin in zip(self.nodes, self.pins, strict=True)],
            ))

        try:
            await off_the_loop(create, lambda: discard_group(made[0] if made else None, name),
                               timeout)
        except TimeoutError as error:
            raise ReservationTimeout(f"placement group {name} was not created: {error}") \
                from None
        self.pg = made[0]
        ready = await ready_within([self.pg], timeout)
        self._at_rest = True
        if not ready:
            raise ReservationTimeout(
                f"placement group {pg_name(self.gang_id)} was not ready within "
                f"{self.spec.reservation_timeout_s:g}s"
            )

    def _reserved(self) -> PlacementGroup:
        """The minimum's placement group (members start only once it is reserved)."""
        if self.pg is None:
            raise RuntimeError(f"gang {self.gang_id}: no placement group reserved")
        return self.pg

    # 2. Start, in `after` order --------------------------------------------------------
    async def start_members(self) -> None:
        """Start each role once the roles it waits for are ready; return when all are."""
        ready = {role.name: asyncio.Event() for role in self.spec.roles}

        async def start_role(role_name: str) -> None:
            role = self.spec.role(role_name)
            for dep in role.after:
                await ready[dep].wait()
            slots = [s for s in self.present if s.role == role_name]
            await self._create_off_the_loop(slots, self.present)
            await asyncio.gather(*(self._await_ready(slot) for slot in slots))
            ready[role_name].set()

        await self._all_or_first_error(
            [start_role(r.name) for r in self.spec.roles], self.spec.startup_timeout_s,
            f"members were not all ready within {self.spec.startup_timeout_s:g}s",
        )

    async def _create_off_the_loop(self, slots: Sequence[MemberSlot],
                                   world: Sequence[MemberSlot]) -> None:
        """Start `slots`' members, of `world`, in a GCS-call thread (a named actor is
        registered with a synchronous GCS call); those made are killed if the start is
        cancelled or times out meanwhile (`off_the_loop`)."""
        made: dict[int, Any] = {}
        classes = {s.rank: member_actor_class(self.programs[s.role]) for s in slots}

        def create() -> None:
            for slot in slots:
                made[slot.rank] = self._create(classes[slot.rank], slot, world)

        def undo() -> None:
            for rank, handle in made.items():
                kill_member(handle, f"rank {rank}")

        await off_the_loop(create, undo, self.spec.startup_timeout_s)
        for rank, handle in made.items():
            self.handles[rank] = handle

    def _create(self, actor_cls, slot: MemberSlot, world: Sequence[MemberSlot]):
        """Start `slot`'s member, in the minimum's group or in its own, as a member of
        `world` (the members it starts among, in rank order)."""
        program = self.programs[slot.role]
        names = tuple(s.name for s in world)
        elastic = self.spec.elastic
        context = GangContext(
            gang_id=self.gang_id,
            gang_name=self.spec.name,
            role=slot.role,
            role_rank=slot.index,
            rank=list(world).index(slot),
            world_size=len(world),
            role_sizes=role_sizes(self.spec, world),
            attempt=self.attempt,
            _role_ranks=dense_role_ranks(names),
            generation=self.generation,
            min_size=len(self.spec.min_slots) if elastic else None,
            max_size=self.spec.world_size if elastic else None,
            fence_s=self.spec.fence_s,
        )
        own = self.member_pgs.get(slot.name)
        options: dict[str, Any] = dict(
            name=member_name(self.gang_id, slot),
            namespace=NAMESPACE,
            lifetime="detached",
            max_restarts=0,  # a member never restarts alone: the gang restarts whole
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=own or self._reserved(),
                placement_group_bundle_index=0 if own else self._bundle_index[slot.rank],
            ),
            **actor_resource_options(self.spec.bundles[slot.rank]),
        )
        if program.max_concurrency:
            options["max_concurrency"] = program.max_concurrency
        if program.runtime_env:
            options["runtime_env"] = program.runtime_env
        return actor_cls.options(**options).remote(*constructor_args(program, context))

    def lost_members(self) -> list[str]:
        """Members Ray has with no process yet (`actor_unplaced`; a GCS read each)."""
        return [s.name for s in self.present if (h := self.handles[s.rank]) is not None
                and actor_unplaced(h._actor_id.hex())]

    async def _await_ready(self, slot: MemberSlot) -> None:
        try:
            node_id = await self.handles[slot.rank].__raygang_ready__.remote()
        except Exception as exc:
            raise MemberFailure(describe_failure(slot, exc)) from None
        self.on_member_ready(
            MemberStatus(
                role=slot.role, index=slot.index, rank=slot.rank,
                actor_name=member_name(self.gang_id, slot), node_id=node_id,
                ready_at=time.time(),
            )
        )

    # 3. Release past the barrier and run ----------------------------------------------
    async def run(self) -> list[Any]:
        """Release every member at once; return result refs in rank order when all finish.

        A member that raises or dies fails the whole gang at once (the others may be
        blocked on it in a collective). Service members (no `run()`) are watched until
        they die or the gang is cancelled.
        """
        peers = self._peers()
        for slot in self.present:
            if slot.rank not in self._markers:  # (a member added meanwhile is released)
                self._watch(slot, *self.handles[slot.rank].__raygang_run__.remote(peers))
        return await self._outcome()

    async def resume(self) -> list[Any]:
        """`run()` for an adopted gang: each member's outcome of the run the previous
        scheduler released it into; members it had not released yet (it died in between)
        are released now, with the same peers."""
        present = list(self.present)
        started = await self._all_or_first_error(
            [self._await(slot, self.handles[slot.rank].__raygang_started__.remote())
             for slot in present])
        peers = self._peers()
        for slot, began in zip(present, started):
            handle = self.handles[slot.rank]
            if handle is None or slot not in self.present:
                continue  # removed meanwhile (an elastic shrink): its end is not the gang's
            self._watch(slot, *(handle.__raygang_outcome__.remote() if began
                                else handle.__raygang_run__.remote(peers)))
        return await self._outcome()

    def _peers(self) -> tuple[Any, ...]:
        return tuple(self.handles[slot.rank] for slot in self.present)

    def _watch(self, slot: MemberSlot, marker: Any, result: Any) -> None:
        """Follow a released member's run: its marker, then (a service) its life."""
        self._markers[slot.rank] = marker
        self._results[slot.rank] = result
        task = asyncio.ensure_future(self._member_run(slot, marker))
        self._watching[slot.rank] = task
        self._tasks.append(task)
        self._wake()

    def _wake(self) -> None:
        """The members run() waits for changed."""
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)

    async def _member_run(self, slot: MemberSlot, marker: Any) -> None:
        if await self._await(slot, marker) != DONE:  # a service: until it dies
            await self._await(slot, self.handles[slot.rank].__raygang_watch__.remote())

    async def _outcome(self) -> list[Any]:
        """Wait for every member's run (members added or removed meanwhile included);
        the result refs in rank order. The first member failing fails the gang at once
        (the others may be blocked on it in a collective)."""
        loop = asyncio.get_running_loop()
        while True:
            if self._broken is not None:
                raise self._broken
            running = []
            for task in list(self._watching.values()):
                if not task.done():
                    running.append(task)
                elif not task.cancelled() and (error := task.exception()) is not None:
                    raise error
            # A member in the world but not released yet (a live grow between its
            # `present` and its release, the barrier of `on_resize` hooks in between) is
            # still to run: the others may well have finished meanwhile.
            unreleased = any(slot.rank not in self._watching for slot in self.present)
            if not running and not self._stopping_whole and not unreleased:
                return [self._results[slot.rank] for slot in self.present]
            self._changed = loop.create_future()
            await asyncio.wait([*running, self._changed], return_when=asyncio.FIRST_COMPLETED)

    async def _await(self, slot: MemberSlot, ref) -> Any:
        try:
            return await ref
        except Exception as exc:
            raise MemberFailure(describe_failure(slot, exc)) from None

    async def _all_or_first_error(self, coros, timeout: float | None = None, what: str = ""):
        tasks = [asyncio.ensure_future(c) for c in coros]
        self._tasks.extend(tasks)
        try:
            done, pending = await asyncio.wait(
                tasks, timeout=timeout, return_when=asyncio.FIRST_EXCEPTION
            )
            for task in done:
                if task.exception() is not None:
                    raise task.exception()
            if pending:
                raise MemberFailure(GangError(error_type="StartupTimeout", message=what))
            return [t.result() for t in tasks]
        finally:
            for task in tasks:
                task.cancel()
            # Until each has ended: one may be undoing what it made (off_the_loop), which
            # the teardown after this must not miss
            if tasks:
                await run_to_completion(asyncio.wait(tasks))

    # Preemption signal (before teardown) ----------------------------------------------
    async def signal_preempt(self, grace_s: float,
                             members: Sequence[MemberSlot] | None = None) -> list[dict]:
        """Tell every started member its gang is being preempted; wait up to `grace_s`.

        Calls `__raygang_preempt__` on each member that has a handle and returns, once all
        replied or `grace_s` passed, one entry per signalled member in rank order:
        `{"member": "<role>-<index>", "rank": r, "hooks": n, "error": None |
        "<Class>: <message>", "running": bool}` (`running`: its body had not returned when
        it replied). No member is silently missing: one that did not answer in time
        contributes `{"hooks": 0, "error": "GraceTimeout: ..."}` (its hooks may still be
        running), one that died or failed `{"hooks": 0, "error": "ActorDiedError: ..."}`,
        both with `running` False.
        `grace_s <= 0` sends nothing and returns `[]` (no time to checkpoint: a hook
        started then would be killed mid-write). Kills nothing (`teardown()` does), and
        never raises, except `CancelledError` when the caller itself is cancelled.
        """
        if not grace_s or grace_s <= 0:
            return []
        if members is None:
            self._stopping_whole = True
        slots = [s for s in (self.spec.slots if members is None else members)
                 if self.handles[s.rank] is not None]
        tasks = [asyncio.ensure_future(self._preempt_one(s, self.handles[s.rank])) for s in slots]
        if not tasks:
            return []
        try:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
        finally:
            for task in tasks:
                task.cancel()  # no-op on finished ones; a late reply is not wanted
        timeout = GangError(error_type="GraceTimeout", message=f"no reply within {grace_s:g}s")
        return [
            preempt_entry(slot, error=timeout) if task in pending else task.result()
            for slot, task in zip(slots, tasks)
        ]

    async def _preempt_one(self, slot: MemberSlot, handle: Any) -> dict:
        try:
            reply = await handle.__raygang_preempt__.remote()
            return preempt_entry(slot, hooks=int(reply["hooks"]), error=reply["error"],
                                  running=bool(reply.get("running")))
        except Exception as exc:  # died, or not a member that knows the signal
            return preempt_entry(slot, error=describe_failure(slot, exc))

    async def wait_bodies(self, ranks: Sequence[int], timeout: float) -> None:
        """Wait up to `timeout` seconds for the bodies of the members `ranks` to return
        (or raise, or die). Never raises, except `CancelledError`."""
        refs = [self._markers[r] for r in ranks if r in self._markers]
        if not refs or timeout <= 0:
            return
        waits = [asyncio.ensure_future(settled(ref)) for ref in refs]
        try:
            await asyncio.wait(waits, timeout=timeout)
        finally:
            for wait in waits:
                wait.cancel()

    # 4. Tear down ----------------------------------------------------------------------
    async def close(self) -> None:
        """Let a placement group still being created come to rest, then tear down.
        Runs to the end even if cancelled meanwhile (the gang is ending anyway).

        Ray 2.60 leaks the bundles of a placement group removed while they are being
        prepared: the node's resources stay used with nothing holding them (reproduced
        here; ray-project/ray #64693). So an unconfirmed placement group gets up to
        SETTLE_S to become ready before it is removed; one pinned to nodes with room takes
        milliseconds, and one that cannot be placed is not being prepared anyway.
        """
        unsettled = [self.member_pgs[m] for m in self._unsettled if m in self.member_pgs]
        if self.pg is not None and not self._at_rest:
            unsettled.append(self.pg)
        if unsettled:
            await run_to_completion(asyncio.gather(*(wait_ready(pg, SETTLE_S)
                                                     for pg in unsettled)))
        await run_to_completion(self.teardown())

    async def teardown(self) -> None:
        """Kill every member and remove the placement groups. Never raises. What it removes
        is taken off the launch first (nothing else acts on it meanwhile); the removal
        runs in a thread: each step is a GCS call, which waits out a GCS outage, and must
        not hold the scheduler's event loop up meanwhile."""
        for task in self._tasks:
            task.cancel()
        members = [(self.handles[s.rank], member_name(self.gang_id, s)) for s in self.spec.slots]
        groups = [(pg, member_name(self.gang_id, self.spec.slots_by_name[name]))
                  for name, pg in self.member_pgs.items()] + [(self.pg, pg_name(self.gang_id))]
        self.handles = [None] * len(self.handles)
        self.pg, self.member_pgs = None, {}
        await asyncio.to_thread(_remove, members, groups)


def _remove(members: Sequence[tuple[Any, str]],
            groups: Sequence[tuple[PlacementGroup | None, str]]) -> None:
    for handle, name in members:
        kill_member(handle, name)
    for group, name in groups:
        remove_group(group, name)
