"""A job whose submission Ray's Job Submission API never answers fails its start at the
startup timeout (and is stopped if Ray accepts it later), instead of waiting for ever in
STARTING. Seen when the dashboard's job agent could not bind its port: the head's job
module retries the agent without end, and the HTTP call never returns."""

from __future__ import annotations

import asyncio
import socket

import pytest

from raygang.control.ports import MemberFailure
from raygang.core.workload_specs import JobSpec
from raygang.runtime.kinds.job.launch import JobLaunch
from raygang.runtime.kinds.job.submission import JobClient


def test_a_submission_never_answered_fails_the_start_at_the_startup_timeout():
    # A dashboard that takes connections and never answers: they wait in the backlog.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        job = JobSpec(entrypoint="true", gpus=1, startup_timeout_s=1.0)
        client = JobClient(f"http://127.0.0.1:{silent.getsockname()[1]}")
        launch = JobLaunch("j-1", job.gang_spec(), job, ["node-a"], 0, client, 5.0, {},
                           lambda _: None)

        async def start() -> MemberFailure:
            try:
                with pytest.raises(MemberFailure) as failure:
                    # Far beyond the startup timeout: without it, the start never ends.
                    await asyncio.wait_for(launch.start_members(), 30)
                return failure.value
            finally:  # the waiting connections are reset: the submitting thread ends
                silent.close()

        failure = asyncio.run(start())
        assert failure.error.error_type == "StartupTimeout"
        assert "did not accept job raygang-j-1-0 within 1s" in failure.error.message
        assert launch._abandoned  # if Ray accepts it after all, it stops it at once
    finally:
        silent.close()
