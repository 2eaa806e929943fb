"""Scheduler configuration and priority classes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from raygang.core.spec import GangSpec


class PriorityClass(BaseModel):
    """A named priority; `preemptible` is separate from the value, as in KAI Scheduler."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    value: int
    preemptible: bool = True


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
    resync_interval_s: float = Field(
        1.0, gt=0, description="cycle at least this often even without events"
    )
    finished_gangs_kept: int = Field(
        10_000, ge=0, description="finished gangs (and their results) remembered"
    )

    def resolve_priority(self, spec: GangSpec) -> int:
        """The integer priority of a gang spec; raises for an unknown class name."""
        if isinstance(spec.priority, int):
            return spec.priority
        for cls in self.priority_classes:
            if cls.name == spec.priority:
                return cls.value
        known = ", ".join(sorted(c.name for c in self.priority_classes))
        raise UnknownPriorityClass(
            f"priority: unknown priority class {spec.priority!r} (known: {known})"
        )
