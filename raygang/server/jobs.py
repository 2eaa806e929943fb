"""`/v1/jobs`: Ray Jobs queued by raygang. A job waits in its queue like any gang (its id
is a gang id: `/v1/gangs/{id}` shows it too) and is started through Ray's Job Submission
API once admitted; these routes show only jobs, with their Ray job id, entrypoint and
output. The same per-queue token rules as for gangs apply."""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations.

from collections.abc import Callable
from typing import Annotated, Literal

from fastapi import FastAPI, Header, Query, Response

from raygang.control.api import SchedulerAPI
from raygang.core.gang import GangState
from raygang.core.spec import NAME_PATTERN
from raygang.core.workload_specs import JobSpec
from raygang.control.status import GangStatus
from raygang.server.access import Access, ApiError, Caller
from raygang.server.models import (
    IDEMPOTENCY_KEY,
    MAX_PAGE,
    GangCreated,
    GangPage,
    JobLogs,
    Problem,
)


def job_routes(app: FastAPI, scheduler: SchedulerAPI, access: Access,
               clock: Callable[[], float]) -> None:
    visible_job = access.visible_job

    @app.post("/v1/jobs", status_code=201, response_model=GangCreated, tags=["jobs"],
              responses={409: {"model": Problem, "description": "Idempotency-Key reused"}})
    async def submit_job(
        job: JobSpec,
        who: Caller,
        response: Response,
        idempotency_key: Annotated[
            str | None,
            Header(pattern=IDEMPOTENCY_KEY,
                   description="retries with the same key never queue a second job"),
        ] = None,
    ) -> GangCreated:
        """Queue a Ray Job: `entrypoint` (a shell command) is started through Ray's Job
        Submission API once the capacity it declares (`gpus`, `resources` or `bundle`) is
        admitted and reserved. `working_dir` is a path on the cluster or a URI."""
        access.authorize_submission(who, job.queue, job.priority)
        key = f"{who.name}:{idempotency_key}" if idempotency_key else None
        gang_id = await scheduler.submit_job(job, key)
        location = f"/v1/jobs/{gang_id}"
        response.headers["Location"] = location
        return GangCreated(gang_id=gang_id, location=location)

    @app.get("/v1/jobs", response_model=GangPage, tags=["jobs"])
    async def list_jobs(
        who: Caller,
        queue: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
        state: GangState | None = None,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
        order: Annotated[Literal["oldest", "newest"], Query(
            description="submission order, oldest first (default) or newest first")] = "oldest",
    ) -> GangPage:
        """Jobs in submission order, filtered by queue and state, one page at a time."""
        if queue is not None:
            access.check_queue(who, queue)
        jobs = [j for j in await scheduler.list_jobs(state)
                if who.may_use_queue(j.queue) and (queue is None or j.queue == queue)]
        if order == "newest":
            jobs.reverse()
        total = len(jobs)
        more = offset + limit < total
        return GangPage(items=jobs[offset:offset + limit], total=total, offset=offset,
                        limit=limit, next_offset=offset + limit if more else None, now=clock())

    @app.get("/v1/jobs/{gang_id}", response_model=GangStatus, tags=["jobs"],
             responses={404: {"model": Problem}})
    async def get_job(gang_id: str, who: Caller) -> GangStatus:
        """State, pending reason and queue position, the Ray job id of its last attempt
        (null before it started), entrypoint, error and history."""
        return await visible_job(who, gang_id)

    @app.get("/v1/jobs/{gang_id}/logs", response_model=JobLogs, tags=["jobs"],
             responses={404: {"model": Problem}})
    async def job_logs(gang_id: str, who: Caller) -> JobLogs:
        """The output of the job's Ray job (its last attempt's); empty before it started."""
        status = await visible_job(who, gang_id)
        logs = await scheduler.job_logs(gang_id) if status.ray_job_id else ""
        return JobLogs(gang_id=gang_id, state=status.state, ray_job_id=status.ray_job_id,
                       logs=logs)

    @app.delete("/v1/jobs/{gang_id}", response_model=GangStatus, tags=["jobs"],
                responses={404: {"model": Problem}, 409: {"model": Problem}})
    async def stop_job(gang_id: str, who: Caller) -> GangStatus:
        """Stop a job: a queued one never starts; a running one gets SIGTERM (Train runs
        inside it, Train's preemption signal), its grace period, then a hard stop.
        Returns once it is stopped. Stopping a cancelled job again is a no-op; a finished
        one is a 409."""
        status = await visible_job(who, gang_id)
        if status.state in (GangState.SUCCEEDED, GangState.FAILED):
            raise ApiError(409, f"job {gang_id} already {status.state.value}")
        return await scheduler.cancel(gang_id, f"stopped by {who.name} (REST)")
