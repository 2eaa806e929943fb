"""The policy the core decides by, and priority classes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)
from typing_extensions import Self

from raygang.core.actions import ACTIONS
from raygang.core.lifecycle import RestartPolicy
from raygang.core.queues import DEFAULT_QUEUE, QueueSpec, QueueTree
from raygang.core.resources import Resources
from raygang.core.spec import NAME_PATTERN, GangSpec


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


def unique_names(items: tuple, what: str) -> tuple:
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


class PolicyConfig(BaseModel):
    """What the core decides by: queues, priority classes, the actions of a cycle, backfill,
    restart backoff and when idle nodes go. The runtime's own settings (the store, Serve's
    port, the Kubernetes access, the loop's timing) extend it in
    `raygang.control.config.SchedulerConfig`, the one config file users write."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backfill: bool = Field(
        False,
        description="let a gang that fits jump ahead of a blocked gang earlier in the order",
    )
    priority_classes: tuple[PriorityClass, ...] = DEFAULT_PRIORITY_CLASSES
    queues: tuple[QueueSpec, ...] = (QueueSpec(name=DEFAULT_QUEUE),)
    actions: tuple[ActionName, ...] = Field(
        ("allocate", "reclaim", "preempt"),
        description="what a cycle does, in this order (the actions of `core.actions`)",
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

        data: dict = {}
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
