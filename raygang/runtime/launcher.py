"""Everything Ray does for one admitted gang: reserve, start, barrier, run, tear down.

`GangLaunch` is the Ray implementation of the control plane's `GangRun` port: it only
acts and reports (it raises `ReservationTimeout` or `MemberFailure`), and the gang's
driver decides what that means (requeue, restart, fail). `teardown()` is idempotent and
safe at any point, including after a cancellation.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from raygang.control.ports import MemberFailure, ReservationTimeout
from raygang.control.program import RoleProgram
from raygang.control.status import GangError, MemberStatus
from raygang.control.tasks import run_to_completion, wait_within
from raygang.core.resources import Resources
from raygang.core.spec import GangSpec, MemberSlot
from raygang.runtime.context import GangContext, World, dense_role_ranks
from raygang.runtime.member import DONE, constructor_args, member_actor_class
from raygang.runtime.names import NAMESPACE, NODE_ID_LABEL, member_name, pg_name
from raygang.runtime.ray_private import placement_group as ray_placement_group
from raygang.runtime.settle import SETTLE_S, wait_ready

log = logging.getLogger(__name__)
# How long a placement group still being created may take to be ready before it is
# removed anyway (see GangLaunch.close).


def describe_failure(slot: MemberSlot | None, exc: BaseException) -> GangError:
    """The member's own exception class and message, whichever way Ray delivered it."""
    member = f"{slot.role}-{slot.index}" if slot else None
    rank = slot.rank if slot else None
    if isinstance(exc, RayTaskError):
        cause = exc.cause if exc.cause is not None else exc
        return GangError(
            member=member, rank=rank, error_type=type(cause).__name__,
            message=str(cause), traceback=str(exc),
        )
    if isinstance(exc, RayActorError):
        first = (getattr(exc, "error_msg", None) or str(exc)).strip().splitlines()[0]
        return GangError(member=member, rank=rank, error_type="ActorDiedError", message=first)
    return GangError(member=member, rank=rank, error_type=type(exc).__name__, message=str(exc))


def actor_resource_options(bundle: Resources) -> dict[str, Any]:
    """Ask, inside the bundle, for all of it (so the member sees its GPUs)."""
    amounts = bundle.to_dict()
    options: dict[str, Any] = {
        "num_cpus": amounts.pop("CPU", 0),
        "num_gpus": amounts.pop("GPU", 0),
    }
    memory = amounts.pop("memory", 0)
    if memory:
        options["memory"] = memory
    amounts.pop("object_store_memory", None)  # reserved by the bundle; actors cannot ask
    if amounts:
        options["resources"] = amounts
    return options


