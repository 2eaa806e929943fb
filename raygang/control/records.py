"""The scheduler's book of gangs: one mutable record per gang, with its history."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from raygang.core.gang import GangState, PendingGang
from raygang.core.lifecycle import Life, Outcome, check_move
from raygang.core.plan import WaitCode
from raygang.core.ratio import role_reasons
from raygang.core.resources import Resources
from raygang.core.snapshot import Elastic, PlacedGang
from raygang.core.spec import GangSpec
from raygang.control import kinds
from raygang.control.program import RoleProgram
from raygang.control.status import GangError, GangEvent, GangStatus, MemberStatus, RoleSize

MAX_EVENTS = 500
# What `GangRecord.placed_view` reads that may change while a gang is held (its spec,
# priority, class and kind do not): setting one of them calls `Live.watch`.
_VIEWED = frozenset({"state", "nodes", "started_at", "parent"})
_LIVE_VIEWED = frozenset({"stopping", "surplus", "leaving"})


@dataclass
class Wait:
    """Why the gang waits and where, as the last cycle (and scale step) found it: shown in
    its status, never stored (the next cycle finds it again)."""

    code: WaitCode | None = None
    position: int | None = None  # in its queue
    message: str | None = None  # why it waits
    scale_note: str | None = None  # the nodes it waits for
    grow_reason: str | None = None  # a running elastic gang: why it grows no further


@dataclass
class Live:
    """What this scheduler process holds of the gang beyond its stored record: rebuilt
    from the cluster when a restarted scheduler adopts it (its surplus members), or not
    needed after a restart (the rest)."""

    # An elastic gang's members beyond its minimum: member name -> node, those it holds
    # (growing or running) and those being removed (core/elastic.py).
    surplus: dict[str, str] = field(default_factory=dict)
    leaving: dict[str, str] = field(default_factory=dict)
    stopping: str | None = None  # set while being preempted: the reason it will requeue with
    result_refs: list[Any] | None = None  # what its run returned (on Ray: object refs)
    saved: bool = False  # its submission is in the store: only then may it be admitted
    saving: Any = field(default=None, repr=False)  # the future of that first write
    finished: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    released: asyncio.Event = field(default_factory=asyncio.Event, repr=False)  # RUNNING or
    # finished
    pending_since: float | None = None  # when it last became PENDING (None: submitted)
    pending: PendingGang | None = field(default=None, repr=False)  # pending_view, made once
    # placed_view, made again when what it reads changed: (what it read, the view)
    placed: tuple[tuple[object, ...], PlacedGang] | None = field(default=None, repr=False)
    # Called when something `placed_view` reads is set anew (the fleet that drives the
    # gang sets it: it asks again only the gangs that changed, not every held gang every
    # cycle). In-place changes of `surplus` and `leaving` do not call it: an elastic
    # gang's view is asked every time.
    watch: Callable[[], object] | None = field(default=None, repr=False, compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _LIVE_VIEWED and (watch := self.__dict__.get("watch")) is not None:
            watch()


@dataclass
class GangRecord:
    """One gang in the book: what is stored (every field but `wait` and `live`:
    `control/durable.py`), why it waits (`wait`) and what only this process holds of it
    (`live`). Whoever changes its state tells the plane (`ControlPlane.changed`), which
    re-indexes it and journals it."""

    gang_id: str
    spec: GangSpec
    programs: dict[str, RoleProgram]
    priority: int
    seq: int
    submitted_at: float
    preemptible: bool = True
    min_runtime_s: float = 0.0
    kind: str = "gang"  # a name in `control.kinds`: "deployment" (a Serve application), ...
    # What its runs need besides its spec, as its kind has it (`control.kinds`): a
    # deployment's spec and app, a job's spec and Ray job, a Train run's controller.
    workload: Any = None
    # The job whose budget this gang is placed inside (its driver submitted it): such a gang
    # is never in a queue's line nor in the book (its job books the capacity), see
    # control/inside.py.
    parent: str | None = None
    state: GangState = GangState.PENDING
    reason: str | None = None
    nodes: tuple[str, ...] = ()  # one per bundle of its minimum (all, for a rigid gang)
    members: list[MemberStatus] = field(default_factory=list)
    restarts: int = 0
    preemptions: int = 0
    preempted_by: str | None = None  # "deployment llm": shown until it runs again
    cancel_reason: str | None = None  # set by cancel() before the gang's task is cancelled
    error: GangError | None = None
    started_at: float | None = None
    finished_at: float | None = None
    events: list[GangEvent] = field(default_factory=list)
    idempotency_key: str | None = None  # the submission's, remembered across restarts
    fingerprint: str | None = None  # what the key was used for (control/idempotency.py)
    not_before: float | None = None  # restart backoff: not admitted before this time
    results_kept: bool = False  # its results are in the store (see StateConfig)
    wait: Wait = field(default_factory=Wait, repr=False, compare=False)
    live: Live = field(default_factory=Live, repr=False, compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _VIEWED and (live := self.__dict__.get("live")) is not None \
                and (watch := live.watch) is not None:
            watch()  # what placed_view reads (see Live.watch)

    def life(self) -> Life:
        """What the lifecycle's decisions read of this gang."""
        return Life(self.state, self.restarts, self.spec.max_restarts, self.live.stopping,
                    self.cancel_reason, kinds.of(self.kind).phases, self.spec.fence_s)

    def apply(self, outcome: Outcome, now: float) -> None:
        """Carry out a lifecycle decision: its moves in order (one to the state the gang is
        in is an event of its history only), and what it says about restarts and time.
        The caller then tells the plane (`ControlPlane.changed`)."""
        if outcome.requeued_after_restart:
            first, *rest = outcome.moves
            self.requeue_after_restart(first.reason, now)
        else:
            rest = list(outcome.moves)
        if outcome.restarts is not None:
            self.restarts = outcome.restarts
        if outcome.not_before is not None:
            self.not_before = outcome.not_before
        if outcome.stopping is not None:
            self.live.stopping = outcome.stopping
        if outcome.preempted_by is not None:
            self.preempted_by = outcome.preempted_by
        for move in rest:
            if move.to is self.state:
                self.note(move.reason, now)
            else:
                self.move(move.to, move.reason, now)

    def note(self, reason: str, now: float) -> None:
        """An event in the gang's history that changes nothing else."""
        self.events.append(GangEvent(at=now, from_state=self.state, to_state=self.state,
                                     reason=reason))
        self._trim_events()

    def rebook(self, moves: Mapping[str, str]) -> None:
        """Book these members (name -> node) where they are: a library that places its
        own interchangeable members (Serve's replicas) put them elsewhere than planned."""
        names = [slot.name for slot in self.spec.min_slots]
        nodes = list(self.nodes)
        for member, node in moves.items():
            if member in self.live.surplus:
                self.live.surplus[member] = node
            elif member in names and names.index(member) < len(nodes):
                nodes[names.index(member)] = node
        self.nodes = tuple(nodes)

    def move(self, to: GangState, reason: str, now: float) -> None:
        check_move(self.gang_id, self.state, to)
        self.events.append(GangEvent(at=now, from_state=self.state, to_state=to, reason=reason))
        self._trim_events()
        self.state = to
        self.reason = reason or None
        if to is not GangState.PENDING:
            self.wait.position = self.wait.message = self.wait.scale_note = None
        if to is GangState.PENDING:
            self.live.pending_since, self.live.pending = now, None  # its view says since when
            self.live.released.clear()  # a waiter for RUNNING waits for the next attempt
        if to is GangState.PREEMPTED:
            self.preemptions += 1
        if to is GangState.RUNNING:
            self.started_at = now
            self.preempted_by = None
            self.live.released.set()
        if to.finished:
            self.finished_at = now
            self.programs = {}  # user code and arguments are not needed any more
            self.workload = kinds.of(self.kind).shed(self.workload)
            self.live.finished.set()
            self.live.released.set()

    def _trim_events(self) -> None:
        if len(self.events) > MAX_EVENTS:  # e.g. requeued every reservation timeout for days
            del self.events[1 : len(self.events) - MAX_EVENTS + 1]  # keep "submitted"

    def requeue_after_restart(self, reason: str, now: float) -> None:
        """Back to PENDING from wherever a restarted scheduler found it (a move no running
        scheduler makes, hence not in the table of moves)."""
        self.events.append(GangEvent(at=now, from_state=self.state, to_state=GangState.PENDING,
                                     reason=reason))
        self.state, self.reason, self.nodes, self.members = GangState.PENDING, reason, (), []
        self.live.surplus, self.live.leaving = {}, {}

    def set_waiting(self, code: WaitCode, message: str, position: int | None) -> None:
        self.wait.code = code
        self.wait.position = position
        self.wait.message = message
        self._explain()

    def set_scale_note(self, note: str | None) -> None:
        self.wait.scale_note = note
        if self.state is GangState.PENDING and self.wait.message is not None:
            self._explain()

    def _explain(self) -> None:
        # A preempted gang keeps saying so (and by whom) until it runs again; the nodes
        # it waits for come before the cycle's reason, which says what is short now.
        parts = [self.preempted_by, self.wait.scale_note, self.wait.message]
        self.reason = "; ".join(p for p in parts if p)

    @property
    def display(self) -> str:
        return kinds.of(self.kind).display(self.gang_id, self.spec.name)

    def pending_view(self) -> PendingGang:
        """The gang as a cycle sees it while it waits (made once: what it holds never
        changes)."""
        if self.live.pending is None:
            since = self.live.pending_since
            since = self.submitted_at if since is None else since
            self.live.pending = PendingGang(self.gang_id, self.spec, self.priority, self.seq,
                                        self.preemptible, since)
        return self.live.pending

    def placed_view(self) -> PlacedGang:
        """The gang as a cycle sees it while it holds capacity (made again only when what
        it reads changed: every cycle reads every held gang)."""
        live = self.live
        surplus, leaving = live.surplus, live.leaving  # empty but for elastic gangs
        placed = live.placed
        if placed is not None and not surplus and not leaving:  # the same objects as when
            was = placed[0]  # it was made: the same key (every cycle asks every held gang)
            if (was[0] is self.state and was[1] is live.stopping and was[2] is self.nodes
                    and was[3] == self.started_at and not was[4] and not was[5]):
                return placed[1]
        key = (self.state, live.stopping, self.nodes, self.started_at,
               tuple(surplus.items()) if surplus else (),
               tuple(leaving.items()) if leaving else ())
        if live.placed is None or live.placed[0] != key:
            spec, kind = self.spec, kinds.of(self.kind)
            bundles = tuple(zip(self.nodes, spec.min_bundles))
            elastic = None
            if spec.elastic:
                extra = (*self.live.surplus.items(), *self.live.leaving.items())
                bundles += tuple((node, spec.bundle_of(name)) for name, node in extra)
                elastic = Elastic(spec.strategy, tuple(self.live.surplus), tuple(self.live.leaving),
                                  tuple((slot.name, spec.bundles[slot.rank])
                                        for slot in spec.surplus_slots
                                        if slot.name not in self.live.surplus
                                        and slot.name not in self.live.leaving),
                                  within=tuple(sorted(set(self.nodes)))
                                  if kind.keeps_its_nodes else None, steps=spec.ratio_steps,
                                  roles_within=self._roles_within() if kind.keeps_its_nodes
                                  and len(spec.roles) > 1 else ())
            unseen = self.state is GangState.ADMITTED or (
                self.state is GangState.STARTING and kind.hands_off_at_start)
            live.placed = (key, PlacedGang(
                self.gang_id, self.priority, bundles,
                queue=spec.queue, preemptible=self.preemptible,
                running_since=self.started_at if self.state is GangState.RUNNING else None,
                min_runtime_s=self.min_runtime_s,
                # Being preempted, or ended and being torn down: leaving, not a victim.
                draining=self.live.stopping is not None or not self.state.holds_resources,
                checkpoint_s=spec.checkpoint_interval_s, elastic=elastic, unseen=unseen,
            ))
        return live.placed[1]

    def _roles_within(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Per role, the nodes of its minimum (a deployment of an application grows on
        them only: Serve's node selector of each deployment is its role's nodes)."""
        by_role: dict[str, set[str]] = {}
        for slot, node in zip(self.spec.min_slots, self.nodes):
            by_role.setdefault(slot.role, set()).add(node)
        return tuple((role, tuple(sorted(nodes))) for role, nodes in by_role.items())

    @property
    def held_total(self) -> Resources:
        """What it holds while admitted: its minimum plus the surplus members it holds or
        is removing (a rigid gang: all of it)."""
        if not self.spec.elastic:
            return self.spec.total
        total = self.spec.min_total
        for name in (*self.live.surplus, *self.live.leaving):
            total = total + self.spec.bundle_of(name)
        return total

    @property
    def size(self) -> int:
        """Members it runs or starts now (its minimum plus the surplus it holds)."""
        return len(self.nodes) + len(self.live.surplus)

    def status(self) -> GangStatus:
        return GangStatus(
            gang_id=self.gang_id,
            name=self.spec.name,
            queue=self.spec.queue,
            priority=self.priority,
            state=self.state,
            reason=self.reason,
            world_size=(self.size if self.state.holds_resources else len(self.spec.min_slots)),
            min_size=len(self.spec.min_slots) if self.spec.elastic else None,
            max_size=self.spec.world_size if self.spec.elastic else None,
            grow_reason=self.wait.grow_reason if self.state is GangState.RUNNING else None,
            roles=self.role_sizes(),
            members=sorted(self.members, key=lambda m: m.rank),
            restarts=self.restarts,
            preemptions=self.preemptions,
            queue_position=self.wait.position,
            kind=self.kind,
            **kinds.of(self.kind).shown(self.workload),
            parent=self.parent,
            error=self.error,
            submitted_at=self.submitted_at,
            started_at=self.started_at,
            finished_at=self.finished_at,
            events=list(self.events),
        )

    def role_sizes(self) -> list[RoleSize]:
        """An elastic gang's roles: the members each runs now (pending: at its minimum),
        its bounds and step, and, while it runs, why it is not larger (core/ratio.py)."""
        spec = self.spec
        if not spec.elastic:
            return []
        held = {s.name for s in spec.min_slots}
        if self.state.holds_resources:
            held |= set(self.live.surplus)
        role_of = {s.name: s.role for s in spec.slots}
        size = {r.name: sum(role_of[m] == r.name for m in held) for r in spec.roles}
        why = role_reasons(spec.surplus_units, held, role_of,
                           {r.name: r.replicas for r in spec.roles}, size,
                           self.wait.grow_reason) if self.state is GangState.RUNNING else {}
        step = spec.ratio or {}
        return [RoleSize(role=r.name, size=size[r.name], min_size=r.minimum,
                         max_size=r.replicas, step=step.get(r.name, 1),
                         grow_reason=why.get(r.name)) for r in spec.roles]
