"""The scheduler's book of gangs: one mutable record per gang, with its history."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from raygang.core.gang import GangState, PendingGang
from raygang.core.lifecycle import Life, Outcome, check_move
from raygang.core.plan import WaitCode
from raygang.core.resources import Resources
from raygang.core.snapshot import Elastic, PlacedGang
from raygang.core.spec import GangSpec
from raygang.control import kinds
from raygang.control.program import RoleProgram
from raygang.control.status import GangError, GangEvent, GangStatus, MemberStatus

MAX_EVENTS = 500

@dataclass
class GangRecord:
    gang_id: str
    spec: GangSpec
    programs: dict[str, RoleProgram]
    priority: int
    seq: int
    submitted_at: float
    preemptible: bool = True
    min_runtime_s: float = 0.0
    kind: str = "gang"  # a name in `control.kinds`: "deployment" (a Serve application), ...
    deployment: Any = None  # its DeploymentSpec, for a deployment
    # What a hand-off gang's library needs: a job's JobSpec; a Train run's {"controller":
    # actor id, "group": its adopted placement group id}.
    workload: Any = None
    ray_job_id: str | None = None  # a job's Ray job (its last attempt's)
    # The job whose budget this gang is placed inside (its driver submitted it): such a gang
    # is never in a queue's line nor in the book (its job books the capacity), see
    # control/inside.py.
    parent: str | None = None
    app: Any = None  # the Serve application (or import path) of a deployment
    state: GangState = GangState.PENDING
    reason: str | None = None
    wait_code: WaitCode | None = None
    nodes: tuple[str, ...] = ()  # one per bundle of its minimum (all, for a rigid gang)
    # An elastic gang's members beyond its minimum: member name -> node, those it holds
    # (growing or running) and those being removed (core/elastic.py).
    surplus: dict[str, str] = field(default_factory=dict)
    leaving: dict[str, str] = field(default_factory=dict)
    members: list[MemberStatus] = field(default_factory=list)
    restarts: int = 0
    preemptions: int = 0
    preempted_by: str | None = None  # "deployment llm": shown until it runs again
    stopping: str | None = None  # set while being preempted: the reason it will requeue with
    cancel_reason: str | None = None  # set by cancel() before the gang's task is cancelled
    position: int | None = None  # in its queue, as of the last cycle
    wait_message: str | None = None  # why it waits, as of the last cycle
    scale_note: str | None = None  # the nodes it waits for, as of the last scale step
    error: GangError | None = None
    result_refs: list[Any] | None = None
    started_at: float | None = None
    finished_at: float | None = None
    events: list[GangEvent] = field(default_factory=list)
    idempotency_key: str | None = None  # the submission's, remembered across restarts
    fingerprint: str | None = None  # what the key was used for (runtime.idempotency)
    saved: bool = False  # its submission is in the store: only then may it be admitted
    not_before: float | None = None  # restart backoff: not admitted before this time
    results_kept: bool = False  # its results are in the store (see StateConfig)
    saving: Any = field(default=None, repr=False)  # the future of that first write
    on_change: Callable[[GangRecord], None] | None = field(default=None, repr=False)
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)  # RUNNING or finished
    pending_since: float | None = None  # when it last became PENDING (None: submitted_at)
    grow_reason: str | None = None  # why a running elastic gang grows no further (last cycle)
    _pending: PendingGang | None = field(default=None, repr=False, compare=False)
    _placed: tuple[tuple[object, ...], PlacedGang] | None = field(
        default=None, repr=False, compare=False)

    def life(self) -> Life:
        """What the lifecycle's decisions read of this gang."""
        return Life(self.state, self.restarts, self.spec.max_restarts, self.stopping,
                    self.cancel_reason, kinds.of(self.kind).phases)

    def apply(self, outcome: Outcome, now: float) -> None:
        """Carry out a lifecycle decision: its moves in order (one to the state the gang is
        in is an event of its history only), and what it says about restarts and time."""
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
            self.stopping = outcome.stopping
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
            if member in self.surplus:
                self.surplus[member] = node
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
            self.position = None
            self.wait_message = self.scale_note = None
        if to is GangState.PENDING:
            self.pending_since, self._pending = now, None  # its view says since when
        if to is GangState.PREEMPTED:
            self.preemptions += 1
        if to is GangState.RUNNING:
            self.started_at = now
            self.preempted_by = None
            self.released.set()
        if to.finished:
            self.finished_at = now
            self.programs = {}  # user code and arguments are not needed any more
            self.app = None
            self.finished.set()
            self.released.set()
        self.changed()

    def changed(self) -> None:
        """Tell the owner (the plane: its registry and journal) that the gang changed."""
        if self.on_change is not None:
            self.on_change(self)

    def _trim_events(self) -> None:
        if len(self.events) > MAX_EVENTS:  # e.g. requeued every reservation timeout for days
            del self.events[1 : len(self.events) - MAX_EVENTS + 1]  # keep "submitted"

    def requeue_after_restart(self, reason: str, now: float) -> None:
        """Back to PENDING from wherever a restarted scheduler found it (a move no running
        scheduler makes, hence not in the table of moves)."""
        self.events.append(GangEvent(at=now, from_state=self.state, to_state=GangState.PENDING,
                                     reason=reason))
        self.state, self.reason, self.nodes, self.members = GangState.PENDING, reason, (), []
        self.surplus, self.leaving = {}, {}
        self.changed()

    def set_waiting(self, code: WaitCode, message: str, position: int | None) -> None:
        self.wait_code = code
        self.position = position
        self.wait_message = message
        self._explain()

    def set_scale_note(self, note: str | None) -> None:
        self.scale_note = note
        if self.state is GangState.PENDING and self.wait_message is not None:
            self._explain()

    def _explain(self) -> None:
        # A preempted gang keeps saying so (and by whom) until it runs again; the nodes
        # it waits for come before the cycle's reason, which says what is short now.
        parts = [self.preempted_by, self.scale_note, self.wait_message]
        self.reason = "; ".join(p for p in parts if p)

    @property
    def display(self) -> str:
        return kinds.of(self.kind).display(self.gang_id, self.spec.name)

    def pending_view(self) -> PendingGang:
        """The gang as a cycle sees it while it waits (made once: what it holds never
        changes)."""
        if self._pending is None:
            since = self.submitted_at if self.pending_since is None else self.pending_since
            self._pending = PendingGang(self.gang_id, self.spec, self.priority, self.seq,
                                        self.preemptible, since)
        return self._pending

    def placed_view(self) -> PlacedGang:
        """The gang as a cycle sees it while it holds capacity (made again only when what
        it reads changed: every cycle reads every held gang)."""
        key = (self.state, self.stopping, self.nodes, self.started_at,
               tuple(self.surplus.items()), tuple(self.leaving.items()))
        if self._placed is None or self._placed[0] != key:
            spec, kind = self.spec, kinds.of(self.kind)
            bundles = tuple(zip(self.nodes, spec.min_bundles))
            elastic = None
            if spec.elastic:
                extra = (*self.surplus.items(), *self.leaving.items())
                bundles += tuple((node, spec.bundle_of(name)) for name, node in extra)
                elastic = Elastic(spec.strategy, tuple(self.surplus), tuple(self.leaving),
                                  tuple((slot.name, spec.bundles[slot.rank])
                                        for slot in spec.surplus_slots
                                        if slot.name not in self.surplus
                                        and slot.name not in self.leaving),
                                  within=tuple(sorted(set(self.nodes)))
                                  if kind.keeps_its_nodes else None)
            unseen = self.state is GangState.ADMITTED or (
                self.state is GangState.STARTING and kind.hands_off_at_start)
            self._placed = (key, PlacedGang(
                self.gang_id, self.priority, bundles,
                queue=spec.queue, preemptible=self.preemptible,
                running_since=self.started_at if self.state is GangState.RUNNING else None,
                min_runtime_s=self.min_runtime_s,
                # Being preempted, or ended and being torn down: leaving, not a victim.
                draining=self.stopping is not None or not self.state.holds_resources,
                checkpoint_s=spec.checkpoint_interval_s, elastic=elastic, unseen=unseen,
            ))
        return self._placed[1]

    @property
    def held_total(self) -> Resources:
        """What it holds while admitted: its minimum plus the surplus members it holds or
        is removing (a rigid gang: all of it)."""
        if not self.spec.elastic:
            return self.spec.total
        total = self.spec.min_total
        for name in (*self.surplus, *self.leaving):
            total = total + self.spec.bundle_of(name)
        return total

    @property
    def size(self) -> int:
        """Members it runs or starts now (its minimum plus the surplus it holds)."""
        return len(self.nodes) + len(self.surplus)

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
            grow_reason=self.grow_reason if self.state is GangState.RUNNING else None,
            members=sorted(self.members, key=lambda m: m.rank),
            restarts=self.restarts,
            preemptions=self.preemptions,
            queue_position=self.position,
            kind=self.kind,
            ray_job_id=self.ray_job_id,
            entrypoint=getattr(self.workload, "entrypoint", None),
            parent=self.parent,
            error=self.error,
            submitted_at=self.submitted_at,
            started_at=self.started_at,
            finished_at=self.finished_at,
            events=list(self.events),
        )
