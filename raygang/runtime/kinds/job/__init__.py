"""A Ray Job on Ray: submitted through the Job Submission API into its reserved budget
(`launch.py`); the gangs and Train runs its driver starts are placed inside it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from raygang.control.kinds.job import RayJob
from raygang.control.records import GangRecord
from raygang.control.status import MemberStatus
from raygang.runtime.handoff.budget import holds_of
from raygang.runtime.kinds.job.launch import JOB_ACTOR, JobLaunch
from raygang.runtime.kinds.kind import Host, RunKind

if TYPE_CHECKING:  # the scheduler's recovery hands it in
    from raygang.runtime.scheduler.leftovers import RayLeftovers


def new_run(host: Host, record: GangRecord, nodes: Sequence[str], attempt: int,
            on_member_ready: Callable[[MemberStatus], None]) -> JobLaunch:
    payload: RayJob = record.workload

    def started(job_id: str) -> None:
        payload.ray_job_id = job_id
        # Its one member is the driver (Ray's job supervisor actor), on the node of the
        # job's first bundle.
        on_member_ready(MemberStatus(role="driver", index=0, rank=0,
                                     actor_name=JOB_ACTOR.format(job_id), node_id=nodes[0]))

    launch = JobLaunch(record.gang_id, record.spec, payload.job, nodes, attempt,
                       host.jobs, host.lease_s, host.sessions, started)
    return _track(host, record.gang_id, launch)


def adopt(host: Host, record: GangRecord, leftovers: RayLeftovers) -> JobLaunch | None:
    """A job whose Ray job Ray still has (Ray Jobs outlive the scheduler): running, or
    ended while no scheduler watched (its run then reports how it ended, as if watched:
    a job that succeeded meanwhile is not run again). None where Ray has none."""
    payload: RayJob = record.workload
    job_id = payload.ray_job_id
    if job_id is None or host.jobs.status_now(job_id) is None:
        return None
    launch = JobLaunch.adopted(record.gang_id, record.spec, payload.job, record.nodes,
                               job_id, host.jobs, host.lease_s, host.sessions,
                               holds_of(record.gang_id))
    return _track(host, record.gang_id, launch)


def _track(host: Host, gang_id: str, launch: JobLaunch) -> JobLaunch:
    """Keep the running job's launch (its budget, for what its driver submits)."""
    host.launches[gang_id] = launch

    def closed() -> None:  # this attempt's, not a later attempt's already registered
        if host.launches.get(gang_id) is launch:
            del host.launches[gang_id]

    launch.on_close = closed
    return launch


KIND = RunKind("job", new_run, adopt)
