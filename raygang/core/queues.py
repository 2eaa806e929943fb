"""The queue tree: `quota` (guaranteed), `limit` (hard cap), `weight` (share of the surplus).

Only leaf queues hold gangs; a parent's usage is the sum of its children's. Quota and limit
name the resources they bound: a resource a quota does not name is not guaranteed (0), a
resource a limit does not name is not capped. A queue named `default` always exists, so a
cluster with no queue config schedules everything through it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pydantic import BaseModel, ConfigDict, Field, model_validator

from raygang.core.resources import Resources
from raygang.core.spec import NAME_PATTERN, GangSpec

DEFAULT_QUEUE = "default"


class QueueSpec(BaseModel):
    """One queue of the tree, as configured."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    parent: str | None = Field(None, description="the parent queue; None for a top-level queue")
    quota: Resources = Field(
        default_factory=Resources, description="guaranteed resources (unnamed resources: 0)"
    )
    limit: Resources | None = Field(
        None, description="hard cap on usage (unnamed resources: no cap); None for no cap"
    )
    weight: float = Field(1.0, gt=0, description="share of the capacity left over after quotas")
    backfill_lookahead: int | None = Field(
        None, ge=0, description="this queue's own PolicyConfig.backfill_lookahead (as Kueue "
        "sets a queueing strategy per ClusterQueue), also where the policy's backfill is "
        "on: 0 keeps its line strictly in order; None: the policy's")
    backfill_max_runtime_s: float | None = Field(
        None, ge=0, description="this queue's own PolicyConfig.backfill_max_runtime_s: 0 "
        "lets none of its gangs pass for a declared max_runtime_s; None: the policy's")

    @model_validator(mode="after")
    def _quota_within_limit(self) -> QueueSpec:
        if self.limit is not None:
            over = [n for n in self.quota if n in self.limit and self.quota[n] > self.limit[n]]
            if over:
                raise ValueError(
                    f"quota: {over[0]} quota {self.quota[over[0]]:g} is above its limit "
                    f"{self.limit[over[0]]:g}"
                )
        return self


class QueueTree:
    """The validated tree: parents exist, no cycles, names unique, `default` present."""

    def __init__(self, queues: Iterable[QueueSpec]):
        specs = list(queues)
        self.specs: dict[str, QueueSpec] = {}
        for i, q in enumerate(specs):
            if q.name in self.specs:
                raise ValueError(f"queues[{i}].name: queue {q.name!r} is declared twice")
            self.specs[q.name] = q
        if DEFAULT_QUEUE not in self.specs:
            self.specs[DEFAULT_QUEUE] = QueueSpec(name=DEFAULT_QUEUE)
        self.children: dict[str | None, list[str]] = {None: []}
        for name in sorted(self.specs):
            q = self.specs[name]
            if q.parent is not None and q.parent not in self.specs:
                raise ValueError(f"queues: queue {name!r} has unknown parent {q.parent!r}")
            self.children.setdefault(q.parent, []).append(name)
            self.children.setdefault(name, [])
        self.paths: dict[str, tuple[str, ...]] = {n: self._path(n) for n in self.specs}
        # Read each cycle (fair shares): worked out once, as the tree never changes
        self.leaves: list[str] = [n for n in sorted(self.specs) if self.is_leaf(n)]
        self._top_down = tuple(self._parents_first())
        # queue -> its quota's named resources, in units (`fairshare.in_quota_units`)
        self.quota_units: dict[str, dict[str, int]] = {
            n: {r: q.quota.units(r) for r in q.quota} for n, q in self.specs.items()}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QueueTree) and other.specs == self.specs

    __hash__ = None  # type: ignore[assignment]

    def _path(self, name: str) -> tuple[str, ...]:
        """Queue names from the top of the tree down to `name`."""
        path: list[str] = []
        at: str | None = name
        while at is not None:
            if at in path:
                raise ValueError(f"queues: parent cycle {' -> '.join(reversed([*path, at]))}")
            path.append(at)
            at = self.specs[at].parent
        return tuple(reversed(path))

    def is_leaf(self, name: str) -> bool:
        return not self.children.get(name)

    def top_down(self) -> Iterator[str | None]:
        """Every parent (None is the root) before its children."""
        return iter(self._top_down)

    def _parents_first(self) -> Iterator[str | None]:
        stack: list[str | None] = [None]
        while stack:
            at = stack.pop()
            yield at
            stack.extend(reversed(self.children.get(at, [])))

    def problem(self, spec: GangSpec) -> str | None:
        """Why a gang can never be admitted through its queue (unknown queue, a parent
        queue, a limit below the gang's size), or None."""
        return self.problem_of(spec.queue, spec.min_total)

    def problem_of(self, queue: str, total: Resources) -> str | None:
        """`problem` for a gang of `queue` that asks for `total` in all."""
        if queue not in self.specs:
            return f"queue: unknown queue {queue!r} (queues: {', '.join(self.leaves)})"
        if not self.is_leaf(queue):
            return (
                f"queue: {queue!r} is a parent queue; gangs go to its leaves "
                f"({', '.join(self.children[queue])})"
            )
        for name in self.paths[queue]:
            limit = self.specs[name].limit
            if limit is None:
                continue
            for res in total.names_by_scarcity():
                if res in limit and total[res] > limit[res]:
                    return (
                        f"queue: the gang needs {res} {total[res]:g} in all, above the limit "
                        f"{limit[res]:g} of queue {name!r}"
                    )
        return None


def exceeds_limit(usage: Resources, limit: Resources | None) -> str | None:
    """The first resource (scarcest first) `usage` has above `limit`, or None."""
    if limit is None:
        return None
    for res in usage.names_by_scarcity():
        if res in limit and usage.units(res) > limit.units(res):
            return res
    return None
