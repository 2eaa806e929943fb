"""The policy the core decides by, and priority classes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from typing_extensions import Self

from raygang.core.actions import ACTIONS
from raygang.core.lifecycle import RestartPolicy
from raygang.core.queues import DEFAULT_QUEUE, QueueSpec, QueueTree
from raygang.core.resources import Resources
from raygang.core.spec import NAME_PATTERN, GangSpec
from raygang.core.usage import UsagePolicy


class PriorityClass(BaseModel):
    """A named priority; `preemptible` is separate from the value, as in KAI Scheduler."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    value: int
    preemptible: bool = True
    min_runtime_s: float = Field(
        0.0, ge=0, description="a gang of this class is not preempted before it ran this long"
    )


DEFAULT_PRIORITY_CLASSES: tuple[PriorityClass, ...] = (
    PriorityClass(name="inference", value=1000, preemptible=False),
    PriorityClass(name="training", value=100, preemptible=True),
    PriorityClass(name="batch", value=10, preemptible=True),
)


def _known_action(name: str) -> str:
    if name not in ACTIONS:
        raise ValueError(f"unknown action {name!r}; known: {', '.join(ACTIONS)}")
    return name


ActionName = Annotated[str, AfterValidator(_known_action)]  # one of `core.actions`


class UnknownPriorityClass(ValueError):
    pass


class _HasName(Protocol):
    @property
    def name(self) -> str: ...


_Named = TypeVar("_Named", bound=_HasName)


def unique_names(items: tuple[_Named, ...], what: str) -> tuple[_Named, ...]:
    names = [item.name for item in items]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"{what} {name!r} is declared twice")
    return items


_NO_MAX = 2**31 - 1  # KubeRay's default maxReplicas


class NodeType(BaseModel):
    """A kind of worker node the cluster can add (a KubeRay worker group, or a node type of
    Ray's autoscaler config): `resources` is the shape of one node."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    resources: Resources
    min_nodes: int = Field(0, ge=0)
    max_nodes: int = Field(_NO_MAX, ge=0)
    cost: float | None = Field(
        None, ge=0, description="price of one node; default: GPUs weigh 64 CPUs (core.scale)"
    )

    @model_validator(mode="after")
    def _min_within_max(self) -> NodeType:
        if self.min_nodes > self.max_nodes:
            raise ValueError(
                f"min_nodes: {self.min_nodes} is above max_nodes {self.max_nodes}"
            )
        if not self.resources:
            raise ValueError("resources: a node type needs at least one resource")
        return self


class ScalePolicy(BaseModel):
    """When idle nodes go (`core.scale` holds the hysteresis): a node idle for
    `idle_timeout_s` is released, except in a group that grew within `scale_down_delay_s`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    idle_timeout_s: float = Field(300.0, ge=0, description="release a node idle this long")
    scale_down_delay_s: float = Field(
        120.0, ge=0, description="a group that scaled up this recently releases nothing"
    )


VictimOrder = Literal["cheapest", "newest"]


