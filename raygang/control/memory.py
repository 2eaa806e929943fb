"""An in-memory cluster: the control plane's ports without Ray, in one process.

Nodes have resources; a gang's run books its bundles on the nodes its admission chose
(as a pinned placement group does: it waits while they are not free, and times out),
starts its members, and runs their bodies for as long as their `MemoryProgram` says.
Members can fail, nodes can be lost, preemption signals are answered as the program
says. Nothing here is bound to one event loop: what members do follows from the times
recorded here, so a second control plane (a restarted scheduler) can adopt runs the
first one started. For the fast test tier and for replaying cluster traces.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from raygang.control.ports import GangRun, MemberFailure, ReservationTimeout
from raygang.control.records import GangRecord
from raygang.control.status import GangError, MemberStatus
from raygang.core.budget import never_fits, take
from raygang.core.resources import Resources
from raygang.core.snapshot import ClusterSnapshot, NodeState, PlacedGang
from raygang.core.spec import GangSpec, Resize

POLL_S = 0.005  # how often a waiting run looks at the cluster again


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
class _Member:
    gang_id: str
    rank: int
    role: str
    index: int
    node: str
    program: MemoryProgram
    released_at: float | None = None
    told_at: float | None = None  # preemption signalled
    dead: str | None = None  # why it died (killed, node lost)

    def outcome(self, now: float) -> tuple[str, Any] | None:
        """("done", result) / ("error", GangError) once the body has ended, else None."""
        if self.dead:
            return "error", GangError(member=f"{self.role}-{self.index}", rank=self.rank,
                                      error_type="ActorDiedError", message=self.dead)
        if self.released_at is None or self.program.seconds is None:
            return None  # not released yet, or a service: it runs until it dies
        program, start = self.program, self.released_at
        if program.fails_after_s is not None and now >= start + program.fails_after_s:
            return "error", GangError(member=f"{self.role}-{self.index}", rank=self.rank,
                                      error_type="RuntimeError", message="the body failed")
        end = start + program.seconds
        if self.told_at is not None and program.on_preempt == "watch":
            end = min(end, self.told_at + program.checkpoint_s)
        return ("done", program.result) if now >= end else None


@dataclass
class _Node:
    node_id: str
    total: Resources
    alive: bool = True
    external: Resources = field(default_factory=Resources)  # used by work not of raygang
    unseen: Resources = field(default_factory=Resources)  # used, not yet in the view (lag)


class MemoryCluster:
    # runs add and remove an elastic gang's surplus members, or restart it whole
    resizes = frozenset({Resize.LIVE, Resize.RESTART})

    def __init__(self, nodes: Iterable[tuple[str, Resources]],
                 clock: Callable[[], float] = time.monotonic):
        self.nodes = {node_id: _Node(node_id, total) for node_id, total in nodes}
        self.clock = clock
        self.booked: dict[str, list[tuple[str, Resources]]] = {}  # gang id -> bundles
        self.members: dict[str, list[_Member]] = {}  # gang id -> members, by rank
        self.budgets: dict[str, MemoryBudget] = {}  # job id -> the budget its gangs use

    # What tests and traces do to it ------------------------------------------------------
    def lose_node(self, node_id: str) -> None:
        """The node dies: every member on it dies with it."""
        self.nodes[node_id].alive = False
        for members in self.members.values():
            for member in members:
                if member.node == node_id and not member.dead:
                    member.dead = f"node {node_id} was lost"

    def add_node(self, node_id: str, total: Resources) -> None:
        self.nodes[node_id] = _Node(node_id, total)

    def free(self, node_id: str, seen: bool = False) -> Resources:
        """What is free on the node (`seen`: as the cluster's view shows it, which may
        lag: usage `unseen` is not in it yet)."""
        node = self.nodes[node_id]
        used = Resources.sum(b for bundles in self.booked.values() for n, b in bundles
                             if n == node_id)
        return node.total - used - node.external - (Resources() if seen else node.unseen)

    # The port ---------------------------------------------------------------------------
    def observe(self, held: Iterable[PlacedGang], draining: Collection[str]) -> ClusterSnapshot:
        ours: dict[str, Resources] = {}
        for gang in held:
            for node_id, bundle in gang.bundles:
                ours[node_id] = ours.get(node_id, Resources()) + bundle
        nodes = []
        for node in self.nodes.values():
            free = Resources()
            if node.alive and node.node_id not in draining:
                free = self.free(node.node_id, seen=True).minimum(
                    node.total - ours.get(node.node_id, Resources()))
            nodes.append(NodeState(node.node_id, node.total, free, alive=node.alive,
                                   name=node.node_id))
        return ClusterSnapshot(tuple(nodes), tuple(held))

    def new_run(self, record: GangRecord, nodes: Sequence[str], attempt: int,
                on_member_ready: Callable[[MemberStatus], None]) -> GangRun:
        return MemoryRun(self, record.gang_id, record.spec, _programs(record), nodes,
                         on_member_ready)

    def leftovers(self, known: set[str]) -> MemoryLeftovers:
        return MemoryLeftovers(self)

    def budget(self, job_id: str) -> MemoryBudget | None:
        return self.budgets.get(job_id)

    def open_budget(self, job_id: str) -> MemoryBudget:
        """Let running gang `job_id` act as a job whose driver submits gangs (tests)."""
        self.budgets[job_id] = MemoryBudget(self, job_id)
        return self.budgets[job_id]

    def adopt(self, record: GangRecord, leftovers: Any) -> GangRun | None:
        members = self.members.get(record.gang_id, [])
        if (record.gang_id not in self.booked or len(members) != len(record.nodes)
                or any(m.dead for m in members)):
            return None
        run = MemoryRun(self, record.gang_id, record.spec, _programs(record), record.nodes,
                        lambda m: None)
        run.members = members
        return run

    async def fetch(self, results: list[Any]) -> list[Any]:
        return list(results)

    def restore_results(self, values: list[Any]) -> list[Any]:
        return list(values)

    def clear(self, gang_id: str) -> int:
        """Kill a gang's members and drop its booking; how many parts there were."""
        members = self.members.pop(gang_id, [])
        for member in members:
            member.dead = member.dead or "killed"
        return len(members) + (self.booked.pop(gang_id, None) is not None)


