"""The control plane's ports: what it needs of the cluster, and nothing more.

Ray implements them in production (`raygang.runtime.scheduler.cluster`: placement groups, member
actors, Serve); `control.memory.MemoryCluster` implements them in one process without
Ray, for the fast test tier and for replaying traces. Time comes in as a clock (wall
seconds, for timestamps and backoffs); waiting is asyncio's, so an event loop with
virtual time simulates it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from raygang.control.records import GangRecord
from raygang.control.status import GangError, MemberStatus, ScalingStatus
from raygang.core.gang import GangState, PendingGang
from raygang.core.plan import Plan, Preemption
from raygang.core.queues import QueueSpec
from raygang.core.report import QueueReport
from raygang.core.resources import Resources
from raygang.core.scale import ScalePlan
from raygang.core.snapshot import ClusterSnapshot, PlacedGang
from raygang.core.spec import MemberSlot, Resize

Clock = Callable[[], float]


class ReservationTimeout(Exception):
    """The gang's capacity could not be reserved within its `reservation_timeout_s`."""


class MemberFailure(Exception):
    """A member failed (raised, died, its node was lost, or did not start in time)."""

    def __init__(self, error: GangError, final: bool = False):
        super().__init__(error.summary)
        self.error = error
        self.final = final  # fail the gang, whatever restarts it has left


class GangRun(Protocol):
    """Everything the cluster does for one admitted gang: reserve its capacity on the
    nodes the plan chose, start its members in role order, release them past the launch
    barrier and watch them, tell them of a preemption, tear everything down. It only acts
    and reports (`ReservationTimeout`, `MemberFailure`); the lifecycle decides."""

    async def reserve(self) -> None:
        """Reserve the gang's bundles on its nodes (raises ReservationTimeout)."""

    async def start_members(self) -> None:
        """Start every member, role after role; return once all are ready."""

    async def run(self) -> list[Any]:
        """Release every member at once; the result of each, in rank order, once all have
        finished (a service gang: never returns; a member failing raises MemberFailure)."""

    async def resume(self) -> list[Any]:
        """`run()` for a gang a previous scheduler process released (adopted)."""

    async def signal_preempt(self, grace_s: float,
                             members: Sequence[MemberSlot] | None = None
                             ) -> list[dict[str, Any]]:
        """Tell the members (or only `members`, surplus members being removed); one reply
        per member once its hooks returned or the grace ran out: {"member", "rank",
        "hooks", "error", "running"} (runtime/kinds/gang/launch.py). Told whole (`members`
        None), the gang is being stopped (a halt or a `restart` follows): its bodies
        returning from then on is not its outcome, and `run()` does not return on it."""

    async def wait_bodies(self, ranks: Sequence[int], timeout: float) -> None:
        """Wait up to `timeout` for these members' bodies to return."""

    async def close(self) -> None:
        """Tear everything down (idempotent, never raises; finishes even if cancelled)."""

    # Elastic gangs (only where `Cluster.resizes`) -------------------------------------
    def lost_members(self) -> list[str]:
        """Members still starting whose creation the cluster lost (they will never start
        on their own), by name; blocking (a cluster read). [] where a run cannot tell."""

    async def add_members(self, members: Sequence[tuple[MemberSlot, str]]) -> list[str]:
        """Reserve and start these surplus members (slot, node) beside the running ones,
        and release them once ready; the others are told the new world. Returns what
        went wrong that the gang runs on with (a resize hook raised, a member did not
        answer the barrier): the gang's events say it."""

    async def remove_members(self, members: Sequence[MemberSlot]) -> list[str]:
        """Stop these surplus members and free what they held (their grace period is
        over: the driver gave it, as to a whole gang); the others are told the new
        world. Returns what went wrong, as `add_members`."""

    # `resize: restart` (only where `Resize.RESTART in Cluster.resizes`)
    async def reserve_members(self, members: Sequence[tuple[MemberSlot, str]]) -> None:
        """Reserve these surplus members' bundles (slot, node) and start nothing; what
        was reserved is freed again if it fails (ReservationTimeout)."""

    async def restart(self, world: Sequence[MemberSlot],
                      stopped: Callable[[], None] | None = None) -> None:
        """Stop every member and start `world` afresh, all ready before any is released
        (the launch barrier); what members outside `world` held is freed, and then
        `stopped()` is called (before `world` starts: a gang waiting for that capacity
        need not wait for the restart). Their grace period is over (the driver gave it).
        A failure raises, and fails the run too."""