class PreemptionPolicy(BaseModel):
    """When reclaim and preempt may stop running gangs, which, and which first.

    The delays are KAI Scheduler's preemption delay (`preemptionDelay`, v0.17): a gang
    pending less than this long does not stop others for itself. The minimum runtimes are
    KAI Scheduler's `minruntime` plugin (`defaultReclaimMinRuntime`,
    `defaultPreemptMinRuntime`, docs/plugins/minruntime.md): a gang that (re)started less
    than this long ago is not stopped by that action, so one that just got back in is not
    the next victim. They add to a priority class's own `min_runtime_s`, which guards
    against both actions. The defaults were measured on the Philly week (README).
    `reclaim_trade_ratio` weighs reclaim's delay and minimum runtime against what a
    reclaim trades instead (`core.preemption.trade`): on by default at 0.5, as three copies
    of the stress set chose it with best-effort lines (docs/simulator.md); null keeps the
    fixed rules alone."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reclaim_min_runtime_s: float = Field(
        900.0, ge=0, description="reclaim does not stop a gang that has run less than this "
        "since it last started (KAI's reclaimMinRuntime; 0: at once)")
    preempt_min_runtime_s: float = Field(
        0.0, ge=0, description="preempt (by a higher priority) does not stop a gang that "
        "has run less than this since it last started (KAI's preemptMinRuntime)")
    reclaim_delay_s: float = Field(
        300.0, ge=0, description="a gang reclaims from other queues only once it has been "
        "pending this long: capacity that frees meanwhile often serves it without stopping "
        "anyone (KAI's preemptionDelay; 0: at once)")
    preempt_delay_s: float = Field(
        0.0, ge=0, description="a gang preempts lower priorities only once it has been "
        "pending this long (KAI's preemptionDelay)")
    reclaim_victim_order: VictimOrder = Field(
        "cheapest", description="which gangs reclaim stops first (and which of a queue's "
        "gangs count within its share, the other way round): 'cheapest' loses the least "
        "work (the fewest GPU-seconds since its last checkpoint, or else since its last "
        "start, then the smallest); 'newest' the one started last whatever its size "
        "(Kueue's candidatesOrdering)")
    preempt_victim_order: VictimOrder = Field(
        "newest", description="which gangs preempt stops first, after the lowest priority: "
        "'newest' the one started last (Kueue's candidatesOrdering, KAI's); 'cheapest' the "
        "one whose stop loses the least work, as reclaim_victim_order")
    reclaim_trade_ratio: float | None = Field(
        0.5, description="reclaim by what it trades (core.preemption.trade): a gang may "
        "reclaim before reclaim_delay_s, and stop gangs that have not run "
        "reclaim_min_runtime_s, when what its wait costs is at least this many times what "
        "the stop loses. The cost: the gang's pending seconds times the GPUs (its scarcest "
        "resource) its queue is below its quota; the loss: the victims' GPUs times their "
        "seconds of work since their last checkpoint, or since their start. null: the "
        "fixed delay and minimum runtime alone (KAI's rule)")

    reclaim_checkpoint_ratio: float | None = Field(
        2.0, description="reclaim waits for its victims' next checkpoint when that costs "
        "less (core.preemption.trade `CheckpointWait`): a gang that checkpoints is stopped "
        "by reclaim only while its GPUs (the claimant's scarcest resource) times its "
        "seconds since its last checkpoint are at most this many times the GPUs the "
        "claimant's queue is below its quota (at least the claimant's) times the seconds "
        "to that gang's next checkpoint; else the claimant waits for it. null: no wait "
        "(KAI's rule)")

    @field_validator("reclaim_trade_ratio", "reclaim_checkpoint_ratio")
    @classmethod
    def _positive_ratio(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is not None and not (0 < value < math.inf):
            raise ValueError(
                f"{info.field_name} must be a positive number (a ratio of the work a "
                f"reclaim loses to what its wait costs) or null (off), not {value}")
        return value

    def delay_s(self, action: str) -> float:
        """The delay of `action` (the setting its `Action.delay_key` names; 0 if none)."""
        return ACTIONS[action].delay_s(self) if action in ACTIONS else 0.0

    def min_runtime_s(self, action: str) -> float:
        """The minimum runtime of `action` (its `Action.min_runtime_key`; 0 if none)."""
        return ACTIONS[action].min_runtime_s(self) if action in ACTIONS else 0.0


class PolicyConfig(BaseModel):
    """What the core decides by: queues, priority classes, the actions of a cycle, backfill,
    restart backoff, when idle nodes go and how usage over time counts. The runtime's own
    settings (the store, Serve's port, the Kubernetes access, the loop's timing) extend it
    in `raygang.control.config.SchedulerConfig`, the one config file users write."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backfill: bool = Field(
        False,
        description="every queue's line best-effort (a gang that fits goes ahead of blocked "
        "gangs earlier in its line), whatever backfill_lookahead says; a queue's own "
        "backfill_lookahead still wins",
    )
    backfill_lookahead: int | None = Field(
        None, ge=0,
        description="how many more gangs of a queue's line that cannot start a pass may set "
        "aside past the first one before the rest waits behind that first one; null (the "
        "default): no bound, a best-effort line (Kueue's BestEffortFIFO), which costs a "
        "pass its runs of alike gangs, not its length; a gang of the shape and priority of "
        "one set aside is set aside without a try; 0: strict FIFO per queue",
    )
    backfill_max_runtime_s: float = Field(
        4 * 3600.0, ge=0,
        description="on a bounded line (backfill_lookahead set): a gang that declares a "
        "max_runtime_s of at most this is still tried past the queue's lookahead (or a "
        "strict line), as Slurm's backfill starts jobs whose time limit lets them; gangs "
        "that declare none wait as before. 0: none is",
    )
    priority_classes: tuple[PriorityClass, ...] = DEFAULT_PRIORITY_CLASSES
    queues: tuple[QueueSpec, ...] = (QueueSpec(name=DEFAULT_QUEUE),)
    actions: tuple[ActionName, ...] = Field(
        ("allocate", "shrink", "reclaim", "preempt", "grow"),
        description="what a cycle does, in this order (the actions of `core.actions`); "
        "shrink and grow act only on elastic gangs (roles with replicas=(min, max)): "
        "without grow they run at their minimum",
    )
    cross_queue_preemption: bool = Field(
        True,
        description="gangs of a non-preemptible class (inference) may preempt lower-priority "
        "gangs of other queues; otherwise preemption stays inside a queue",
    )
    restart_backoff_s: float = Field(
        1.0, ge=0, description="a gang restarted whole waits this long before it may run "
        "again, doubling with each restart of it (at most restart_backoff_max_s)"
    )
    restart_backoff_max_s: float = Field(60.0, ge=0, description="the longest restart wait")
    scaling: ScalePolicy = Field(
        default_factory=ScalePolicy, description="sizing the cluster to the queue"
    )
    sla_waiting_time_s: float | None = Field(
        None, gt=0, description="a gang pending this long (at the head of its queue) has "
        "the free capacity of the nodes closest to holding it held for it, so that what "
        "frees there adds up (Volcano's sla-waiting-time); one such gang at a time; "
        "null (the default, as the stress set measured it): never")
    sla_min_nodes: int = Field(
        1, ge=1, description="the hold is for gangs that need at least this many nodes "
        "(their scarcest resource against the largest node's total): 1, any gang; 2 or "
        "more, only gangs that wait for several nodes to free at once, which small gangs "
        "starve")
    sla_max_holds: int = Field(
        1, ge=1, description="how many gangs may have capacity held for them at once, each "
        "the first such gang of its own queue, longest pending first: 1 (Volcano's), one "
        "gang at a time; more, so that several wide gangs gather their nodes side by side")
    preemption: PreemptionPolicy = Field(
        default_factory=PreemptionPolicy,
        description="minimum runtimes before reclaim or preempt, and the victims' order")
    usage: UsagePolicy = Field(
        default_factory=UsagePolicy,
        description="time-based fair share: what each queue used lately lowers its share "
        "of the capacity beyond quotas and its place in line (core.usage)")

    _tree: QueueTree = PrivateAttr()

    @field_validator("priority_classes")
    @classmethod
    def _unique_classes(cls, value: tuple[PriorityClass, ...]) -> tuple[PriorityClass, ...]:
        """Configured classes add to the defaults (one of the same name replaces it), so
        `inference` for deployments and `training` for gangs keep meaning something."""
        value = unique_names(value, "priority class")
        names = {c.name for c in value}
        return value + tuple(c for c in DEFAULT_PRIORITY_CLASSES if c.name not in names)

    @field_validator("actions")
    @classmethod
    def _each_once(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError(f"an action is listed twice: {list(value)}")
        return value

    @model_validator(mode="after")
    def _queue_tree(self) -> Self:
        self._tree = QueueTree(self.queues)  # a ValueError naming the queue at fault
        return self

    @property
    def queue_tree(self) -> QueueTree:
        return self._tree

    @property
    def decides_by_time(self) -> bool:
        """Whether a cycle may decide otherwise on the same cluster and backlog later: it
        may unless the policy only allocates (reclaim and preempt wait out delays and
        minimum runtimes and weigh the victims' work since their checkpoints; shrink and
        grow wait out their own times), holds nothing for gangs pending long, and keeps no
        usage over time (which decays). Elsewhere the clock only moves the words of
        reasons, and a gang's restart backoff ends with a wake of its own."""
        return (self.actions != ("allocate",) or self.sla_waiting_time_s is not None
                or self.usage.enabled)

    @property
    def restart_policy(self) -> RestartPolicy:
        return RestartPolicy(self.restart_backoff_s, self.restart_backoff_max_s)

    @classmethod
    def from_file(cls, path: str | Path) -> Self:
        """Load a YAML (or JSON) config file; unknown keys and bad values are errors."""
        return cls.from_files([path])

    @classmethod
    def from_files(cls, paths: Sequence[str | Path]) -> Self:
        """Several files as one config: a later file's top-level keys replace an earlier
        one's (e.g. queues in one file, the cluster's `scaling` in another)."""
        import yaml  # a dependency of Ray; only config files need it

        data: dict[str, Any] = {}
        for path in paths:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
            if not isinstance(loaded, dict):
                raise ValueError(
                    f"{path}: expected a mapping at the top, got {type(loaded).__name__}"
                )
            data.update(loaded)
        return cls.model_validate(data)

    def priority_class(self, spec: GangSpec) -> PriorityClass:
        """The gang's class; an integer priority is a preemptible class of its own."""
        if isinstance(spec.priority, int):
            return PriorityClass(name=str(spec.priority), value=spec.priority)
        for cls in self.priority_classes:
            if cls.name == spec.priority:
                return cls
        known = ", ".join(sorted(c.name for c in self.priority_classes))
        raise UnknownPriorityClass(
            f"priority: unknown priority class {spec.priority!r} (known: {known})"
        )

    def resolve_priority(self, spec: GangSpec) -> int:
        """The integer priority of a gang spec; raises for an unknown class name."""
        return self.priority_class(spec).value