class MemoryBudget:
    """A job's budget without Ray (`control.ports.JobBudget`): the bundles a running gang
    booked, handed to the gangs placed inside it (their booking replaces the job's, as a
    job's holds make way for its gangs' placement groups on Ray). Opened by a test, for a
    gang standing in for a job (`MemoryCluster.open_budget`)."""

    def __init__(self, cluster: MemoryCluster, job_id: str):
        self._cluster = cluster
        self._job_id = job_id
        self._booked = list(cluster.booked[job_id])  # (node, bundle) per bundle
        self.bundles = tuple(b for _, b in self._booked)
        self.taken: dict[str, list[int]] = {}  # gang id -> bundle indices

    def never_fits(self, wanted: Sequence[Resources]) -> str | None:
        return never_fits(self.bundles, wanted)

    def take(self, gang_id: str, wanted: Sequence[Resources]) -> list[str] | None:
        chosen = take(self.bundles, [i for i in range(len(self.bundles))
                                     if i not in self._used()], wanted)
        if chosen is None:
            return None
        self.taken[gang_id] = chosen
        self._rebook()
        return [self._booked[i][0] for i in chosen]

    def give_back(self, gang_id: str) -> None:
        self.taken.pop(gang_id, None)
        self._rebook()

    def in_use(self) -> int:
        return len(self._used())

    def restore(self, gang_id: str, nodes: Sequence[str],
                bundles: Sequence[Resources]) -> None:
        """Nothing to learn again: this budget lives in the cluster, not in the scheduler
        process that restarted."""

    def _used(self) -> set[int]:
        return {i for indices in self.taken.values() for i in indices}

    def _rebook(self) -> None:
        if self._job_id in self._cluster.booked:  # not once the job let go
            used = self._used()
            self._cluster.booked[self._job_id] = [
                b for i, b in enumerate(self._booked) if i not in used]


class MemoryLeftovers:
    """Recovery's view: what runs the cluster still has, by gang id."""

    def __init__(self, cluster: MemoryCluster):
        self._cluster = cluster
        self._taken: set[str] = set()

    def take(self, gang_id: str) -> None:
        self._taken.add(gang_id)

    def clear(self, gang_id: str | None) -> int:
        return 0 if gang_id is None else self._cluster.clear(gang_id)

    def orphans(self, unfinished: set[str]) -> int:
        stale = (set(self._cluster.booked) | set(self._cluster.members)) - unfinished
        return sum(self._cluster.clear(g) for g in stale - self._taken)


