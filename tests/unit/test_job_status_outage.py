"""A running job's status read while Ray's GCS does not answer is no word: asked again
for as long as Ray's own processes wait for the GCS (`gcs_reconnect_s`, this process's
`RAY_gcs_rpc_server_reconnect_timeout_s`), never the job taken for ended. Before, a fixed
60 s bound failed (and restarted) the job where Ray waits longer (KubeRay: 600 s)."""

from __future__ import annotations

import asyncio

import pytest
from ray.exceptions import GetTimeoutError

from raygang.core.workload_specs import JobSpec
from raygang.runtime.kinds.job.launch import JobLaunch
from raygang.runtime.ray_private import gcs_reconnect_s


class _Unanswered:
    """Ray's job status as the GCS gives it: no answer for `down` reads, then RUNNING."""

    def __init__(self, down: int):
        self.down = down
        self.asked = 0

    async def status(self, job_id: str) -> str | None:
        self.asked += 1
        if self.asked <= self.down:
            raise GetTimeoutError("the GCS does not answer")
        return "RUNNING"


def _launch(client: _Unanswered) -> JobLaunch:
    job = JobSpec(entrypoint="true", gpus=1)
    return JobLaunch("j-1", job.gang_spec(), job, ["node-a"], 0,
                     client, 5.0, {}, lambda _: None)  # type: ignore[arg-type]


def test_the_bound_is_rays_reconnect_timeout_of_this_process(monkeypatch):
    monkeypatch.delenv("RAY_gcs_rpc_server_reconnect_timeout_s", raising=False)
    assert gcs_reconnect_s() == 60.0  # Ray's default
    monkeypatch.setenv("RAY_gcs_rpc_server_reconnect_timeout_s", "600")
    assert gcs_reconnect_s() == 600.0


def test_an_outage_within_it_is_waited_out(monkeypatch):
    monkeypatch.setenv("RAY_gcs_rpc_server_reconnect_timeout_s", "600")
    client = _Unanswered(down=2)
    assert asyncio.run(asyncio.wait_for(_launch(client)._status(), 10)) == "RUNNING"
    assert client.asked == 3


def test_past_it_the_error_is_raised(monkeypatch):
    # A short reconnect timeout: raised after ~1.5 s (a fixed 60 s would wait them out)
    monkeypatch.setenv("RAY_gcs_rpc_server_reconnect_timeout_s", "1.5")
    with pytest.raises(GetTimeoutError):
        asyncio.run(asyncio.wait_for(_launch(_Unanswered(down=100))._status(), 10))
