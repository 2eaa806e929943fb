"""The REST API over real HTTP (uvicorn) against the real scheduler on a real Ray cluster:
every route, status code and auth rule."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from tests.api_server import FINISHED, ApiServer, wait_for_state
from tests.conftest import SCHEDULER_CONFIG

QUOTAS = {q.name: dict(q.quota.items()) for q in SCHEDULER_CONFIG.queues}


def gang_body(name: str, queue: str = "default", seconds: float = 0.5, replicas: int = 2,
              **extra) -> dict:
    role = {"name": "worker", "replicas": replicas, "resources": {"CPU": 1},
            "entrypoint": "raygang.demo:sleep", "args": [seconds]}
    return {"name": name, "queue": queue, "roles": [role], **extra}


def gpu_gang(name: str, priority: str, replicas: int, gpus: int, seconds: float = 300,
             queue: str = "default") -> dict:
    body = gang_body(name, queue=queue, seconds=seconds, replicas=replicas, priority=priority)
    body["roles"][0]["resources"] = {"GPU": gpus, "CPU": 1}
    return body


def gang_count(client: httpx.Client) -> int:
    """Every gang the admin sees (all of them), finished or not."""
    return client.get("/v1/gangs", params={"limit": 1}).json()["total"]


def wait_until(client: httpx.Client, gang_id: str, holds: Callable[[dict], bool],
               what: str, timeout: float = 60) -> dict:
    """Poll `GET /v1/gangs/{id}` until `holds(status)`; the status then."""
    deadline = time.time() + timeout
    while True:
        status = client.get(f"/v1/gangs/{gang_id}").json()
        if holds(status):
            return status
        assert time.time() < deadline, f"{gang_id}: no {what} after {timeout}s: {status}"
        time.sleep(0.2)


@pytest.fixture
def admin(api_server: ApiServer, ray_cluster):
    with api_server.client("admin") as client:
        yield client


@pytest.fixture
def as_team(api_server: ApiServer):
    clients = {who: api_server.client(who) for who in ("team-a", "team-b")}
    yield clients
    for client in clients.values():
        client.close()


def test_health_and_readiness(api_server):
    with api_server.client(None) as anonymous:
        assert anonymous.get("/healthz").json()["status"] == "ok"
        ready = anonymous.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        assert set(ready.json()["scheduler"]) == {"gangs", "cycles"}


def test_submit_run_and_inspect_a_gang(admin):
    created = admin.post("/v1/gangs", json=gang_body("rest-demo"))
    assert created.status_code == 201, created.text
    gang_id = created.json()["gang_id"]
    assert created.headers["location"] == f"/v1/gangs/{gang_id}" == created.json()["location"]

    running = wait_for_state(admin, gang_id, {"RUNNING", "SUCCEEDED"})
    assert len(running["members"]) == 2 and all(m["node_id"] for m in running["members"])
    done = wait_for_state(admin, gang_id, {"SUCCEEDED"})
    states = [e["to_state"] for e in done["events"]]
    assert states == ["PENDING", "ADMITTED", "RESERVED", "STARTING", "RUNNING", "SUCCEEDED"]
    assert all(e["at"] >= done["submitted_at"] for e in done["events"])
    assert done["preemptions"] == 0 and done["queue_position"] is None

    # a finished gang cannot be cancelled
    conflict = admin.delete(f"/v1/gangs/{gang_id}")
    assert conflict.status_code == 409 and "already SUCCEEDED" in conflict.json()["detail"]


def test_a_member_that_cannot_import_its_code_fails_the_gang_with_the_reason(admin):
    body = gang_body("no-code")
    body["roles"][0]["entrypoint"] = "nosuch_package.module:main"
    gang_id = admin.post("/v1/gangs", json=body).json()["gang_id"]
    failed = wait_for_state(admin, gang_id, {"FAILED"})
    assert failed["error"]["error_type"] == "ModuleNotFoundError"
    assert "No module named 'nosuch_package'" in failed["reason"]


def test_idempotency_key_makes_retries_safe(admin, as_team):
    body = gang_body("retried", queue="team-a")
    first = admin.post("/v1/gangs", json=body, headers={"Idempotency-Key": "job-42"})
    again = admin.post("/v1/gangs", json=body, headers={"Idempotency-Key": "job-42"})
    assert first.status_code == again.status_code == 201
    assert first.json()["gang_id"] == again.json()["gang_id"]
    # the same key for another submission is a conflict, never a silent second gang
    other = admin.post("/v1/gangs", json={**body, "name": "other"},
                       headers={"Idempotency-Key": "job-42"})
    assert other.status_code == 409 and "job-42" in other.json()["detail"]
    # keys belong to their token: team-a's "job-42" is another gang
    theirs = as_team["team-a"].post("/v1/gangs", json=body, headers={"Idempotency-Key": "job-42"})
    assert theirs.status_code == 201 and theirs.json()["gang_id"] != first.json()["gang_id"]
    named = [g for g in admin.get("/v1/gangs", params={"queue": "team-a", "limit": 1000})
             .json()["items"] if g["name"] == "retried"]
    assert len(named) == 2
    for gang in named:
        wait_for_state(admin, gang["gang_id"], {"SUCCEEDED"})


@pytest.mark.parametrize("body, field, says", [
    (gang_body("x", replicas=0), "roles[0].replicas", "greater than or equal to 1"),
    ({**gang_body("x"), "strategy": "DIAGONAL"}, "strategy", "STRICT_PACK"),
    ({**gang_body("bad name!")}, "name", "should match pattern"),
    ({"name": "x", "roles": [{"name": "w", "entrypoint": "not an import path"}]},
     "roles[0].entrypoint", "should match pattern"),
    ({"name": "x", "roles": [{"name": "w", "entrypoint": "a:b", "after": ["w"]}]},
     "roles[0].after", "cannot wait for itself"),
    ({**gang_body("x"), "surprise": 1}, "surprise", "Extra inputs are not permitted"),
])
def test_invalid_specs_are_422_naming_the_field(admin, body, field, says):
    response = admin.post("/v1/gangs", json=body)
    assert response.status_code == 422, response.text
    errors = response.json()["errors"]
    assert any(e["field"] == field and says in e["message"] for e in errors), errors
    assert response.json()["detail"].startswith(field)


def test_requests_the_scheduler_refuses_are_4xx_with_the_reason(admin):
    huge = gang_body("huge")
    huge["roles"][0]["resources"] = {"GPU": 64}
    never = admin.post("/v1/gangs", json=huge)
    assert never.status_code == 422 and "can never be admitted" in never.json()["detail"]

    unknown_class = admin.post("/v1/gangs", json=gang_body("x", priority="urgent"))
    assert unknown_class.status_code == 422
    assert "unknown priority class 'urgent'" in unknown_class.json()["detail"]

    unknown_queue = admin.post("/v1/gangs", json=gang_body("x", queue="nosuch"))
    assert unknown_queue.status_code == 422 and "nosuch" in unknown_queue.json()["detail"]

    malformed = admin.post("/v1/gangs", content=b"{not json",
                           headers={"Content-Type": "application/json"})
    assert malformed.status_code == 422

    too_large = admin.post("/v1/gangs", content=b" " * (2 << 20),
                           headers={"Content-Type": "application/json"})
    assert too_large.status_code == 413 and "over" in too_large.json()["detail"]
    chunked = admin.post("/v1/gangs", content=(b" " * 65536 for _ in range(40)),
                         headers={"Content-Type": "application/json"})  # no Content-Length
    assert chunked.status_code == 413

    assert admin.get("/v1/gangs", params={"state": "SLEEPING"}).status_code == 422
    assert admin.get("/v1/gangs", params={"limit": 0}).status_code == 422
    assert admin.post("/v1/gangs", json=gang_body("x"),
                      headers={"Idempotency-Key": "has spaces"}).status_code == 422


def test_unknown_things_are_404(admin):
    for method, path in [("GET", "/v1/gangs/nope-1234"), ("DELETE", "/v1/gangs/nope-1234"),
                         ("GET", "/v1/deployments/nope"), ("DELETE", "/v1/deployments/nope"),
                         ("GET", "/v1/nothing-here")]:
        response = admin.request(method, path)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["detail"]


def test_list_filter_and_paginate(admin):
    ids = [admin.post("/v1/gangs", json=gang_body(f"page-{i}", queue="team-b", seconds=0.1))
           .json()["gang_id"] for i in range(3)]
    for gang_id in ids:
        wait_for_state(admin, gang_id, {"SUCCEEDED"})
    everything = admin.get("/v1/gangs", params={"queue": "team-b", "limit": 1000}).json()
    assert [g["gang_id"] for g in everything["items"]][-3:] == ids  # submission order

    seen, offset = [], 0
    while offset is not None:
        page = admin.get("/v1/gangs", params={"queue": "team-b", "limit": 2,
                                              "offset": offset}).json()
        assert page["total"] == everything["total"] and len(page["items"]) <= 2
        seen += [g["gang_id"] for g in page["items"]]
        offset = page["next_offset"]
    assert seen == [g["gang_id"] for g in everything["items"]]
    newest = admin.get("/v1/gangs", params={"queue": "team-b", "limit": 3, "order": "newest"})
    assert [g["gang_id"] for g in newest.json()["items"]] == ids[::-1]

    succeeded = admin.get("/v1/gangs", params={"queue": "team-b", "state": "SUCCEEDED",
                                               "limit": 1000}).json()
    assert set(ids) <= {g["gang_id"] for g in succeeded["items"]}
    assert admin.get("/v1/gangs", params={"queue": "team-b", "state": "RUNNING"}).json()[
        "total"] == 0


def test_cancel_a_running_gang_frees_everything(admin):
    gang_id = admin.post("/v1/gangs", json=gang_body("long", seconds=300)).json()["gang_id"]
    wait_for_state(admin, gang_id, {"RUNNING"})
    cancelled = admin.delete(f"/v1/gangs/{gang_id}")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "CANCELLED"
    assert cancelled.json()["reason"] == "cancelled by admin (REST)"
    again = admin.delete(f"/v1/gangs/{gang_id}")  # a retried DELETE is harmless
    assert again.status_code == 200 and again.json()["state"] == "CANCELLED"


def test_dry_run_queues_and_cluster(admin, as_team):
    before = gang_count(admin)
    dry = admin.post("/v1/gangs/dry-run", json=gang_body("what-if", queue="team-a"))
    assert dry.status_code == 200 and dry.json()["outcome"] == "admit"
    assert dry.json()["nodes"] and dry.json()["reason"].startswith("would be admitted now on ")
    # nothing was submitted: no gang more, and none named so among the newest of its queue
    assert gang_count(admin) == before
    newest = admin.get("/v1/gangs", params={"queue": "team-a", "limit": 10, "order": "newest"})
    assert "what-if" not in {g["name"] for g in newest.json()["items"]}

    gang_id = admin.post("/v1/gangs", json=gpu_gang("holder", "training", 2, 1,
                                                    queue="team-a")).json()["gang_id"]
    theirs = admin.post("/v1/gangs", json=gang_body("theirs", queue="team-b", seconds=300,
                                                    replicas=1)).json()["gang_id"]
    try:
        wait_for_state(admin, gang_id, {"RUNNING"})
        wait_for_state(admin, theirs, {"RUNNING"})
        queues = {q["name"]: q for q in admin.get("/v1/queues").json()}
        assert {"default", "team-a", "team-b", "load"} <= set(queues)
        assert queues["team-a"]["usage"]["GPU"] == 2
        assert queues["team-a"]["quota"] == QUOTAS["team-a"]
        assert queues["team-a"]["running"] == 1 and queues["load"]["limit"] == {"GPU": 1}

        cluster = admin.get("/v1/cluster").json()
        assert cluster["total"]["GPU"] == 8
        held = [b for n in cluster["nodes"] for b in n["bundles"] if b["gang_id"] == gang_id]
        assert sorted(b["rank"] for b in held) == [0, 1]
        assert all(b["resources"] == {"CPU": 1, "GPU": 1} for b in held)
        for node in cluster["nodes"]:
            assert node["used"].get("GPU", 0) >= sum(
                b["resources"].get("GPU", 0) for b in node["bundles"])

        # A team token sees where its own gangs sit, not another team's; their resources
        # still count as used on the nodes.
        def bundles(view: dict) -> dict[str, str]:
            return {b["gang_id"]: b["queue"] for n in view["nodes"] for b in n["bundles"]}

        assert bundles(cluster)[theirs] == "team-b" and bundles(cluster)[gang_id] == "team-a"
        team_a_view = as_team["team-a"].get("/v1/cluster")
        assert team_a_view.status_code == 200
        assert bundles(team_a_view.json()) == {gang_id: "team-a"}
        assert sum(n["used"].get("CPU", 0) for n in team_a_view.json()["nodes"]) >= 3
        assert bundles(as_team["team-b"].get("/v1/cluster").json()) == {theirs: "team-b"}
    finally:
        admin.delete(f"/v1/gangs/{gang_id}")
        admin.delete(f"/v1/gangs/{theirs}")


def test_dry_runs_that_preempt_or_wait_then_a_real_preemption(admin):
    """All 8 GPUs held by a batch gang in `default`: a training gang would preempt it, a
    batch gang would wait first in line; then both are submitted for real."""
    holder = admin.post("/v1/gangs", json=gpu_gang("low", "batch", 2, 4)).json()["gang_id"]
    started: list[str] = [holder]
    try:
        wait_for_state(admin, holder, {"RUNNING"})
        before = gang_count(admin)

        preempt = admin.post("/v1/gangs/dry-run", json=gpu_gang("urgent", "training", 1, 1))
        assert preempt.status_code == 200, preempt.text
        answer = preempt.json()
        assert answer["outcome"] == "preempt", answer
        assert [(v["gang_id"], v["name"], v["action"]) for v in answer["victims"]] == [
            (holder, "low", "preempt")]
        assert answer["victims"][0]["reason"] and len(answer["nodes"]) == 1
        assert "1 gang(s)" in answer["reason"]

        wait = admin.post("/v1/gangs/dry-run", json=gpu_gang("patient", "batch", 1, 1)).json()
        assert wait["outcome"] == "wait" and wait["victims"] == [], wait
        assert wait["reason"] and wait["code"] and wait["queue_position"] == 1
        # neither dry run did anything
        assert gang_count(admin) == before
        assert admin.get(f"/v1/gangs/{holder}").json()["state"] == "RUNNING"

        # The waiting gang for real: PENDING, why, first in line.
        blocked = admin.post("/v1/gangs", json=gpu_gang("patient", "batch", 1, 1, seconds=0.5))
        started.append(blocked.json()["gang_id"])
        status = wait_until(admin, started[-1], lambda g: bool(g["reason"]), "pending reason")
        assert status["state"] == "PENDING" and status["queue_position"] == 1, status
        assert status["reason"] == wait["reason"]

        # The preemptor for real: the batch gang is preempted once, and says by whom.
        urgent = admin.post("/v1/gangs", json=gpu_gang("urgent", "training", 1, 1,
                                                       seconds=0.5)).json()["gang_id"]
        started.append(urgent)
        wait_for_state(admin, urgent, {"SUCCEEDED"})
        low = wait_until(admin, holder, lambda g: g["preemptions"] >= 1, "preemption")
        assert low["preemptions"] == 1
        preempted = [e for e in low["events"] if e["to_state"] == "PREEMPTED"]
        assert len(preempted) == 1 and urgent in preempted[0]["reason"], low["events"]
        after = [e["to_state"] for e in low["events"]]
        assert after[after.index("PREEMPTED") + 1] == "PENDING"  # requeued, same id
    finally:
        for gang_id in started:
            if admin.get(f"/v1/gangs/{gang_id}").json()["state"] not in FINISHED:
                admin.delete(f"/v1/gangs/{gang_id}")


def test_auth_rules(api_server, admin, as_team):
    with api_server.client(None) as anonymous:
        missing = anonymous.get("/v1/gangs")
        assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
        wrong = anonymous.get("/v1/gangs", headers={"Authorization": "Bearer not-a-token"})
        assert wrong.status_code == 401
        basic = anonymous.get("/v1/gangs", headers={"Authorization": "Basic YWRtaW46eA=="})
        assert basic.status_code == 401
        assert anonymous.get("/v1/queues").status_code == 401

    team_a, team_b = as_team["team-a"], as_team["team-b"]
    forbidden = team_a.post("/v1/gangs", json=gang_body("x", queue="team-b"))
    assert forbidden.status_code == 403 and "may not use queue 'team-b'" in forbidden.json()["detail"]
    # team-b may use its queue, but only the classes it was given
    assert team_b.post("/v1/gangs", json=gang_body("x", queue="team-b", priority="inference")
                       ).status_code == 403
    assert team_b.post("/v1/gangs", json=gang_body("x", queue="team-b", priority=5000)
                       ).status_code == 403
    assert team_b.post("/v1/gangs/dry-run", json=gang_body("x", queue="team-a")).status_code == 403

    mine = team_a.post("/v1/gangs", json=gang_body("mine", queue="team-a", seconds=0.1))
    theirs = team_b.post("/v1/gangs", json=gang_body("theirs", queue="team-b", seconds=0.1))
    mine_id, theirs_id = mine.json()["gang_id"], theirs.json()["gang_id"]
    # each team sees its own queue's gangs and queues only; the admin sees all
    listed = team_a.get("/v1/gangs", params={"limit": 1000}).json()["items"]
    assert mine_id in {g["gang_id"] for g in listed} and {g["queue"] for g in listed} == {"team-a"}
    assert team_a.get(f"/v1/gangs/{theirs_id}").status_code == 403
    assert team_a.delete(f"/v1/gangs/{theirs_id}").status_code == 403
    assert team_a.get("/v1/gangs", params={"queue": "team-b"}).status_code == 403
    assert [q["name"] for q in team_a.get("/v1/queues").json()] == ["team-a"]
    assert admin.get(f"/v1/gangs/{theirs_id}").status_code == 200
    # only admins configure queues
    assert team_a.put("/v1/queues/team-a", json={"name": "team-a"}).status_code == 403
    for gang_id in (mine_id, theirs_id):
        wait_for_state(admin, gang_id, {"SUCCEEDED"})


def test_admin_configures_a_queue(admin):
    created = admin.put("/v1/queues/api-made", json={"name": "api-made", "quota": {"GPU": 1},
                                                      "limit": {"GPU": 2}, "weight": 2})
    assert created.status_code == 200, created.text
    queue = {q["name"]: q for q in created.json()}["api-made"]
    assert queue["quota"] == {"GPU": 1} and queue["limit"] == {"GPU": 2} and queue["weight"] == 2
    mismatch = admin.put("/v1/queues/api-made", json={"name": "other"})
    assert mismatch.status_code == 422 and "path" in mismatch.json()["detail"]
    bad = admin.put("/v1/queues/api-made", json={"name": "api-made", "quota": {"GPU": 3},
                                                  "limit": {"GPU": 2}})
    assert bad.status_code == 422 and "quota" in bad.json()["detail"]
    orphan = admin.put("/v1/queues/api-made", json={"name": "api-made", "parent": "nosuch"})
    assert orphan.status_code == 422 and "nosuch" in orphan.json()["detail"]
    # a gang may now be submitted to it
    gang_id = admin.post("/v1/gangs", json=gang_body("in-new-queue", queue="api-made",
                                                     seconds=0.1)).json()["gang_id"]
    wait_for_state(admin, gang_id, {"SUCCEEDED"})