class GangLaunch:
    """One gang on Ray. An elastic gang (`resize: live`) reserves its minimum as one
    placement group and each surplus member in a group of its own (Ray cannot resize a
    placement group: ray-project/ray #16403), so members come and go one at a time while
    the others run on; `present` is who is in the gang's world now."""

    def __init__(
        self,
        gang_id: str,
        spec: GangSpec,
        programs: dict[str, RoleProgram],
        nodes: Sequence[str],
        attempt: int,
        on_member_ready: Callable[[MemberStatus], None] = lambda m: None,
    ):
        self.gang_id = gang_id
        self.spec = spec
        self.programs = programs
        self.nodes = tuple(nodes)
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
              programs: dict[str, RoleProgram] | None = None) -> GangLaunch | None:
        """The launch of a gang that a previous scheduler process started: its members
        (detached, named), its placement group `pg_id` (hex) and, for an elastic gang, the
        surplus members it had added (member name -> its own group's id); None if a
        member is gone."""
        launch = cls(gang_id, spec, programs or {}, nodes, attempt)  # (programs: to grow)
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
        """One placement group, each bundle pinned to the node the plan chose."""
        self.pg = placement_group(
            [b.to_dict() for b in self.spec.min_bundles],
            strategy=self.spec.strategy.value,
            name=pg_name(self.gang_id),
            lifetime="detached",  # the gang must outlive a restart of the scheduler
            bundle_label_selector=[{NODE_ID_LABEL: n} for n in self.nodes],
        )
        ready = await _ready_within([self.pg], self.spec.reservation_timeout_s)
        self._at_rest = True
        if not ready:
            raise ReservationTimeout(
                f"placement group {pg_name(self.gang_id)} was not ready within "
                f"{self.spec.reservation_timeout_s:g}s"
            )

    # 2. Start, in `after` order --------------------------------------------------------
    async def start_members(self) -> None:
        """Start each role once the roles it waits for are ready; return when all are."""
        ready = {role.name: asyncio.Event() for role in self.spec.roles}

        async def start_role(role_name: str) -> None:
            role = self.spec.role(role_name)
            for dep in role.after:
                await ready[dep].wait()
            slots = [s for s in self.present if s.role == role_name]
            actor_cls = member_actor_class(self.programs[role_name])
            for slot in slots:
                self.handles[slot.rank] = self._create(actor_cls, slot, self.present)
            await asyncio.gather(*(self._await_ready(slot) for slot in slots))
            ready[role_name].set()

        await self._all_or_first_error(
            [start_role(r.name) for r in self.spec.roles], self.spec.startup_timeout_s,
            f"members were not all ready within {self.spec.startup_timeout_s:g}s",
        )

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
            role_sizes=_role_sizes(self.spec, world),
            attempt=self.attempt,
            _role_ranks=dense_role_ranks(names),
            generation=self.generation,
            min_size=len(self.spec.min_slots) if elastic else None,
            max_size=self.spec.world_size if elastic else None,
        )
        own = self.member_pgs.get(slot.name)
        options: dict[str, Any] = dict(
            name=member_name(self.gang_id, slot),
            namespace=NAMESPACE,
            lifetime="detached",
            max_restarts=0,  # a member never restarts alone: the gang restarts whole
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=own or self.pg,
                placement_group_bundle_index=0 if own else self._bundle_index[slot.rank],
            ),
            **actor_resource_options(self.spec.bundles[slot.rank]),
        )
        if program.max_concurrency:
            options["max_concurrency"] = program.max_concurrency
        if program.runtime_env:
            options["runtime_env"] = program.runtime_env
        return actor_cls.options(**options).remote(*constructor_args(program, context))

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
                elif not task.cancelled() and task.exception() is not None:
                    raise task.exception()
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
            _preempt_entry(slot, error=timeout) if task in pending else task.result()
            for slot, task in zip(slots, tasks)
        ]

    async def _preempt_one(self, slot: MemberSlot, handle: Any) -> dict:
        try:
            reply = await handle.__raygang_preempt__.remote()
            return _preempt_entry(slot, hooks=int(reply["hooks"]), error=reply["error"],
                                  running=bool(reply.get("running")))
        except Exception as exc:  # died, or not a member that knows the signal
            return _preempt_entry(slot, error=describe_failure(slot, exc))

    async def wait_bodies(self, ranks: Sequence[int], timeout: float) -> None:
        """Wait up to `timeout` seconds for the bodies of the members `ranks` to return
        (or raise, or die). Never raises, except `CancelledError`."""
        refs = [self._markers[r] for r in ranks if r in self._markers]
        if not refs or timeout <= 0:
            return
        waits = [asyncio.ensure_future(_settled(ref)) for ref in refs]
        try:
            await asyncio.wait(waits, timeout=timeout)
        finally:
            for wait in waits:
                wait.cancel()

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
            for slot in slots:
                actor_cls = member_actor_class(self.programs[slot.role])
                self.handles[slot.rank] = self._create(actor_cls, slot, world)
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
        try:
            for slot, node in members:
                self.member_pgs[slot.name] = placement_group(
                    [self.spec.bundles[slot.rank].to_dict()], strategy="PACK",
                    name=member_name(self.gang_id, slot), lifetime="detached",
                    bundle_label_selector=[{NODE_ID_LABEL: node}])
            self._unsettled |= names  # until ready, or a whole timeout: see close()
            ready = await _ready_within([self.member_pgs[n] for n in names],
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
                    _kill(handle, member_name(self.gang_id, slot))
                await _names_free([member_name(self.gang_id, s) for s in stopping])
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
            _kill(handle, member_name(self.gang_id, slot))
            pg = self.member_pgs.pop(slot.name, None)
            if pg is not None and slot.name in self._unsettled:
                await wait_ready(pg, SETTLE_S)
                self._unsettled.discard(slot.name)
            _remove(pg, member_name(self.gang_id, slot))

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
        sizes = _role_sizes(self.spec, self.present)
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
        self.teardown()

    def teardown(self) -> None:
        """Kill every member and remove the placement group. Never raises."""
        for task in self._tasks:
            task.cancel()
        for slot in self.spec.slots:
            _kill(self.handles[slot.rank], member_name(self.gang_id, slot))
        self.handles = [None] * len(self.handles)
        for name, pg in self.member_pgs.items():
            _remove(pg, member_name(self.gang_id, self.spec.slots_by_name[name]))
        _remove(self.pg, pg_name(self.gang_id))
        self.pg, self.member_pgs = None, {}


def _kill(handle: Any, name: str) -> None:
    """Kill a member actor (None: none). Never raises."""
    if handle is None:
        return
    try:
        ray.kill(handle, no_restart=True)
    except Exception:  # already gone
        log.debug("kill of %s failed", name, exc_info=True)


def _remove(pg: PlacementGroup | None, name: str) -> None:
    """Remove a placement group (None: none). Never raises."""
    if pg is None:
        return
    try:
        remove_placement_group(pg)
    except Exception:
        log.warning("removing placement group %s failed", name, exc_info=True)


async def _names_free(names: Sequence[str], timeout: float = 10.0) -> None:
    """Wait until killed members' names are free again (a restarted member takes its
    name back; Ray frees a name once the GCS has the actor dead)."""
    deadline = time.monotonic() + timeout
    for name in names:
        while time.monotonic() < deadline:
            try:
                ray.get_actor(name, namespace=NAMESPACE)
            except ValueError:
                break
            await asyncio.sleep(0.05)


async def _ready_within(pgs: Sequence[PlacementGroup], timeout: float) -> bool:
    """Whether every group became ready within `timeout` (a group's error is raised).
    Not asyncio.wait_for: a cancellation that arrives as a group becomes ready must not be
    swallowed, or the gang would run on (`wait_within`)."""
    done, pending = await wait_within([pg.ready() for pg in pgs], timeout)
    for ready in done:
        ready.result()
    return not pending


async def _settled(ref: Any) -> None:
    try:
        await ref
    except Exception:  # noqa: BLE001 - a body that raised or died has ended too
        pass


def _preempt_entry(slot: MemberSlot, hooks: int = 0, error: GangError | str | None = None,
                   running: bool = False) -> dict:
    if isinstance(error, GangError):
        error = f"{error.error_type}: {error.message}"
    return {"member": f"{slot.role}-{slot.index}", "rank": slot.rank, "hooks": hooks,
            "error": error, "running": running}


def _role_sizes(spec: GangSpec, world: Sequence[MemberSlot]) -> dict[str, int]:
    counts = Counter(slot.role for slot in world)
    return {role.name: counts[role.name] for role in spec.roles}
