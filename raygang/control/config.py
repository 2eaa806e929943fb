"""The scheduler's configuration: the core's policy plus what only the runtime needs.

One document, as users write it (`SchedulerConfig.from_file`): the policy's keys (queues,
priority classes, actions, backfill, restart backoff, when idle nodes go) and the
runtime's (the loop's timing, the durable store, Serve's port, how and where to reach
KubeRay or Ray's autoscaler, how many finished gangs to remember). The core is handed
`config.policy` and never sees the rest.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from typing_extensions import Self

from raygang.core.config import NodeType, PolicyConfig, ScalePolicy, unique_names
from raygang.core.queues import QueueSpec

ScaleMode = Literal["off", "autoscaler", "kuberay"]


class ScaleConfig(ScalePolicy):
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
        return unique_names(value, "node type")

    @model_validator(mode="after")
    def _mode_needs(self) -> Self:
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

    @property
    def policy(self) -> ScalePolicy:
        return ScalePolicy(idle_timeout_s=self.idle_timeout_s,
                           scale_down_delay_s=self.scale_down_delay_s)


class StateConfig(BaseModel):
    """Where the scheduler keeps what it must not lose (control/store.py).

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
    def _path_for_sqlite(self) -> Self:
        if (self.store == "sqlite") != (self.path is not None):
            raise ValueError("path: needed by store sqlite, and only by it")
        return self


class SchedulerConfig(PolicyConfig):
    """Everything the scheduler is configured with; immutable once started."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    resync_interval_s: float = Field(
        1.0, gt=0, description="cycle at least this often even without events"
    )
    serve_http_port: int | None = Field(
        None, ge=1, le=65535,
        description="port of Serve's HTTP proxy if raygang starts Serve (default 8000)",
    )
    history_interval_s: float = Field(
        30.0, gt=0, description="how often the status page's history samples the queues"
    )
    history_kept_s: float = Field(
        6 * 3600.0, gt=0, description="how far back the status page's history reaches "
        "(a ring in the scheduler's memory: history_kept_s / history_interval_s points)"
    )
    handoff_lease_s: float = Field(
        120.0, gt=0, description="how long a library (Ray Train) that claimed a gang's "
        "reserved nodes has to place its own group there before the gang requeues",
    )
    jobs_address: str | None = Field(
        None, description="Ray's Job Submission API (the dashboard, http://host:8265); "
        "default: the connected cluster's dashboard",
    )
    finished_gangs_kept: int = Field(
        10_000, ge=0, description="finished gangs (and their results) remembered"
    )
    scaling: ScaleConfig = Field(
        default_factory=ScaleConfig, description="sizing the cluster to the queue"
    )
    state: StateConfig = Field(
        default_factory=StateConfig, description="the durable store of gangs and queues"
    )

    @cached_property
    def policy(self) -> PolicyConfig:
        """The part the core decides by (it never sees the runtime's settings)."""
        fields = {name: getattr(self, name) for name in PolicyConfig.model_fields}
        return PolicyConfig(**{**fields, "scaling": self.scaling.policy})

    def with_queues(self, changed: Collection[QueueSpec]) -> Self:
        """This config with these queues added or replaced (the tree validated whole)."""
        names = {q.name for q in changed}
        queues = [q for q in self.queues if q.name not in names] + list(changed)
        return self.model_validate(
            {**self.model_dump(), "queues": [q.model_dump() for q in queues]})
