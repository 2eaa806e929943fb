"""Taking a submission into the book: whether the gang may be queued at all (its elastic
roles are carried out for its kind and on this cluster; its shape can ever be admitted),
its record, its idempotency key, and its first write to the store, after which a cycle
may admit it. `ControlPlane`'s submit calls validate their input, then come here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from raygang.control import kinds
from raygang.control.config import SchedulerConfig
from raygang.control.errors import (
    ClusterUnreachable,
    DeploymentExistsError,
    StoreError,
    UnschedulableError,
)
from raygang.control.inside import Inside
from raygang.control.journal import Journal
from raygang.control.loop import SchedulingLoop
from raygang.control.ports import Cluster
from raygang.control.program import RoleProgram
from raygang.control.records import GangRecord
from raygang.control.registry import Registry
from raygang.control.status import GangEvent
from raygang.core.gang import GangState
from raygang.core.scale import never_hosted
from raygang.core.schedule import unschedulable_reason
from raygang.core.spec import GangSpec


M = TypeVar("M", bound=BaseModel)


def revalidated(value: object, model: type[M], call: str) -> M:
    """`value`, checked to be a `model` and validated again: a model that arrives pickled
    (a call to the Ray actor) was never validated here (pickle restores its fields as they
    were sent)."""
    if not isinstance(value, model):
        raise TypeError(f"{call}() takes a {model.__name__}, got {type(value).__name__}")
    return model.model_validate(value.model_dump())


def programs_checked(spec: GangSpec, programs: object) -> dict[str, RoleProgram]:
    """`programs` as a submit call takes them: a dict of role name -> RoleProgram with a
    program for every role of `spec`."""
    if not isinstance(programs, dict) or not all(
        isinstance(p, RoleProgram) for p in programs.values()
    ):
        raise TypeError("submit() takes programs as a dict of role name -> RoleProgram")
    missing = sorted({r.name for r in spec.roles} - set(programs))
    if missing:
        raise ValueError(f"roles without a program to run: {', '.join(missing)}")
    return dict(programs)


@dataclass(frozen=True)
class Submission:
    """What a submit call brings besides the spec: the kind's payload, and where it goes."""

    kind: str
    programs: dict[str, RoleProgram] = field(default_factory=dict)
    workload: Any = None  # its kind's payload (`control.kinds`)
    parent: str | None = None  # the job whose budget it is placed in (control/inside.py)


