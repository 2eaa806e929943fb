"""`/v1/jobs` over real HTTP (the session's uvicorn API, auth on) against the real scheduler
and Ray's Job Submission API on the shared cluster: submit, list, status, logs, stop,
validation and the per-queue token rules.

Ray jobs are few and tiny (each costs seconds here): a `print`, and a `sleep` that holds
the `load` queue (limit GPU 1) while a second job waits behind it. Every job a test
submits is stopped by its end (the `jobs` fixture), and no Ray job of raygang's may be
left running; `ray_cluster` then checks that nothing else is left.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import httpx
import pytest
from ray.job_submission import JobStatus, JobSubmissionClient

from raygang.runtime.ray_private import dashboard_url
from tests.api_server import FINISHED, ApiServer

PY = sys.executable
HELLO = f"{PY} -c \"print('hello from a raygang job')\""
SLEEP = f"{PY} -c \"import time; time.sleep(60)\""


def job_body(entrypoint: str = HELLO, **fields) -> dict:
    return {"entrypoint": entrypoint, "gpus": 1, **fields}


def wait_for_job(client: httpx.Client, job_id: str, states: set[str],
                 timeout: float = 90, until: Callable[[dict], object] = bool) -> dict:
    """Poll `GET /v1/jobs/{id}` until the job is in one of `states` (and `until` holds of
    its status); its status then."""
    deadline = time.monotonic() + timeout
    while True:
        answer = client.get(f"/v1/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        status = answer.json()
        if status["state"] in states and until(status):
            return status
        assert status["state"] not in FINISHED and time.monotonic() < deadline, status
        time.sleep(0.2)


def raygang_ray_jobs_running() -> list[str]:
    client = JobSubmissionClient(dashboard_url())
    return [j.submission_id for j in client.list_jobs()
            if (j.submission_id or "").startswith("raygang-")
            and not JobStatus(j.status).is_terminal()]


@pytest.fixture
def jobs(api_server: ApiServer, ray_cluster):
    """Ids of the jobs a test submitted: whatever is unfinished is stopped after it; then
    no Ray job of raygang's may still run."""
    ids: list[str] = []
    yield ids
    with api_server.client("admin") as admin:
        for job_id in ids:
            if admin.get(f"/v1/jobs/{job_id}").json()["state"] not in FINISHED:
                admin.delete(f"/v1/jobs/{job_id}", timeout=120)
    assert raygang_ray_jobs_running() == []


@pytest.fixture
def clients(api_server: ApiServer):
    made = {who: api_server.client(who) for who in ("admin", "team-a", "team-b")}
    yield made
    for client in made.values():
        client.close()


def submit(client: httpx.Client, jobs: list[str], body: dict, **kwargs) -> httpx.Response:
    created = client.post("/v1/jobs", json=body, **kwargs)
    if created.status_code == 201:
        jobs.append(created.json()["gang_id"])
    return created


# Submit, list, status, logs ----------------------------------------------------------------
def test_a_job_runs_is_listed_and_its_output_is_kept(jobs, clients):
    team_a, team_b = clients["team-a"], clients["team-b"]
    body = job_body(queue="team-a", name="rest-hello", env_vars={"RAYGANG_TEST": "1"})
    created = submit(team_a, jobs, body, headers={"Idempotency-Key": "rest-hello-1"})
    assert created.status_code == 201, created.text
    job_id = created.json()["gang_id"]
    assert job_id.startswith("rest-hello-")
    assert created.headers["location"] == f"/v1/jobs/{job_id}" == created.json()["location"]
    again = team_a.post("/v1/jobs", json=body, headers={"Idempotency-Key": "rest-hello-1"})
    assert again.status_code == 201 and again.json()["gang_id"] == job_id  # queued once

    listed = team_a.get("/v1/jobs", params={"queue": "team-a"}).json()
    mine = [j for j in listed["items"] if j["gang_id"] == job_id]
    assert len(mine) == 1 and mine[0]["kind"] == "job" and mine[0]["entrypoint"] == HELLO
    assert listed["total"] >= 1 and listed["now"] > 0

    done = wait_for_job(team_a, job_id, {"SUCCEEDED"})
    assert done["kind"] == "job" and done["queue"] == "team-a" and done["entrypoint"] == HELLO
    assert done["ray_job_id"] == f"raygang-{job_id}-0"
    assert [e["to_state"] for e in done["events"]][-2:] == ["RUNNING", "SUCCEEDED"]
    logs = team_a.get(f"/v1/jobs/{job_id}/logs").json()
    assert logs["ray_job_id"] == done["ray_job_id"] and logs["state"] == "SUCCEEDED"
    assert "hello from a raygang job" in logs["logs"]
    succeeded = team_a.get("/v1/jobs", params={"state": "SUCCEEDED", "order": "newest",
                                               "limit": 1}).json()
    assert [j["gang_id"] for j in succeeded["items"]] == [job_id]

    finished = team_a.delete(f"/v1/jobs/{job_id}")
    assert finished.status_code == 409 and finished.json()["detail"] == \
        f"job {job_id} already SUCCEEDED"
    # Another team sees neither the job nor its output, and may not stop it.
    assert job_id not in {j["gang_id"] for j in team_b.get("/v1/jobs").json()["items"]}
    for method, path in (("GET", f"/v1/jobs/{job_id}"), ("GET", f"/v1/jobs/{job_id}/logs"),
                         ("DELETE", f"/v1/jobs/{job_id}")):
        refused = team_b.request(method, path)
        assert refused.status_code == 403, (method, path, refused.text)
        assert refused.json()["detail"] == "token 'team-b' may not use queue 'team-a'"


