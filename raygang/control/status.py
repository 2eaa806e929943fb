"""What clients see of a gang: plain pydantic models, safe to send over Ray or HTTP."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from raygang.core.gang import GangState


class GangEvent(BaseModel):
    model_config = ConfigDict(frozen=True)

    at: float
    from_state: GangState | None
    to_state: GangState
    reason: str = ""


class MemberStatus(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: str
    index: int
    rank: int
    actor_name: str
    node_id: str | None = None
    ready_at: float | None = None


class GangError(BaseModel):
    """Why a gang failed: which member, and its exception's class and message."""

    model_config = ConfigDict(frozen=True)

    member: str | None = None  # "<role>-<index>"
    rank: int | None = None
    error_type: str
    message: str
    traceback: str = ""

    @property
    def summary(self) -> str:
        where = f"member {self.member} (rank {self.rank}) raised " if self.member else ""
        return f"{where}{self.error_type}: {self.message}"


class RoleSize(BaseModel):
    """One role of an elastic gang: the members it runs now, its bounds, the members it
    grows by at a time (its ratio step's count, else 1), and why it is not larger."""

    model_config = ConfigDict(frozen=True)

    role: str
    size: int = Field(ge=0)
    min_size: int = Field(ge=1)
    max_size: int = Field(ge=1)
    step: int = Field(1, ge=1)
    grow_reason: str | None = None  # None: it is growing, or the gang does not run


class GangStatus(BaseModel):
    model_config = ConfigDict(frozen=True)

    gang_id: str
    name: str
    queue: str
    priority: int
    state: GangState
    reason: str | None = None
    world_size: int  # the members it runs (an elastic gang: now; pending: at its minimum)
    min_size: int | None = None  # an elastic gang's bounds (None: a rigid gang)
    max_size: int | None = None
    grow_reason: str | None = None  # a running elastic gang below its maximum: why
    roles: list[RoleSize] = []  # an elastic gang: each role's size and why not larger
    members: list[MemberStatus] = []
    restarts: int = 0
    preemptions: int = 0
    queue_position: int | None = None  # 1 = next in its queue (while PENDING)
    kind: str = "gang"  # or "deployment", "job", "train", "tune"
    ray_job_id: str | None = None  # a job's Ray job id (of its last attempt)
    entrypoint: str | None = None  # a job's command
    parent: str | None = None  # the job whose budget it runs inside (started by its driver)
    error: GangError | None = None
    submitted_at: float
    started_at: float | None = None
    finished_at: float | None = None
    events: list[GangEvent] = []

    @property
    def finished(self) -> bool:
        return self.state.finished

    def nodes(self) -> list[str | None]:
        """The node of each member, in rank order."""
        return [m.node_id for m in self.members]


class Victim(BaseModel):
    model_config = ConfigDict(frozen=True)

    gang_id: str
    name: str
    action: str  # "reclaim" or "preempt"; "stopping": already stopping (earlier, or ended)
    reason: str


class DryRunResult(BaseModel):
    """What submitting a gang now would do: `admit`, `preempt` (these victims), `wait`
    (with the reason and queue position) or `rejected` (it can never be admitted).
    `waits_for`: gangs this cycle would stop for other gangs, whose freed capacity it
    would take: admitted, it would start only once they are gone."""

    model_config = ConfigDict(frozen=True)

    outcome: str
    reason: str = ""
    nodes: list[str] = []
    victims: list[Victim] = []
    waits_for: list[Victim] = []
    code: str | None = None
    queue_position: int | None = None


class QueueStatus(BaseModel):
    """One queue: what it is guaranteed and capped at, what it uses, its fair share now."""

    model_config = ConfigDict(frozen=True)

    name: str
    parent: str | None
    leaf: bool
    weight: float
    quota: dict[str, float]
    limit: dict[str, float] | None
    usage: dict[str, float]
    fair_share: dict[str, float]
    share_ratio: float
    pending: int
    running: int
    backfill_lookahead: int | None = None  # its own setting (QueueSpec); None: the policy's
    backfill_max_runtime_s: float | None = None  # likewise


class QueueSample(BaseModel):
    """A queue at one moment: its gangs pending and holding resources, its GPUs in use
    and its GPU guarantee (quota)."""

    model_config = ConfigDict(frozen=True)

    pending: int
    running: int
    gpus: float
    guarantee: float


class HistoryPoint(BaseModel):
    model_config = ConfigDict(frozen=True)

    at: float  # the scheduler's clock (Unix seconds on Ray)
    queues: dict[str, QueueSample]


class QueueHistory(BaseModel):
    """The queues over the last hours, one point every `interval_s`, oldest first."""

    model_config = ConfigDict(frozen=True)

    interval_s: float
    points: list[HistoryPoint]


class HeldBundle(BaseModel):
    """One gang's bundle on a node (member `rank` of the gang)."""

    model_config = ConfigDict(frozen=True)

    gang_id: str
    name: str
    queue: str
    rank: int
    resources: dict[str, float]


class NodeStatus(BaseModel):
    """One Ray node: its resources and which gangs' bundles it holds."""

    model_config = ConfigDict(frozen=True)

    node_id: str
    name: str
    alive: bool
    labels: dict[str, str] = {}
    total: dict[str, float]
    free: dict[str, float]
    used: dict[str, float]
    bundles: list[HeldBundle] = []


class GroupStatus(BaseModel):
    """A node group (worker group / node type) the scheduler can grow or shrink."""

    model_config = ConfigDict(frozen=True)

    name: str
    shape: dict[str, float]
    min_nodes: int
    max_nodes: int
    nodes: int  # now (KubeRay: replicas x hosts; autoscaler: alive nodes)
    desired: int  # what the queue needs, as last decided


class ScalingStatus(BaseModel):
    model_config = ConfigDict(frozen=True)

    mode: str  # "autoscaler" or "kuberay"
    groups: list[GroupStatus] = []
    draining: list[str] = []  # node ids asked to go
    last_error: str | None = None
    actions: list[str] = []  # the latest requests sent, oldest first


class ClusterStatus(BaseModel):
    model_config = ConfigDict(frozen=True)

    observed_at: float
    nodes: list[NodeStatus]
    total: dict[str, float]
    free: dict[str, float]
    scaling: ScalingStatus | None = None  # None when the scheduler does not scale
    # While the cluster's control service (Ray's GCS) does not answer: since when (the
    # scheduler's clock, as `observed_at`) and why. The nodes are then the last view.
    unreachable_since: float | None = None
    unreachable_reason: str | None = None