class Intake:
    def __init__(self, registry: Registry, journal: Journal, cluster: Cluster,
                 loop: SchedulingLoop, inside: Inside, config: Callable[[], SchedulerConfig],
                 clock: Callable[[], float], new_id: Callable[[int], str]):
        self._registry = registry
        self._journal = journal
        self._cluster = cluster
        self._loop = loop
        self._inside = inside
        self._config = config
        self._clock = clock
        self._new_id = new_id

    async def queue(self, spec: GangSpec, submission: Submission,
                    idempotency_key: str | None = None, fingerprint: str | None = None
                    ) -> str:
        """Queue the gang; its id once it is in the store. With an `idempotency_key` (and
        the `fingerprint` of what was submitted under it), a
        retry of the same submission (same `fingerprint`) gets the first one's id and
        queues nothing; the same key for another submission is an
        IdempotencyConflictError. Safe under concurrent retries: nothing awaits between
        the key's look-up and the gang entering the book, so the event loop runs them as
        one step. (What may refuse it is checked before: that may read the cluster.)"""
        self._refuse_elastic(spec, submission.kind, submission.parent)
        if submission.parent is None:  # a gang inside a job was checked against its budget
            await self._refuse_never_admitted(spec, submission.kind)
        # After the last await: two deploys of one name at once cannot both get past it.
        self.refuse_existing(spec, submission.kind)
        if idempotency_key is None or fingerprint is None:
            return await self.saved(self._enqueue(spec, submission))
        gang_id = self._registry.keys.submit(
            idempotency_key, fingerprint, self._clock(),
            lambda: self._enqueue(spec, submission, idempotency_key, fingerprint).gang_id)
        record = self._registry.find(gang_id)
        return gang_id if record is None else await self.saved(record)

    def _enqueue(self, spec: GangSpec, submission: Submission,
                 idempotency_key: str | None = None, fingerprint: str | None = None
                 ) -> GangRecord:
        """Add the gang to the book (in this step, with no await: see `queue`); it is
        admitted only once `saved` has written it to the store."""
        kind, parent = submission.kind, submission.parent
        cls = self._config().policy.priority_class(spec)
        now = self._clock()
        record = GangRecord(
            gang_id=f"{spec.name}-{self._new_id(32)}", spec=spec,
            programs=dict(submission.programs), priority=cls.value,
            seq=self._registry.next_seq(), submitted_at=now, preemptible=cls.preemptible,
            min_runtime_s=cls.min_runtime_s, kind=kind, workload=submission.workload,
            parent=parent,
            idempotency_key=idempotency_key, fingerprint=fingerprint,
        )
        record.events.append(
            GangEvent(at=now, from_state=None, to_state=GangState.PENDING, reason="submitted")
        )
        self._registry.add(record)
        self._loop.wake()
        return record

    def refuse_existing(self, spec: GangSpec, kind: str) -> None:
        """A gang known by its name (a deployment) whose name is queued or running."""
        if not kinds.of(kind).by_name:
            return
        current = self._registry.deployment(spec.name)
        if current is not None and not current.state.finished:
            raise DeploymentExistsError(
                f"{kind} {spec.name!r} exists ({current.state.value}); undeploy it first")

    def _refuse_elastic(self, spec: GangSpec, kind: str, parent: str | None) -> None:
        """Elastic roles where they are not carried out are refused, naming the role."""
        resizable = kinds.of(kind).elastic  # (an unknown kind raises, naming the known)
        if not spec.elastic:  # the core decides them (core/elastic.py); runs resize where
            return  # the cluster says they can
        resizes = self._cluster.resizes
        where = ("inside a job" if parent is not None
                 else f"for a {kind}" if not resizable
                 else None if spec.resize in resizes
                 else "on this cluster" if not resizes
                 else f"with resize {spec.resize.value!r} on this cluster")
        if where is not None:
            role = next(r for r in spec.roles if r.elastic)
            raise ValueError(
                f"roles[{spec.roles.index(role)}].replicas: elastic roles (replicas="
                f"({role.minimum}, {role.replicas})) are not run yet {where}: give a "
                "fixed number of replicas")

    async def _refuse_never_admitted(self, spec: GangSpec, kind: str) -> None:
        """A gang no node (nor any node the cluster can add) could ever hold is refused.
        A recent view may accept; only a fresh one may refuse (a node may just have
        joined), and none while the cluster does not answer (its last view may be old)."""
        policy, loop = self._config().policy, self._loop
        try:
            seen = await loop.view()
        except ClusterUnreachable:
            return  # never seen: nothing to refuse it on (a cycle says why it waits)
        reason = unschedulable_reason(spec, seen, policy, loop.memory)
        if reason:
            fresh = await loop.view(max_age=0)
            reason = (None if loop.sight.unreachable is not None
                      else unschedulable_reason(spec, fresh, policy, loop.memory))
        scaling = loop.scaling
        if reason and scaling is not None and not policy.queue_tree.problem(spec):
            # Nodes the cluster can add count too; until their groups are read, accept
            # (the gang's status then says if no group can ever host it).
            never = never_hosted(spec, scaling.groups) if scaling.groups else None
            reason = never and f"{reason}; and no worker group can ever host it: {never}"
        if reason:
            raise UnschedulableError(f"{kind} {spec.name!r} can never be admitted: {reason}")

    async def saved(self, record: GangRecord) -> str:
        """Its id once the gang is in the store (then a cycle may admit it). A store that
        does not take it refuses it, and says so if the GCS is known to be down (the
        default store is the GCS's: a submission waits for it, up to the store's timeout,
        and is never acknowledged before it is stored)."""
        try:
            gang_id = await self._journal.saved(record, self._registry.forget_unsaved)
        except StoreError as error:
            unreachable = self._loop.sight.unreachable
            if unreachable is None:
                raise
            raise StoreError(f"{error}; Ray's GCS does not answer (since {unreachable[0]:.0f}: "
                             f"{unreachable[1]}): submit it again once it does") from None
        self._registry.changed(record)  # stored: now it may be admitted
        if record.parent is not None:
            self._inside.place()
        else:
            self._loop.wake()
        return gang_id