def _programs(record: GangRecord) -> dict[str, MemoryProgram]:
    if record.kind == "deployment":  # a Serve app's replicas serve until it is undeployed
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
        self.members: list[_Member] = []
        self.extra: dict[str, tuple[str, Resources]] = {}  # surplus member -> its booking
        self._restarting = False  # `restart` under way: no members is not an outcome
        self._broken: MemberFailure | None = None  # a restart failed: the run fails

    async def reserve(self) -> None:
        """Book every bundle on its node once it fits there (a node that is not alive
        never fits), within the gang's reservation timeout."""
        cluster = self.cluster
        deadline = time.monotonic() + self.spec.reservation_timeout_s
        while True:
            need: dict[str, Resources] = {}
            for node, bundle in zip(self.nodes, self.spec.min_bundles):
                need[node] = need.get(node, Resources()) + bundle
            if all(cluster.nodes[n].alive and amount.fits_in(cluster.free(n))
                   for n, amount in need.items()):
                cluster.booked[self.gang_id] = list(zip(self.nodes, self.spec.min_bundles))
                return
            if time.monotonic() >= deadline:
                raise ReservationTimeout(
                    f"the reservation of gang {self.gang_id} was not ready within "
                    f"{self.spec.reservation_timeout_s:g}s")
            await asyncio.sleep(POLL_S)

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
        by_rank: list[_Member | None] = [None] * self.spec.world_size
        node_of = dict(zip((s.name for s in self.spec.min_slots), self.nodes))
        node_of.update((name, node) for name, (node, _) in self.extra.items())
        while roles:
            role = next(r for r in roles if set(r.after) <= started)
            roles.remove(role)
            program = self.programs.get(role.name, MemoryProgram())
            await asyncio.sleep(program.start_s)
            for slot in (s for s in slots if s.role == role.name):
                member = by_rank[slot.rank] = _Member(
                    self.gang_id, slot.rank, slot.role, slot.index, node_of[slot.name],
                    program)
                if program.fails_to_start:
                    raise MemberFailure(GangError(member=f"{slot.role}-{slot.index}",
                                                  rank=slot.rank, error_type="ValueError",
                                                  message="the constructor failed"))
                self.on_member_ready(MemberStatus(
                    role=slot.role, index=slot.index, rank=slot.rank,
                    actor_name=f"memory-{self.gang_id}-{slot.role}-{slot.index}",
                    node_id=member.node, ready_at=time.time()))
            started.add(role.name)
        self.members = [m for m in by_rank if m is not None]
        self.cluster.members[self.gang_id] = self.members

    async def run(self) -> list[Any]:
        now = self.cluster.clock()
        for member in self.members:
            member.released_at = now
        return await self._outcome()

    async def resume(self) -> list[Any]:
        now = self.cluster.clock()
        for member in self.members:
            if member.released_at is None:
                member.released_at = now
        return await self._outcome()

    async def _outcome(self) -> list[Any]:
        """Results in rank order once every body ended; the first failure raises."""
        while True:
            if self._broken is not None:
                raise self._broken
            now = self.cluster.clock()
            outcomes = [m.outcome(now) for m in self.members]
            for outcome in outcomes:
                if outcome is not None and outcome[0] == "error":
                    raise MemberFailure(outcome[1])
            if not self._restarting and all(o is not None for o in outcomes):
                return [o[1] for o in outcomes if o is not None]
            await asyncio.sleep(POLL_S)

    async def signal_preempt(self, grace_s: float,
                             members: Sequence[Any] | None = None) -> list[dict]:
        if not grace_s or grace_s <= 0:
            return []
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
        return replies

    async def wait_bodies(self, ranks: Sequence[int], timeout: float) -> None:
        deadline = time.monotonic() + max(0.0, timeout)
        members = [m for m in self.members if m.rank in set(ranks)]
        while time.monotonic() < deadline:
            now = self.cluster.clock()
            if all(m.outcome(now) is not None for m in members):
                return
            await asyncio.sleep(POLL_S)

    async def close(self) -> None:
        self.cluster.budgets.pop(self.gang_id, None)  # a job's budget ends with its run
        self.cluster.clear(self.gang_id)
        self.members = []
        self.extra = {}

    # Elastic gangs ----------------------------------------------------------------------
    async def add_members(self, members: Sequence[tuple[Any, str]]) -> list[str]:
        """Book each member's bundle on its node once it fits (within the reservation
        timeout), start them (their role's `start_s`) and release them (no resize hooks
        here: nothing goes wrong telling the others)."""
        await self.reserve_members(members)
        try:
            started = await self._start([slot for slot, _ in members])
        except BaseException:
            self._unbook(slot.name for slot, _ in members)
            raise
        self.members = sorted([*self.members, *started], key=lambda m: m.rank)
        self.cluster.members[self.gang_id] = self.members
        return []

    async def reserve_members(self, members: Sequence[tuple[Any, str]]) -> None:
        """Book each member's bundle on its node once it fits (within the reservation
        timeout)."""
        deadline = time.monotonic() + self.spec.reservation_timeout_s
        wanted = {slot.name: (node, self.spec.bundles[slot.rank])
                  for slot, node in members}
        while not self._fits(wanted):
            if time.monotonic() >= deadline:
                raise ReservationTimeout(f"members {', '.join(wanted)} of gang "
                                         f"{self.gang_id} were not reserved within "
                                         f"{self.spec.reservation_timeout_s:g}s")
            await asyncio.sleep(POLL_S)
        self.extra.update(wanted)
        self._rebook()

    async def restart(self, world: Sequence[Any],
                      stopped: Callable[[], None] | None = None) -> None:
        """Every member stops; `world` starts afresh (each body from its beginning: this
        cluster keeps no checkpoint) and is released at once."""
        names = {slot.name for slot in world}
        self._restarting, self.members = True, []
        self.cluster.members[self.gang_id] = self.members
        self._unbook(n for n in list(self.extra) if n not in names)
        if stopped is not None:
            stopped()
        try:  # as at the first start (role order), then released together
            await self._start_members(world)
        except MemberFailure as failure:
            self._broken = failure
            raise
        finally:
            self._restarting = False
        now = self.cluster.clock()
        for member in self.members:
            member.released_at = now

    async def _start(self, slots: Sequence[Any]) -> list[_Member]:
        """Start these surplus members (their role's `start_s`) on their booked nodes and
        release them; a constructor failing raises."""
        node_of = {name: node for name, (node, _) in self.extra.items()}
        started = []
        for slot in slots:
            program = self.programs.get(slot.role, MemoryProgram())
            await asyncio.sleep(program.start_s)
            if program.fails_to_start:
                raise MemberFailure(GangError(member=slot.name, rank=slot.rank,
                                              error_type="ValueError",
                                              message="the constructor failed"))
            started.append(_Member(self.gang_id, slot.rank, slot.role, slot.index,
                                   node_of[slot.name], program,
                                   released_at=self.cluster.clock()))
            self.on_member_ready(MemberStatus(
                role=slot.role, index=slot.index, rank=slot.rank,
                actor_name=f"memory-{self.gang_id}-{slot.role}-{slot.index}",
                node_id=node_of[slot.name], ready_at=time.time()))
        return started

    def _unbook(self, names: Iterable[str]) -> None:
        for name in list(names):
            self.extra.pop(name, None)
        self._rebook()

    async def remove_members(self, members: Sequence[Any]) -> list[str]:
        """Stop them (told and given their grace period before) and free their bundles."""
        names = {slot.name for slot in members}
        self.members = [m for m in self.members if f"{m.role}-{m.index}" not in names]
        self.cluster.members[self.gang_id] = self.members
        self._unbook(names)
        return []

    def _fits(self, wanted: dict[str, tuple[str, Resources]]) -> bool:
        need: dict[str, Resources] = {}
        for node, bundle in wanted.values():
            need[node] = need.get(node, Resources()) + bundle
        return all(self.cluster.nodes[n].alive and amount.fits_in(self.cluster.free(n))
                   for n, amount in need.items())

    def _rebook(self) -> None:
        if self.gang_id in self.cluster.booked:
            self.cluster.booked[self.gang_id] = [
                *zip(self.nodes, self.spec.min_bundles), *self.extra.values()]


def _reply(member: _Member, hooks: int, error: str | None, running: bool) -> dict:
    return {"member": f"{member.role}-{member.index}", "rank": member.rank, "hooks": hooks,
            "error": error, "running": running}