class Leftovers(Protocol):
    """What a previous scheduler process left in the cluster, read once, by gang id."""

    def take(self, gang_id: str) -> None:
        """Its parts belong to an adopted gang now: not leftovers any more."""

    def clear(self, gang_id: str | None) -> int:
        """Remove the gang's parts; how many there were."""

    def orphans(self, unfinished: set[str], unknown: bool = True) -> int:
        """Remove everything of no unfinished gang; how many parts. `unknown`: also what
        belongs to no gang the scheduler knows (a `raygang-` name it cannot place)."""


class JobBudget(Protocol):
    """The bundles a running job holds, as its gangs see them
    (`runtime.kinds.job.launch.JobLaunch`)."""

    @property
    def bundles(self) -> tuple[Resources, ...]:
        """Every bundle of the budget, by index."""

    def never_fits(self, wanted: Sequence[Resources]) -> str | None:
        """Why `wanted` can never be placed in this budget, even with all of it free."""

    def take(self, gang_id: str, wanted: Sequence[Resources]) -> list[str] | None:
        """Claim free bundles holding `wanted` for `gang_id`: the node of each (in
        `wanted`'s order), or None if the free ones cannot hold it now."""

    def give_back(self, gang_id: str) -> None:
        """`gang_id` ended (or requeued): its bundles are the job's again."""

    def in_use(self) -> int:
        """How many of the budget's bundles are taken."""

    def restore(self, gang_id: str, nodes: Sequence[str],
                bundles: Sequence[Resources]) -> None:
        """`gang_id` runs on `nodes` (one per bundle) inside this budget: a restarted
        scheduler adopted both. Its bundles are its again, to give back when it ends."""


class Cluster(Protocol):
    """The cluster as the control plane sees it and acts on it."""

    resizes: frozenset[Resize]  # how its runs resize elastic gangs (none: they do not)
    # Whether its calls may block (Ray's GCS calls wait while the GCS is down): `observe`,
    # and recovery's `leftovers`, `adopt` and the leftovers' `clear` and `orphans`. The
    # plane then makes each in a thread, within a timeout of its own (control/sight.py,
    # control/recovery.py); where they never block, in place, keeping their order.
    calls_block: bool
    # Whether it answers whatever happens (a simulated cluster): then nobody asks it
    # whether it does (`sight.ClusterView.probe`).
    always_answers: bool
    # Whether a job's budget may ever hold gangs here (`budget`; not in a replay, whose
    # jobs submit nothing from inside): else the plane runs no `control.inside` at all.
    gangs_inside_jobs: bool
    # Whether every change of what it shows wakes the plane (a simulated cluster: each
    # change is the replay's own doing, `on_change`): a loop with nothing to decide then
    # waits for that alone, not for its resync interval too (which only looks for what
    # raygang did not cause: nodes joining, other work freeing room).
    tells_changes: bool

    def observe(self, held: Iterable[PlacedGang], draining: Collection[str]) -> ClusterSnapshot:
        """Nodes with their free resources (what `held` holds counts as used even if the
        cluster does not show it yet; `draining` nodes have nothing free). Raises
        `ClusterUnreachable` when the cluster does not answer."""

    async def answers(self, timeout: float) -> bool:
        """Whether the cluster answers a small read within `timeout` (never raises)."""

    async def until_free(self, bundles: Sequence[tuple[str, Resources]],
                         timeout: float) -> bool:
        """Until the cluster's view shows `bundles` (node, resources) free together (True),
        or `timeout` seconds passed (False). An admission that waited for gangs to go asks
        for its reservation once their room shows: on Ray, a placement group asked for
        before the GCS shows the room fails its first try and is placed only on a later
        retry of the GCS (its placement-group retry backoff, then its 1 s tick)."""

    def new_run(self, record: GangRecord, nodes: Sequence[str], attempt: int,
                on_member_ready: Callable[[MemberStatus], None]) -> GangRun:
        """A run for an admitted gang, pinned to `nodes` (one per bundle)."""

    def leftovers(self, known: Container[str]) -> Leftovers:
        """What of raygang's is in the cluster now (recovery; after an outage): `known`, the
        gang ids its parts may belong to (read while it lists them)."""

    def adopt(self, record: GangRecord, leftovers: Leftovers) -> GangRun | None:
        """A run taking over the running gang `record` if all its parts are among
        `leftovers` (else None); for an elastic gang, `record.live.surplus` is set to the
        surplus members found with it (the journal does not follow resizes)."""

    def budget(self, job_id: str) -> JobBudget | None:
        """The budget of running job `job_id` that gangs its driver submits are placed
        in (control/inside.py), or None if it runs none here."""

    async def fetch(self, results: list[Any]) -> list[Any]:
        """The values behind the results a run returned (to keep them in the store)."""

    def restore_results(self, values: list[Any]) -> list[Any]:
        """Results read back from the store, in the form a run returns them."""

    async def job_logs(self, ray_job_id: str) -> str:
        """What a job's driver printed (`ray_job_id`: one attempt's job in the cluster)."""