def test_a_queued_job_stopped_never_starts(jobs, clients):
    """`load` admits one GPU at a time: the second job waits behind the first; stopped,
    it never gets a Ray job. The first, stopped while running, ends STOPPED in Ray."""
    admin = clients["admin"]
    first = submit(admin, jobs, job_body(SLEEP, queue="load", name="rest-long"))
    assert first.status_code == 201, first.text
    first_id = first.json()["gang_id"]
    running = wait_for_job(admin, first_id, {"RUNNING"}, timeout=60)
    queued = submit(admin, jobs, job_body(HELLO, queue="load", name="rest-queued"))
    queued_id = queued.json()["gang_id"]

    # Its place in line and its reason come with the next cycle after its submission.
    deadline = time.time() + 10
    while (waiting := admin.get(f"/v1/jobs/{queued_id}").json())["queue_position"] is None \
            and time.time() < deadline:
        time.sleep(0.1)
    assert waiting["state"] == "PENDING" and waiting["queue_position"] == 1, waiting
    assert "limit" in waiting["reason"] and waiting["ray_job_id"] is None
    no_output = admin.get(f"/v1/jobs/{queued_id}/logs").json()
    assert no_output == {"gang_id": queued_id, "state": "PENDING", "ray_job_id": None,
                         "logs": ""}
    pending = admin.get("/v1/jobs", params={"queue": "load", "state": "PENDING"}).json()
    assert [j["gang_id"] for j in pending["items"]] == [queued_id]

    stopped = admin.delete(f"/v1/jobs/{queued_id}")
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["state"] == "CANCELLED" and stopped.json()["ray_job_id"] is None
    assert stopped.json()["reason"] == "stopped by admin (REST)"
    again = admin.delete(f"/v1/jobs/{queued_id}")  # a retried stop is harmless
    assert again.status_code == 200 and again.json()["state"] == "CANCELLED"

    long_stopped = admin.delete(f"/v1/jobs/{first_id}", timeout=120)
    assert long_stopped.status_code == 200 and long_stopped.json()["state"] == "CANCELLED"
    assert long_stopped.json()["ray_job_id"] == running["ray_job_id"]
    ray_jobs = JobSubmissionClient(dashboard_url())
    assert ray_jobs.get_job_status(running["ray_job_id"]) == JobStatus.STOPPED
    assert admin.get(f"/v1/jobs/{queued_id}").json()["ray_job_id"] is None  # never started


