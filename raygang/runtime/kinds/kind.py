"""What a kind of workload is on Ray: how it runs and how a restarted scheduler adopts it
(see `runtime.kinds`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from raygang.control.ports import GangRun
from raygang.control.records import GangRecord
from raygang.control.status import MemberStatus
from raygang.core.spec import MemberSlot

if TYPE_CHECKING:  # types only: each kind imports this module, and no kind imports another
    from raygang.runtime.handoff.train import TrainSession
    from raygang.runtime.kinds.job.launch import JobLaunch
    from raygang.runtime.kinds.job.submission import JobClient
    from raygang.runtime.scheduler.leftovers import RayLeftovers


class Host(Protocol):
    """What a kind's runs use of the cluster (`runtime.scheduler.cluster.RayCluster`)."""

    serve_http_port: int | None
    lease_s: float  # how long a hand-off waits for its library to claim the capacity
    jobs: JobClient
    sessions: dict[str, TrainSession]  # hand-offs under way, by id (Train runs')
    launches: dict[str, JobLaunch]  # running jobs, by gang id (their budgets)
    node_labels: dict[str, Mapping[str, str]]  # each node's labels, as last observed


@dataclass(frozen=True, slots=True)
class RunKind:
    """The Ray side of one kind (`control.kinds` has the other), under the same `name`.

    `new_run(host, record, nodes, attempt, on_member_ready)`: its run on the nodes the
    plane reserved (one per bundle of its minimum). `adopt(host, record, leftovers)`: the
    run of a RUNNING gang a restarted scheduler found whole in Ray (it may set
    `record.live.surplus` to the elastic members it found), or None."""

    name: str
    new_run: Callable[[Host, GangRecord, Sequence[str], int,
                       Callable[[MemberStatus], None]], GangRun]
    adopt: Callable[[Host, GangRecord, RayLeftovers], GangRun | None]


class NoLiveResize:
    """The `GangRun` calls of a live resize (`resize: live`), for a run that is not resized
    that way: the plane resizes an elastic gang only as its spec says."""

    async def add_members(self, members: Sequence[tuple[MemberSlot, str]]) -> list[str]:
        raise NotImplementedError(f"{type(self).__name__} is not resized live")

    async def remove_members(self, members: Sequence[MemberSlot]) -> list[str]:
        raise NotImplementedError(f"{type(self).__name__} is not resized live")


class NoRestartResize:
    """The `GangRun` calls of a resize by restart (`resize: restart`), for a run that is not
    resized that way."""

    async def reserve_members(self, members: Sequence[tuple[MemberSlot, str]]) -> None:
        raise NotImplementedError(f"{type(self).__name__} is not resized by a restart")

    async def restart(self, world: Sequence[MemberSlot],
                      stopped: Callable[[], None] | None = None) -> None:
        raise NotImplementedError(f"{type(self).__name__} is not resized by a restart")