@dataclass(frozen=True)
class Tallies:
    """What the loop counts for the gauges beyond (state, queue): what it has at hand, and
    the queue report as a call (fair shares cost a water-fill: only metrics that export
    them make it)."""

    kinds: Mapping[tuple[GangState, str], int] = field(default_factory=dict)  # (state, kind)
    waits: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (queue, wait code):
    # the pending gangs the last cycle explained
    queues: Callable[[], Sequence[QueueReport]] | None = None
    longest_wait: Mapping[str, float] = field(default_factory=dict)  # queue -> seconds the
    # longest-waiting gang the last cycle explained has been pending
    reachable: bool = True  # whether the cluster (Ray's GCS) answers (`control.sight`)


class Metrics(Protocol):
    def admitted(self, record: GangRecord, now: float) -> None: ...
    def preempted(self, victim: GangRecord, preemptor: GangRecord,
                  preemption: Preemption) -> None: ...
    def finished(self, record: GangRecord) -> None: ...
    def resized(self, record: GangRecord, added: int, removed: int) -> None: ...
    def restarted(self, record: GangRecord) -> None: ...
    def cycle_started(self) -> float: ...
    def phase_done(self, phase: str, since: float) -> float: ...
    def cycle_done(self, started: float, plan: Plan) -> None: ...
    def refresh(self, gangs: Iterable[GangRecord], queues: Sequence[QueueSpec],
                counts: Mapping[tuple[GangState, str], int] | None = None,
                tallies: Tallies | None = None) -> None: ...


class NoMetrics:
    """Metrics that go nowhere (the in-memory cluster, the simulator)."""

    def admitted(self, record: GangRecord, now: float) -> None:
        pass

    def preempted(self, victim: GangRecord, preemptor: GangRecord,
                  preemption: Preemption) -> None:
        pass

    def finished(self, record: GangRecord) -> None:
        pass

    def resized(self, record: GangRecord, added: int, removed: int) -> None:
        pass

    def restarted(self, record: GangRecord) -> None:
        pass

    def cycle_started(self) -> float:
        return 0.0

    def phase_done(self, phase: str, since: float) -> float:
        return 0.0

    def cycle_done(self, started: float, plan: Plan) -> None:
        pass

    def refresh(self, gangs: Iterable[GangRecord], queues: Sequence[QueueSpec],
                counts: Mapping[tuple[GangState, str], int] | None = None,
                tallies: Tallies | None = None) -> None:
        pass


class Scaling(Protocol):
    """Sizing the cluster to the queue (runtime/scheduler/scaling.py's `ScaleDriver`)."""

    requested: dict[str, Any]  # gang id -> the nodes requested for it
    draining: dict[str, float]  # node id -> when it was asked to go
    groups: list[Any]
    fresh: dict[str, Any]  # requests the last step made: gang id -> (group, nodes)

    async def step(self, observe: Callable[[], ClusterSnapshot],
                   waiting: Sequence[PendingGang],
                   busy_nodes: Collection[str],
                   planned: Callable[[], None] | None = None) -> ScalePlan | None:
        """One decision and its requests; `planned` is called once the decision is made,
        before its requests go out (`note` answers from it then: a request may take
        seconds, e.g. while Ray's autoscaling coordinator starts)."""
        ...

    def note(self, gang_id: str) -> str | None: ...

    def status(self) -> ScalingStatus: ...