# Refusals ---------------------------------------------------------------------------------
@pytest.mark.parametrize("body, field, says", [
    ({"gpus": 1}, "entrypoint", "Field required"),
    (job_body(entrypoint=""), "entrypoint", "at least 1 character"),
    (job_body(gpus=0), "gpus", "greater than or equal to 1"),
    (job_body(resources={"GPU": "many"}), "resources", "must be a number"),
    (job_body(gpus=None, bundle={"GPU": 0}), "bundle", "needs at least one positive amount"),
    (job_body(strategy="DIAGONAL"), "strategy", "STRICT_PACK"),
    (job_body(name="bad name!"), "name", "should match pattern"),
    (job_body(env_vars={"N": 1}), "env_vars.N", "valid string"),
    (job_body(preemption_grace_s=-1), "preemption_grace_s", "greater than or equal to 0"),
    (job_body(surprise=1), "surprise", "Extra inputs are not permitted"),
    (job_body(working_dir="/tmp", runtime_env={"working_dir": "/srv"}), "working_dir",
     "also set in runtime_env"),
])
def test_an_invalid_job_is_422_naming_the_field(clients, body, field, says):
    body = {k: v for k, v in body.items() if v is not None}
    response = clients["admin"].post("/v1/jobs", json=body)
    assert response.status_code == 422, response.text
    errors = response.json()["errors"]
    assert any(e["field"] == field and says in e["message"] for e in errors), errors
    assert response.json()["detail"].startswith(field)


def test_jobs_the_scheduler_refuses_are_422_with_the_reason(clients):
    admin = clients["admin"]
    both = admin.post("/v1/jobs", json=job_body(resources={"GPU": 2}))
    assert both.status_code == 422 and both.json()["detail"].startswith("gpus, resources: give one")
    neither = admin.post("/v1/jobs", json={"entrypoint": "true"})
    assert neither.status_code == 422 and "say what the job needs" in neither.json()["detail"]
    never = admin.post("/v1/jobs", json=job_body(gpus=64))
    assert never.status_code == 422 and "can never be admitted" in never.json()["detail"]
    unknown_class = admin.post("/v1/jobs", json=job_body(priority="urgent"))
    assert unknown_class.status_code == 422
    assert "unknown priority class 'urgent'" in unknown_class.json()["detail"]
    unknown_queue = admin.post("/v1/jobs", json=job_body(queue="nosuch"))
    assert unknown_queue.status_code == 422 and "nosuch" in unknown_queue.json()["detail"]
    bad_key = admin.post("/v1/jobs", json=job_body(), headers={"Idempotency-Key": "has spaces"})
    assert bad_key.status_code == 422
    assert admin.get("/v1/jobs", params={"state": "SLEEPING"}).status_code == 422


def test_a_team_token_submits_to_its_own_queue_only(api_server, clients):
    refused = clients["team-a"].post("/v1/jobs", json=job_body(queue="team-b"))
    assert refused.status_code == 403
    assert refused.json()["detail"] == "token 'team-a' may not use queue 'team-b'"
    # team-b may use its queue, but only its priority classes
    refused = clients["team-b"].post("/v1/jobs", json=job_body(queue="team-b",
                                                               priority="inference"))
    assert refused.status_code == 403 and "may not use priority 'inference'" in \
        refused.json()["detail"]
    listing = clients["team-a"].get("/v1/jobs", params={"queue": "team-b"})
    assert listing.status_code == 403
    with api_server.client(None) as anonymous:
        assert anonymous.post("/v1/jobs", json=job_body()).status_code == 401
        assert anonymous.get("/v1/jobs").status_code == 401


def test_unknown_ids_and_other_gangs_are_404(clients, ray_cluster):
    admin = clients["admin"]
    for method, path in (("GET", "/v1/jobs/nope-1234"), ("GET", "/v1/jobs/nope-1234/logs"),
                         ("DELETE", "/v1/jobs/nope-1234")):
        response = admin.request(method, path)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["detail"] == "no job with id 'nope-1234'"
    gang = {"name": "not-a-job", "roles": [{"name": "w", "resources": {"CPU": 1},
                                            "entrypoint": "raygang.demo:sleep", "args": [0]}]}
    gang_id = admin.post("/v1/gangs", json=gang).json()["gang_id"]
    try:
        for method, path in (("GET", f"/v1/jobs/{gang_id}"), ("DELETE", f"/v1/jobs/{gang_id}"),
                             ("GET", f"/v1/jobs/{gang_id}/logs")):
            response = admin.request(method, path)
            assert response.status_code == 404, (method, path, response.text)
            assert response.json()["detail"] == f"{gang_id} is a gang, not a job"
        assert gang_id not in {j["gang_id"] for j in admin.get("/v1/jobs").json()["items"]}
    finally:
        deadline = time.monotonic() + 60
        while admin.get(f"/v1/gangs/{gang_id}").json()["state"] not in FINISHED:
            assert time.monotonic() < deadline
            time.sleep(0.2)
