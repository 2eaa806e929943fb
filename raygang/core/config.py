"""Scheduler configuration and priority classes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from raygang.core.queues import DEFAULT_QUEUE, QueueSpec, QueueTree
from raygang.core.resources import Resources
from raygang.core.spec import NAME_PATTERN, GangSpec

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


def _unique_names(items: tuple, what: str) -> tuple:
    names = [item.name for item in items]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"{what} {name!r} is declared twice")
    return items


ScaleMode = Literal["off", "autoscaler", "kuberay"]
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


class ScaleConfig(BaseModel):
    """Whether and how raygang sizes the cluster to its queue (exactly one mode per cluster).

    - `off`: the cluster is as big as it is.
    - `autoscaler`: ask Ray's autoscaler for the nodes (`request_resources`); `node_types`
      says which node types it can launch (the names must match its config, or the
      RayCluster's worker groups when `raycluster` is set: then they are read from there).
    - `kuberay`: patch the RayCluster `raycluster` (worker group replicas and
      `workersToDelete`) directly; Ray's autoscaler must be off.
    Idle nodes are released after `idle_timeout_s`; a group that grew within
    `scale_down_delay_s` releases nothing (see `core.scale` for the hysteresis)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: ScaleMode = "off"
    idle_timeout_s: float = Field(300.0, ge=0, description="release a node idle this long")
    scale_down_delay_s: float = Field(
        120.0, ge=0, description="a group that scaled up this recently releases nothing"
    )
    node_types: tuple[NodeType, ...] = ()
    raycluster: str | None = Field(
        None, description="RayCluster name; default: $RAY_CLUSTER_NAME (set by KubeRay)"
    )
    namespace: str | None = Field(
        None, description="its namespace; default: the pod's own (service account)"
    )
    kubeconfig: str | None = Field(
        None, description="kubeconfig file; default: in-cluster config, else ~/.kube/config"
    )
    costs: dict[str, float] = Field(
        default_factory=dict, description="price of one node per worker group (kuberay mode)"
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        return "off" if value is False else value  # YAML 1.1 reads a bare `off` as false

    @field_validator("node_types")
    @classmethod
    def _unique_types(cls, value: tuple[NodeType, ...]) -> tuple[NodeType, ...]:
        return _unique_names(value, "node type")

    @model_validator(mode="after")
    def _mode_needs(self) -> ScaleConfig:
        if self.mode == "autoscaler" and not self.node_types and self.raycluster is None:
            raise ValueError(
                "node_types: autoscaler mode needs the autoscaler's node types (or "
                "raycluster, to read them from the RayCluster's worker groups)"
            )
        if self.mode != "autoscaler" and self.node_types:
            raise ValueError(
                f"node_types: only autoscaler mode takes node types (mode is {self.mode!r}; "
                "kuberay mode reads the worker groups from the RayCluster)"
            )
        return self


class StateConfig(BaseModel):
    """Where the scheduler keeps what it must not lose (runtime/store.py).

    - `gcs` (default): Ray's GCS key-value store: survives restarts of the scheduler actor,
      and of the head with GCS fault tolerance (KubeRay's external Redis).
    - `sqlite`: a SQLite file at `path`, for a local setup without GCS fault tolerance.
    - `memory`: nothing survives the scheduler actor (tests, throwaway clusters)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    store: Literal["gcs", "sqlite", "memory"] = "gcs"
    path: str | None = Field(None, description="the SQLite file (store: sqlite)")
    recovery_wait_s: float = Field(
        60.0, gt=0, description="how long a call waits for a restarted scheduler to recover"
    )
    results_max_bytes: int = Field(
        1 << 20, ge=0, description="a finished gang's results up to this size (pickled) are "
        "kept in the store, readable after a scheduler restart; larger ones only live in "
        "Ray's object store, owned by the scheduler process"
    )
    results_retention_s: float = Field(
        86_400.0, ge=0, description="how long kept results stay in the store"
    )

    @model_validator(mode="after")
    def _path_for_sqlite(self) -> StateConfig:
        if (self.store == "sqlite") != (self.path is not None):
            raise ValueError("path: needed by store sqlite, and only by it")
        return self


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
    restart_backoff_s: float = Field(
        1.0, ge=0, description="a gang restarted whole waits this long before it may run "
        "again, doubling with each restart of it (at most restart_backoff_max_s)"
    )
    restart_backoff_max_s: float = Field(60.0, ge=0, description="the longest restart wait")
    finished_gangs_kept: int = Field(
        10_000, ge=0, description="finished gangs (and their results) remembered"
    )
    scaling: ScaleConfig = Field(
        default_factory=ScaleConfig, description="sizing the cluster to the queue"
    )
    state: StateConfig = Field(
        default_factory=StateConfig, description="the durable store of gangs and queues"
    )

    _tree: QueueTree = PrivateAttr()

    @field_validator("priority_classes")
    @classmethod
    def _unique_classes(cls, value: tuple[PriorityClass, ...]) -> tuple[PriorityClass, ...]:
        """Configured classes add to the defaults (one of the same name replaces it), so
        `inference` for deployments and `training` for gangs keep meaning something."""
        value = _unique_names(value, "priority class")
        names = {c.name for c in value}
        return value + tuple(c for c in DEFAULT_PRIORITY_CLASSES if c.name not in names)

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
        return cls.from_files([path])

    @classmethod
    def from_files(cls, paths: Sequence[str | Path]) -> SchedulerConfig:
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
