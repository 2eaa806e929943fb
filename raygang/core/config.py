"""Scheduler configuration and priority classes."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from raygang.core.queues import DEFAULT_QUEUE, QueueSpec, QueueTree
from raygang.core.spec import GangSpec

Action = Literal["allocate", "reclaim", "preempt"]


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


class UnknownPriorityClass(ValueError):
    pass


class SchedulerConfig(BaseModel):
    """Policy knobs of `schedule()` plus the loop's timing; immutable once started."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backfill: bool = Field(
        False,
        description="let a gang that fits jump ahead of a blocked gang earlier in the order",
    )
    priority_classes: tuple[PriorityClass, ...] = DEFAULT_PRIORITY_CLASSES
    queues: tuple[QueueSpec, ...] = (QueueSpec(name=DEFAULT_QUEUE),)
    actions: tuple[Action, ...] = Field(
        ("allocate", "reclaim", "preempt"), description="what a cycle does, in this order"
    )
    cross_queue_preemption: bool = Field(
        True,
        description="gangs of a non-preemptible class (inference) may preempt lower-priority "
        "gangs of other queues; otherwise preemption stays inside a queue",
    )
    resync_interval_s: float = Field(
        1.0, gt=0, description="cycle at least this often even without events"
    )
    serve_http_port: int | None = Field(
        None, ge=1, le=65535,
        description="port of Serve's HTTP proxy if raygang starts Serve (default 8000)",
    )
    finished_gangs_kept: int = Field(
        10_000, ge=0, description="finished gangs (and their results) remembered"
    )

    _tree: QueueTree = PrivateAttr()

    @field_validator("priority_classes")
    @classmethod
    def _unique_classes(cls, value: tuple[PriorityClass, ...]) -> tuple[PriorityClass, ...]:
        names = [c.name for c in value]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"priority class {name!r} is declared twice")
        return value

    @field_validator("actions")
    @classmethod
    def _allocate_first(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError(f"an action is listed twice: {list(value)}")
        return value

    @model_validator(mode="after")
    def _queue_tree(self) -> SchedulerConfig:
        self._tree = QueueTree(self.queues)  # a ValueError naming the queue at fault
        return self

    @property
    def queue_tree(self) -> QueueTree:
        return self._tree

    @classmethod
    def from_file(cls, path: str | Path) -> SchedulerConfig:
        """Load a YAML (or JSON) config file; unknown keys and bad values are errors."""
        import yaml  # a dependency of Ray; only config files need it

        text = Path(path).read_text()
        data = yaml.safe_load(text) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping at the top, got {type(data).__name__}")
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
