"""A gang's run on the in-memory cluster (`memory.MemoryCluster`): its members, which
start, run, are told of a preemption and end as their `MemoryProgram` says, at moments the
cluster arms as timers (nothing polls; see `memory.py`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raygang.control import kinds
from raygang.control.ports import MemberFailure, ReservationTimeout
from raygang.control.records import GangRecord
from raygang.control.status import GangError, MemberStatus
from raygang.control.tasks import run_to_completion
from raygang.core.resources import Resources
from raygang.core.spec import GangSpec

if TYPE_CHECKING:  # the cluster makes runs; a run books and waits on its cluster
    from raygang.control.memory import MemoryCluster

EPSILON_S = 1e-9  # a moment due "now" compares as reached


@dataclass(frozen=True)
class MemoryProgram:
    """What a member does. `seconds`: how long its body runs (None: a service, no body);
    `fails_after_s`: its body raises then; `on_preempt`: "hook" (a checkpoint hook that
    returns at once), "watch" (no hook; the body returns `checkpoint_s` after it is told)
    or "ignore"; `start_s`: time to become ready; `fails_to_start`: its constructor raises."""

    seconds: float | None = 0.0
    fails_after_s: float | None = None
    on_preempt: str = "hook"
    checkpoint_s: float = 0.0
    start_s: float = 0.0
    fails_to_start: bool = False
    result: Any = None


@dataclass
class MemoryMember:
    gang_id: str
    rank: int
    role: str
    index: int
    node: str
    program: MemoryProgram
    released_at: float | None = None
    told_at: float | None = None  # preemption signalled
    dead: str | None = None  # why it died (killed, node lost)

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    def outcome(self, now: float) -> tuple[str, Any] | None:
        """("done", result) / ("error", GangError) once the body has ended, else None."""
        if self.dead:
            return "error", GangError(member=self.name, rank=self.rank,
                                      error_type="ActorDiedError", message=self.dead)
        if self.released_at is None or self.program.seconds is None:
            return None  # not released yet, or a service: it runs until it dies
        program, start, now = self.program, self.released_at, now + EPSILON_S
        if program.fails_after_s is not None and now >= start + program.fails_after_s:
            return "error", GangError(member=self.name, rank=self.rank,
                                      error_type="RuntimeError", message="the body failed")
        return ("done", program.result) if now >= self._end() else None

    def _end(self) -> float:
        assert self.released_at is not None and self.program.seconds is not None
        end = self.released_at + self.program.seconds
        if self.told_at is not None and self.program.on_preempt == "watch":
            end = min(end, self.told_at + self.program.checkpoint_s)
        return end

    def moments(self) -> list[float]:
        """When its outcome may change by itself (its body ends or fails)."""
        if self.dead or self.released_at is None or self.program.seconds is None:
            return []
        out = [self._end()]
        if self.program.fails_after_s is not None:
            out.append(self.released_at + self.program.fails_after_s)
        return out



def programs_of(record: GangRecord) -> dict[str, MemoryProgram]:
    if kinds.of(record.kind).serves_until_stopped:  # a Serve app's replicas, say
        return {role.name: MemoryProgram(seconds=None) for role in record.spec.roles}
    out = {}
    for role, program in record.programs.items():
        target = program.target
        out[role] = target if isinstance(target, MemoryProgram) else MemoryProgram()
    return out


class MemoryRun:
    """One gang's run on the in-memory cluster (the `GangRun` port)."""

    def __init__(self, cluster: MemoryCluster, gang_id: str, spec: GangSpec,
                 programs: dict[str, MemoryProgram], nodes: Sequence[str],
                 on_member_ready: Callable[[MemberStatus], None]):
        self.cluster = cluster
        self.gang_id = gang_id
        self.spec = spec
        self.programs = programs
        self.nodes = tuple(nodes)  # one per member of the minimum (`spec.min_slots`)
        self.on_member_ready = on_member_ready
        self.members: list[MemoryMember] = []
        self.extra: dict[str, str] = {}  # surplus member -> its node (booked as gang/member)
        # Told to stop whole, or restarting: bodies ending now are not the outcome (as
        # on Ray, runtime/kinds/gang/launch.py)
        self._stopping_whole = False
        self._broken: MemberFailure | None = None  # a restart failed: the run fails
        self.lost: list[str] = []  # members whose creation the cluster lost

    def _bundles(self) -> list[tuple[str, Resources]]:
        return list(zip(self.nodes, self.spec.min_bundles))

    def lost_members(self) -> list[str]:
        return list(self.lost)

    async def reserve(self) -> None:
        """Book every bundle on its node once it fits there (a node that is not alive
        never fits), within the gang's reservation timeout."""
        cluster = self.cluster
        deadline = cluster.clock() + self.spec.reservation_timeout_s
        await cluster.step()
        if not cluster.shown(self._bundles()):
            cluster.asked_early.append(self.gang_id)
        if not await cluster.until(lambda: cluster.fits(self._bundles()), deadline):
            raise ReservationTimeout(
                f"the reservation of gang {self.gang_id} was not ready within "
                f"{self.spec.reservation_timeout_s:g}s")
        cluster.book(self.gang_id, self._bundles())

    async def start_members(self) -> None:
        """Start role after role (`after` order), each member taking its `start_s`, all
        within the gang's startup timeout."""
        timeout = self.spec.startup_timeout_s
        try:
            await asyncio.wait_for(self._start_members(), timeout)
        except asyncio.TimeoutError:
            raise MemberFailure(GangError(
                error_type="StartupTimeout",
                message=f"members were not all ready within {timeout:g}s")) from None

    async def _start_members(self, slots: Sequence[Any] | None = None) -> None:
        """Start `slots` (the minimum by default; a restart: its new world), role after
        role in `after` order, each role's `start_s` once."""
        slots = self.spec.min_slots if slots is None else slots
        started: set[str] = set()
        roles = list(self.spec.roles)
        by_rank: list[MemoryMember | None] = [None] * self.spec.world_size
        node_of = dict(zip((s.name for s in self.spec.min_slots), self.nodes))
        node_of.update(self.extra)
        while roles:
            role = next(r for r in roles if set(r.after) <= started)
            roles.remove(role)
            program = self.programs.get(role.name, MemoryProgram())
            await asyncio.sleep(program.start_s)
            await self.cluster.step()
            if self.cluster.losing_creations:  # a test's: Ray lost them (never start)
                self.lost = [s.name for s in slots if s.role == role.name]
                await asyncio.Event().wait()
            for slot in (s for s in slots if s.role == role.name):
                member = by_rank[slot.rank] = MemoryMember(
                    self.gang_id, slot.rank, slot.role, slot.index, node_of[slot.name],
                    program)
                if program.fails_to_start:
                    raise MemberFailure(GangError(member=slot.name, rank=slot.rank,
                                                  error_type="ValueError",
                                                  message="the constructor failed"))
                self._ready(member)
            started.add(role.name)
        self.members = [m for m in by_rank if m is not None]
        self.cluster.members[self.gang_id] = self.members

    def _ready(self, member: MemoryMember) -> None:
        self.on_member_ready(MemberStatus(
            role=member.role, index=member.index, rank=member.rank,
            actor_name=f"memory-{self.gang_id}-{member.name}", node_id=member.node,
            ready_at=time.time()))

    def _release(self, members: Iterable[MemoryMember]) -> None:
        now = self.cluster.clock()
        for member in members:
            if member.released_at is None:
                member.released_at = now
            self.cluster.arm(member.moments())

    async def run(self) -> list[Any]:
        self._release(self.members)
        return await self._outcome()

    async def resume(self) -> list[Any]:
        self._release(self.members)  # (on this process's loop: the old one's timers died)
        return await self._outcome()

    async def _outcome(self) -> list[Any]:
        """Results in rank order once every body ended; the first failure raises."""
        cluster = self.cluster
        while True:
            if self._broken is not None:
                raise self._broken
            now = cluster.clock()
            outcomes = [m.outcome(now) for m in self.members]
            for outcome in outcomes:
                if outcome is not None and outcome[0] == "error":
                    raise MemberFailure(outcome[1])
            if not self._stopping_whole and all(o is not None for o in outcomes):
                return [o[1] for o in outcomes if o is not None]
            await cluster.changed()

    async def signal_preempt(self, grace_s: float,
                             members: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        if not grace_s or grace_s <= 0:
            return []
        if members is None:
            self._stopping_whole = True
        await self.cluster.step()  # the replies take a moment
        now = self.cluster.clock()
        replies = []
        told = None if members is None else {slot.rank for slot in members}
        for m in self.members:
            if told is not None and m.rank not in told:
                continue
            if m.dead:
                replies.append(_reply(m, 0, f"ActorDiedError: {m.dead}", False))
                continue
            first = m.told_at is None
            m.told_at = m.told_at if m.told_at is not None else now
            hooks = int(first and m.program.on_preempt == "hook")
            running = m.released_at is not None and m.program.seconds is not None \
                and m.outcome(now) is None
            replies.append(_reply(m, hooks, None, running))
            self.cluster.arm(m.moments())
        self.cluster.notify()
        return replies

    async def wait_bodies(self, ranks: Sequence[int], timeout: float) -> None:
        cluster = self.cluster
        members = [m for m in self.members if m.rank in set(ranks)]
        await cluster.until(lambda: all(m.outcome(cluster.clock()) is not None
                                        for m in members),
                            cluster.clock() + max(0.0, timeout))

    async def close(self) -> None:
        """Tear everything down (a moment's step first, as on Ray); never cut short."""
        await run_to_completion(self._close())

    async def _close(self) -> None:
        try:
            await self.cluster.step()
        finally:
            self.cluster.budgets.pop(self.gang_id, None)  # a job's budget ends with it
            self.cluster.clear(self.gang_id)
            self.members = []
            self.extra = {}

    # Elastic gangs ----------------------------------------------------------------------
    async def add_members(self, members: Sequence[tuple[Any, str]]) -> list[str]:
        """Book each member's bundle on its node once it fits (within the reservation
        timeout), start them (their role's `start_s`) and release them (no resize hooks
        here: nothing goes wrong telling the others). Undone if anything fails, or if it
        is cancelled, on the way."""
        await self.reserve_members(members)
        names = [slot.name for slot, _ in members]
        try:
            started = await self._start([slot for slot, _ in members])
        except BaseException:
            self._unbook(names)
            raise
        self.members = sorted([*self.members, *started], key=lambda m: m.rank)
        self.cluster.members[self.gang_id] = self.members
        self._release(started)
        return []

    async def reserve_members(self, members: Sequence[tuple[Any, str]]) -> None:
        """Book each member's bundle on its node once it fits (within the reservation
        timeout)."""
        cluster = self.cluster
        deadline = cluster.clock() + self.spec.reservation_timeout_s
        wanted = {slot.name: (node, self.spec.bundles[slot.rank]) for slot, node in members}
        await cluster.step()
        if not await cluster.until(lambda: cluster.fits(wanted.values()), deadline):
            raise ReservationTimeout(f"members {', '.join(wanted)} of gang "
                                     f"{self.gang_id} were not reserved within "
                                     f"{self.spec.reservation_timeout_s:g}s")
        for name, bundle in wanted.items():
            self.extra[name] = bundle[0]
            cluster.book(f"{self.gang_id}/{name}", [bundle])

    async def restart(self, world: Sequence[Any],
                      stopped: Callable[[], None] | None = None) -> None:
        """Every member stops; `world` starts afresh (each body from its beginning: this
        cluster keeps no checkpoint) and is released at once."""
        names = {slot.name for slot in world}
        self._stopping_whole, self.members = True, []
        self.cluster.members[self.gang_id] = self.members
        self._unbook(n for n in list(self.extra) if n not in names)
        if stopped is not None:
            stopped()
        try:  # as at the first start (role order), then released together
            await self._start_members(world)
        except MemberFailure as failure:
            self._broken = failure
            self.cluster.notify()
            raise
        finally:
            self._stopping_whole = False
        self._release(self.members)
        self.cluster.notify()

    async def _start(self, slots: Sequence[Any]) -> list[MemoryMember]:
        """Start these surplus members (their role's `start_s`) on their booked nodes; a
        constructor failing raises."""
        started = []
        for slot in slots:
            program = self.programs.get(slot.role, MemoryProgram())
            await asyncio.sleep(program.start_s)
            await self.cluster.step()
            if program.fails_to_start:
                raise MemberFailure(GangError(member=slot.name, rank=slot.rank,
                                              error_type="ValueError",
                                              message="the constructor failed"))
            member = MemoryMember(self.gang_id, slot.rank, slot.role, slot.index,
                             self.extra[slot.name], program)
            started.append(member)
            self._ready(member)
        return started

    def _unbook(self, names: Iterable[str]) -> None:
        for name in list(names):
            if self.extra.pop(name, None) is not None:
                self.cluster.unbook(f"{self.gang_id}/{name}")

    async def remove_members(self, members: Sequence[Any]) -> list[str]:
        """Stop them (told and given their grace period before) and free their bundles.
        Only members the run has (started, as on Ray: a member still being added has no
        actor to stop yet, and its add goes on)."""
        names = {m.name for m in self.members} & {slot.name for slot in members}
        try:
            await self.cluster.step()
        finally:  # never cut short: what a removal started, it finishes
            for member in self.members:
                if member.name in names:
                    member.dead = member.dead or "removed"
            self.members = [m for m in self.members if m.name not in names]
            self.cluster.members[self.gang_id] = self.members
            self._unbook(names)
        return []


def _reply(member: MemoryMember, hooks: int, error: str | None, running: bool
           ) -> dict[str, Any]:
    return {"member": member.name, "rank": member.rank, "hooks": hooks, "error": error,
            "running": running}
