"""One scheduling cycle's inputs as a file, to decide it again offline.

A cycle is a pure function of four inputs (DESIGN.md): the cluster snapshot, the backlog
(each queue's pending gangs, in the order the cycle reads them), the policy and `now`.
`dump_cycle` writes them as JSON-able data, with the plan the scheduler made of them;
`load_cycle` reads such data back into the same core objects, checked field by field
(pydantic, at the edge: a bad or foreign file is a `CycleDumpError` naming the field),
and `CycleDump.replay` runs `core.schedule` on them again. `raygang sim --replay-cycle`
does that with a dump taken from a running scheduler (`GET /v1/debug/cycle`).

The file's format is its own, versioned by `format`: the snapshot and backlog classes
may change without old dumps reading as something else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, PlainSerializer, PlainValidator, ValidationError

from raygang.core.backlog import Backlog
from raygang.core.config import PolicyConfig
from raygang.core.gang import PendingGang
from raygang.core.plan import Plan
from raygang.core.plan_data import first_difference, plan_data
from raygang.core.resources import Resources
from raygang.core.schedule import schedule
from raygang.core.snapshot import ClusterSnapshot, Elastic, NodeState, PlacedGang
from raygang.core.spec import GangSpec, Strategy, describe_errors
from raygang.core.usage import UsageView

FORMAT = "raygang.cycle/1"
# Preemption settings newer than the format, and what a dump without one decided by: the
# fixed delay and minimum runtime alone (the default trades since 2026-12-02), and no wait
# for a victim's checkpoint (the default waits since 2026-12-03)
PREEMPTION_BEFORE = {"reclaim_trade_ratio": None, "reclaim_checkpoint_ratio": None}


class CycleDumpError(ValueError):
    """A file that is not a cycle dump this raygang reads; the message names the field."""


# A node's free may be negative (booked beyond its total): read back as it was written.
_Signed = Annotated[Resources, PlainValidator(lambda v: _signed(v)),
                    PlainSerializer(lambda r: r.to_dict(), return_type=dict)]


def _signed(value: Any) -> Resources:
    if isinstance(value, Resources):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping of resource name to amount, got "
                         f"{type(value).__name__}")
    return Resources.signed(value)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NodeData(_Model):
    node_id: str
    total: Resources
    free: _Signed
    labels: dict[str, str] = {}
    alive: bool = True
    name: str = ""

    @classmethod
    def of(cls, node: NodeState) -> NodeData:
        return cls(node_id=node.node_id, total=node.total, free=node.free,
                   labels=dict(node.labels), alive=node.alive, name=node.name)

    def node(self) -> NodeState:
        return NodeState(self.node_id, self.total, self.free, MappingProxyType(self.labels),
                         self.alive, self.name)


class ElasticData(_Model):
    strategy: Strategy
    surplus: tuple[str, ...] = ()
    leaving: tuple[str, ...] = ()
    missing: tuple[tuple[str, Resources], ...] = ()
    within: tuple[str, ...] | None = None
    steps: tuple[tuple[str, ...], ...] = ()
    roles_within: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def of(cls, elastic: Elastic) -> ElasticData:
        return cls(strategy=elastic.strategy, surplus=elastic.surplus, leaving=elastic.leaving,
                   missing=elastic.missing, within=elastic.within, steps=elastic.steps,
                   roles_within=elastic.roles_within)

    def elastic(self) -> Elastic:
        return Elastic(self.strategy, self.surplus, self.leaving, self.missing, self.within,
                       self.steps, self.roles_within)


class PlacedData(_Model):
    gang_id: str
    priority: int
    bundles: tuple[tuple[str, Resources], ...]
    queue: str = "default"
    preemptible: bool = True
    running_since: float | None = None
    min_runtime_s: float = 0.0
    draining: bool = False
    checkpoint_s: float | None = None
    elastic: ElasticData | None = None
    of: str | None = None
    unseen: bool = False

    @classmethod
    def of_gang(cls, gang: PlacedGang) -> PlacedData:
        return cls(gang_id=gang.gang_id, priority=gang.priority, bundles=gang.bundles,
                   queue=gang.queue, preemptible=gang.preemptible,
                   running_since=gang.running_since, min_runtime_s=gang.min_runtime_s,
                   draining=gang.draining, checkpoint_s=gang.checkpoint_s,
                   elastic=None if gang.elastic is None else ElasticData.of(gang.elastic),
                   of=gang.of, unseen=gang.unseen)

    def gang(self) -> PlacedGang:
        return PlacedGang(self.gang_id, self.priority, self.bundles, self.queue,
                          self.preemptible, self.running_since, self.min_runtime_s,
                          self.draining, self.checkpoint_s,
                          None if self.elastic is None else self.elastic.elastic(), self.of,
                          self.unseen)


class PendingData(_Model):
    gang_id: str
    spec: GangSpec
    priority: int
    seq: int
    preemptible: bool = True
    pending_since: float | None = None

    @classmethod
    def of(cls, gang: PendingGang) -> PendingData:
        return cls(gang_id=gang.gang_id, spec=gang.spec, priority=gang.priority, seq=gang.seq,
                   preemptible=gang.preemptible, pending_since=gang.pending_since)

    def gang(self) -> PendingGang:
        return PendingGang(self.gang_id, self.spec, self.priority, self.seq, self.preemptible,
                           self.pending_since)


class UsageData(_Model):
    """`core.usage.UsageView`: per leaf queue, resource-seconds over the window."""

    used: dict[str, dict[str, float]] = {}
    capacity: dict[str, float] = {}


class SnapshotData(_Model):
    nodes: tuple[NodeData, ...]
    placed: tuple[PlacedData, ...] = ()
    usage: UsageData | None = None  # absent in dumps of a cycle without usage over time


class CycleDump(_Model):
    """What one cycle decided on, and (`plan`, if recorded) what it decided: plan data
    as `core.plan_data` writes them; or `error`, if the cycle failed. `backlog`: queue ->
    its pending gangs, in the order the cycle read them."""

    format: str
    now: float
    config: PolicyConfig
    snapshot: SnapshotData
    backlog: dict[str, tuple[PendingData, ...]]
    plan: dict[str, Any] | None = None
    error: str | None = None

    def cluster_snapshot(self) -> ClusterSnapshot:
        usage = self.snapshot.usage
        return ClusterSnapshot(tuple(n.node() for n in self.snapshot.nodes),
                               tuple(g.gang() for g in self.snapshot.placed),
                               None if usage is None else UsageView(usage.used, usage.capacity))

    def pending(self) -> Backlog:
        """The backlog as the cycle read it: each line in its recorded order (not sorted
        again), what each queue asks for in all worked out from it."""
        lines: dict[str, Sequence[PendingGang]] = {}
        totals: dict[str, dict[Resources, int]] = {}
        by_id: dict[str, PendingGang] = {}
        declared: dict[str, int] = {}
        for queue, line in self.backlog.items():
            gangs = lines[queue] = [g.gang() for g in line]
            counts = totals[queue] = {}
            for gang in gangs:
                counts[gang.total] = counts.get(gang.total, 0) + 1
                by_id[gang.gang_id] = gang
                if gang.spec.max_runtime_s is not None:
                    declared[queue] = declared.get(queue, 0) + 1
        return Backlog(lines, totals, by_id.get, declared)

    def replay(self) -> Plan:
        """Decide the cycle again (`core.schedule`, as the scheduler does)."""
        return schedule(self.cluster_snapshot(), self.pending(), self.config, self.now)

    def difference(self, plan: Plan | Mapping[str, Any]) -> str | None:
        """Where `plan` (or its data) first differs from the recorded plan (None: they
        are the same). Compared as the file holds them: through JSON."""
        if self.plan is None:
            raise CycleDumpError("plan: this dump records no plan to compare with")
        data = plan_data(plan) if isinstance(plan, Plan) else plan
        return first_difference(self.plan, json.loads(json.dumps(data)))


def dump_cycle(snapshot: ClusterSnapshot, backlog: Backlog, config: PolicyConfig, now: float,
               plan: Plan | Mapping[str, Any] | None = None, error: str | None = None,
               ) -> dict[str, Any]:
    """A cycle's inputs, and the plan made of them (a `Plan`, or its `plan_data`) or the
    error the cycle failed with, as JSON-able data."""
    return CycleDump(
        format=FORMAT, now=now, config=config,
        snapshot=SnapshotData(nodes=tuple(NodeData.of(n) for n in snapshot.nodes),
                              placed=tuple(PlacedData.of_gang(g) for g in snapshot.placed),
                              usage=None if snapshot.usage is None else UsageData(
                                  used={q: dict(a) for q, a in snapshot.usage.used.items()},
                                  capacity=dict(snapshot.usage.capacity))),
        backlog={queue: tuple(PendingData.of(g) for g in line)
                 for queue, line in backlog.lines.items()},
        plan=plan_data(plan) if isinstance(plan, Plan) else plan, error=error,
    ).model_dump(mode="json")


def load_cycle(data: str | bytes | Mapping[str, Any]) -> CycleDump:
    """A dump read back (JSON text, or the data `dump_cycle` made); CycleDumpError if it
    is not one this raygang reads: not JSON, another format, or a field that is wrong."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as error:
            raise CycleDumpError(f"not JSON: {error}") from None
        except UnicodeDecodeError:
            raise CycleDumpError("not JSON: not UTF-8 text") from None
    if not isinstance(data, Mapping):
        raise CycleDumpError(f"expected a JSON object (format, now, config, snapshot, backlog), "
                             f"got {type(data).__name__}")
    found = data.get("format")
    if found is None:
        raise CycleDumpError(f"format: missing: not a raygang cycle dump (expected format "
                             f"{FORMAT!r}, as GET /v1/debug/cycle writes)")
    if found != FORMAT:
        raise CycleDumpError(f"format: {found!r} is not a format this raygang reads "
                             f"(it reads {FORMAT!r}); replay it with the raygang that "
                             "dumped it")
    config = data.get("config")
    if isinstance(config, Mapping) and "backfill_lookahead" not in config:
        # Dumped before the lookahead was a setting: that raygang kept lines strictly in
        # order, so the cycle is replayed as it decided, not with today's default.
        data = {**data, "config": {**config, "backfill_lookahead": 0}}
        config = data["config"]
    preemption = config.get("preemption") if isinstance(config, Mapping) else None
    if isinstance(config, Mapping) and isinstance(preemption, Mapping):
        # Dumped before a rule was a setting: that raygang decided without it, so the cycle
        # is replayed as it decided, not with today's default.
        older = {k: v for k, v in PREEMPTION_BEFORE.items() if k not in preemption}
        if older:
            data = {**data, "config": {**config, "preemption": {**preemption, **older}}}
    try:
        return CycleDump.model_validate(data)
    except ValidationError as error:
        problems = list(describe_errors(error))
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        field, message = problems[0] if problems else ("", str(error))
        raise CycleDumpError(f"{field}: {message}{more}" if field else message + more) from None
