"""Ray's Job Submission API, as raygang's job queue uses it (`launch.JobLaunch`): submit,
stop (and wait until Ray says the job ended), status from the GCS, logs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import ray

from raygang.runtime.ray_private import job_status, job_status_now

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
STOP_POLL_S = 0.25


def transient(error: Exception) -> bool:
    """An error worth retrying: the dashboard is unreachable, or its job agent is not
    ready ("No available agent ... try again later", for a while after Ray starts)."""
    text = str(error)
    return isinstance(error, ConnectionError) or "try again later" in text \
        or "No available agent" in text


async def stop_until_ended(client: JobClient, job_id: str, deadline: float,
                           taken: bool = False) -> str | None:
    """Stop Ray job `job_id` and wait until Ray says it ended (or `deadline`, monotonic);
    its last status (None: Ray has no such job). The stop is asked again until Ray's job
    supervisor took it (`taken`: it did already): in the moment after Ray accepts a job
    and before its supervisor actor exists, Ray's stop_job does nothing."""
    while (status := await client.status(job_id)) not in TERMINAL | {None}:
        if time.monotonic() > deadline:
            return status
        if not taken:
            taken = await asyncio.to_thread(client.stop, job_id)
        await asyncio.sleep(STOP_POLL_S)
    return status


class JobClient:
    """Ray's Job Submission API, made once per address: its calls block (run them in a
    thread), except `status`, read from the GCS."""

    def __init__(self, address: str | None):
        self._address = address
        self._client: Any = None

    def _sdk(self):
        if self._client is None:
            from ray.job_submission import JobSubmissionClient

            from raygang.runtime.ray_private import dashboard_url

            address = self._address or dashboard_url()
            if not address:
                raise RuntimeError("Ray Jobs need the Ray dashboard: this cluster runs "
                                   "without one (start Ray with include_dashboard=True, or "
                                   "set jobs_address in the scheduler config)")
            self._client = JobSubmissionClient(address)
        return self._client

    def submit(self, **kwargs: Any) -> str:
        return self._sdk().submit_job(**kwargs)

    @staticmethod
    def gcs_address() -> str | None:
        """The GCS of the cluster this process is connected to (the scheduler's)."""
        return ray.get_runtime_context().gcs_address if ray.is_initialized() else None

    async def status(self, job_id: str) -> str | None:
        """From the GCS, where the dashboard reads it too (no HTTP request per poll)."""
        return await job_status(job_id)

    def status_now(self, job_id: str) -> str | None:
        return job_status_now(job_id)

    def message(self, job_id: str) -> str:
        info = self._sdk().get_job_info(job_id)
        return info.message or ""

    def stop(self, job_id: str) -> bool:
        """Whether Ray's job supervisor took the stop (then SIGTERM, the grace, SIGKILL;
        a supervisor still setting up the runtime env stops the driver as it starts).
        False: no such job, no supervisor (yet, or any more), or the dashboard was busy."""
        try:
            return bool(self._sdk().stop_job(job_id))
        except (RuntimeError, ConnectionError) as error:
            if "does not exist" in str(error) or transient(error):
                return False
            raise

    def logs(self, job_id: str) -> str:
        return self._sdk().get_job_logs(job_id)
