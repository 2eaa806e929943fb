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
from collections.abc import Callable, Sequence
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from raygang.control.ports import MemberFailure, ReservationTimeout
from raygang.control.program import RoleProgram
from raygang.control.status import GangError, MemberStatus
from raygang.control.tasks import run_to_completion
from raygang.core.resources import Resources
from raygang.core.spec import GangSpec, MemberSlot
from raygang.runtime.context import GangContext
from raygang.runtime.member import DONE, constructor_args, member_actor_class
from raygang.runtime.ray_private import placement_group as ray_placement_group

log = logging.getLogger(__name__)
# How long a placement group still being created may take to be ready before it is
# removed anyway (see GangLaunch.close).
SETTLE_S = 10.0

NAMESPACE = "raygang"  # of the scheduler actor and every member actor
SCHEDULER_NAME = "raygang-scheduler"
NODE_ID_LABEL = "ray.io/node-id"


def pg_name(gang_id: str) -> str:
    return f"raygang-{gang_id}"


def member_name(gang_id: str, slot: MemberSlot) -> str:
    return f"raygang-{gang_id}-{slot.role}-{slot.index}"


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
        self.pg: PlacementGroup | None = None
        # The placement group is not being prepared: it was reported ready, or it waited a
        # whole reservation timeout (so it is pending for lack of room, not mid-prepare).
        self._at_rest = False
        self.handles: list[Any] = [None] * spec.world_size
        self._markers: list[Any] = []  # per rank, once released: its run's marker ref
        self._tasks: list[asyncio.Task] = []
        self._role_ranks = _role_ranks(spec)

    @classmethod
    def adopt(cls, gang_id: str, spec: GangSpec, nodes: Sequence[str], attempt: int,
              pg_id: str) -> GangLaunch | None:
        """The launch of a gang that a previous scheduler process started: its members
        (detached, named) and its placement group `pg_id` (hex); None if a member is gone."""
        launch = cls(gang_id, spec, {}, nodes, attempt)
        try:
            launch.handles = [ray.get_actor(member_name(gang_id, slot), namespace=NAMESPACE)
                              for slot in spec.slots]
        except ValueError:
            return None
        launch.pg = ray_placement_group(pg_id)
        launch._at_rest = True
        return launch

    # 1. Reserve ------------------------------------------------------------------------
    async def reserve(self) -> None:
        """One placement group, each bundle pinned to the node the plan chose."""
        self.pg = placement_group(
            [b.to_dict() for b in self.spec.bundles],
            strategy=self.spec.strategy.value,
            name=pg_name(self.gang_id),
            lifetime="detached",  # the gang must outlive a restart of the scheduler
            bundle_label_selector=[{NODE_ID_LABEL: n} for n in self.nodes],
        )
        # Not asyncio.wait_for: before Python 3.12 it can swallow a cancellation that
        # arrives as the placement group becomes ready, and the gang would run on.
        ready = asyncio.ensure_future(self.pg.ready())
        try:
            done, _ = await asyncio.wait([ready], timeout=self.spec.reservation_timeout_s)
        finally:
            if not ready.done():
                ready.cancel()
        self._at_rest = True
        if not done:
            raise ReservationTimeout(
                f"placement group {pg_name(self.gang_id)} was not ready within "
                f"{self.spec.reservation_timeout_s:g}s"
            )
        ready.result()

    # 2. Start, in `after` order --------------------------------------------------------
    async def start_members(self) -> None:
        """Start each role once the roles it waits for are ready; return when all are."""
        ready = {role.name: asyncio.Event() for role in self.spec.roles}

        async def start_role(role_name: str) -> None:
            role = self.spec.role(role_name)
            for dep in role.after:
                await ready[dep].wait()
            slots = [s for s in self.spec.slots if s.role == role_name]
            actor_cls = member_actor_class(self.programs[role_name])
            for slot in slots:
                self.handles[slot.rank] = self._create(actor_cls, slot)
            await asyncio.gather(*(self._await_ready(slot) for slot in slots))
            ready[role_name].set()

        await self._all_or_first_error(
            [start_role(r.name) for r in self.spec.roles], self.spec.startup_timeout_s,
            f"members were not all ready within {self.spec.startup_timeout_s:g}s",
        )

    def _create(self, actor_cls, slot: MemberSlot):
        program = self.programs[slot.role]
        context = GangContext(
            gang_id=self.gang_id,
            gang_name=self.spec.name,
            role=slot.role,
            role_rank=slot.index,
            rank=slot.rank,
            world_size=self.spec.world_size,
            role_sizes={r.name: r.replicas for r in self.spec.roles},
            attempt=self.attempt,
            _role_ranks=self._role_ranks,
        )
        options: dict[str, Any] = dict(
            name=member_name(self.gang_id, slot),
            namespace=NAMESPACE,
            lifetime="detached",
            max_restarts=0,  # a member never restarts alone: the gang restarts whole
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=self.pg, placement_group_bundle_index=slot.rank
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
        peers = tuple(self.handles)
        return await self._outcome([h.__raygang_run__.remote(peers) for h in self.handles])

    async def resume(self) -> list[Any]:
        """`run()` for an adopted gang: each member's outcome of the run the previous
        scheduler released it into; members it had not released yet (it died in between)
        are released now, with the same peers."""
        started = await self._all_or_first_error(
            [self._await(slot, self.handles[slot.rank].__raygang_started__.remote())
             for slot in self.spec.slots])
        peers = tuple(self.handles)
        return await self._outcome([
            h.__raygang_outcome__.remote() if began else h.__raygang_run__.remote(peers)
            for h, began in zip(self.handles, started)
        ])

    async def _outcome(self, pairs: list) -> list[Any]:
        self._markers = [marker for marker, _ in pairs]
        markers = await self._all_or_first_error(
            [self._await(slot, pairs[slot.rank][0]) for slot in self.spec.slots]
        )
        if any(m != DONE for m in markers):
            await self._all_or_first_error(
                [self._await(slot, self.handles[slot.rank].__raygang_watch__.remote())
                 for slot in self.spec.slots]
            )
        return [result for _, result in pairs]

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
    async def signal_preempt(self, grace_s: float) -> list[dict]:
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
        slots = [s for s in self.spec.slots if self.handles[s.rank] is not None]
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
        refs = [self._markers[r] for r in ranks if r < len(self._markers)]
        if not refs or timeout <= 0:
            return
        waits = [asyncio.ensure_future(_settled(ref)) for ref in refs]
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
        if self.pg is not None and not self._at_rest:
            await run_to_completion(_wait_ready(self.pg, SETTLE_S))
        self.teardown()

    def teardown(self) -> None:
        """Kill every member and remove the placement group. Never raises."""
        for task in self._tasks:
            task.cancel()
        for handle in self.handles:
            if handle is not None:
                try:
                    ray.kill(handle, no_restart=True)
                except Exception:  # already gone
                    log.debug("kill of a member of %s failed", self.gang_id, exc_info=True)
        self.handles = [None] * len(self.handles)
        if self.pg is not None:
            try:
                remove_placement_group(self.pg)
            except Exception:
                log.warning("removing %s failed", pg_name(self.gang_id), exc_info=True)
            self.pg = None


async def _wait_ready(pg: PlacementGroup, timeout: float) -> None:
    ready = asyncio.ensure_future(pg.ready())
    done, _ = await asyncio.wait([ready], timeout=timeout)
    if done and not ready.cancelled():
        ready.exception()  # retrieved: a removed group's error is expected here
    else:
        ready.cancel()


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


def _role_ranks(spec: GangSpec) -> dict[str, range]:
    ranks: dict[str, range] = {}
    for slot in spec.slots:
        start = ranks[slot.role].start if slot.role in ranks else slot.rank
        ranks[slot.role] = range(start, slot.rank + 1)
    return ranks
