"""Serve deployments over REST and the CLI: create (201), conflict (409), list, get, answer
HTTP through Serve, delete, `raygang deploy`/`undeploy` of the example spec — and the 422s
for what only REST can get wrong. Two deployments in all, one of each body shape (an
application of several deployments with per-deployment options; one deployment with
replicas and resources): each costs seconds of Serve's and replica processes here."""

from __future__ import annotations

from pathlib import Path

import httpx
from ray import serve

from raygang.runtime import serving
from tests.api_server import wait_for_state
from tests.e2e.test_cli import ok, one_error_line, run_cli


def test_deploy_over_rest_and_with_the_cli_after_someone_else_restarted_serve(
        api_server, ray_cluster, http_port):
    """`raygang.demo:pd` (router -> decode -> prefill, on CPUs) over REST: one gang of a role
    per deployment that asks for resources, options given in the body or read from the
    app; a wrong one is a 422 naming the deployment and field."""
    body = {"name": "rest-pd", "import_path": "raygang.demo:pd", "queue": "team-a",
            "deployments": {"Prefill": {"replicas": 2}}}
    with api_server.client("admin") as admin, api_server.client("team-b") as team_b:
        unknown = admin.post("/v1/deployments", json={**body, "deployments": {"Prefil": {}}})
        assert unknown.status_code == 422, unknown.text
        assert unknown.json()["errors"][0] == {
            "field": "deployments.Prefil", "message": "the application has no deployment "
            "'Prefil' (its deployments: Prefill, Decode, Router)"}
        zero = admin.post("/v1/deployments", json={**body, "deployments": {"Decode": {
            "replicas": 0}}})
        assert zero.status_code == 422
        assert zero.json()["errors"][0]["field"] == "deployments.Decode.replicas"
        no_path = admin.post("/v1/deployments", json={"name": "bare", "replicas": 1})
        assert no_path.status_code == 422 and no_path.json()["detail"].startswith("import_path")
        bad_path = admin.post("/v1/deployments", json={"name": "bad", "import_path": "no-colon"})
        assert bad_path.status_code == 422
        assert team_b.post("/v1/deployments", json={**body, "name": "x", "queue": "team-b"}
                           ).status_code == 403  # team-b may not use the inference class

        created = admin.post("/v1/deployments", json=body)
        assert created.status_code == 201, created.text
        assert created.headers["location"] == "/v1/deployments/rest-pd"
        gang_id = created.json()["gang_id"]
        try:
            again = admin.post("/v1/deployments", json=body)
            assert again.status_code == 409 and "undeploy it first" in again.json()["detail"]
            running = wait_for_state(admin, gang_id, {"RUNNING"}, timeout=180)
            assert running["kind"] == "deployment" and running["priority"] == 1000
            assert running["world_size"] == 3  # the router asks for nothing: not a role
            assert sorted((m["role"], m["index"]) for m in running["members"]) == [
                ("Decode", 0), ("Prefill", 0), ("Prefill", 1)]
            answer = httpx.get(f"http://127.0.0.1:{http_port}/rest-pd?prompt=abc", timeout=30)
            assert answer.json() == {"text": "cba", "path": "/rest-pd"}
            listed = admin.get("/v1/deployments").json()  # an earlier test's may have ended
            assert [d["name"] for d in listed if d["state"] == "RUNNING"] == ["rest-pd"]
            assert admin.get("/v1/deployments/rest-pd").json()["gang_id"] == gang_id
            # another team neither sees nor deletes it
            assert team_b.get("/v1/deployments").json() == []
            assert team_b.delete("/v1/deployments/rest-pd").status_code == 403
        finally:
            deleted = admin.delete("/v1/deployments/rest-pd")
        assert deleted.status_code == 200 and deleted.json()["state"] == "CANCELLED"
        assert deleted.json()["reason"] == "undeployed"

    # Another driver shuts Serve down and starts a new one: the scheduler's cached Serve
    # handle is stale, and the next deployment must still run, not die on RayActorError.
    serve.shutdown()
    serving.ensure_serve_started(http_port)

    # The example spec (one deployment: replicas and resources), as docs/interfaces.md
    # tells users to run it.
    spec = Path(__file__).parents[2] / "examples" / "specs" / "chat.yaml"
    out = ok(run_cli("deploy", str(spec), api=api_server)).strip()
    assert out.startswith("deployment chat: gang chat-"), out
    gang_id = out.rsplit(" ", 1)[1]
    try:
        with api_server.client("admin") as admin:
            running = wait_for_state(admin, gang_id, {"RUNNING"}, timeout=180)
            listed = admin.get("/v1/deployments").json()
        assert running["kind"] == "deployment" and running["world_size"] == 2
        assert [(d["name"], d["gang_id"]) for d in listed if d["state"] == "RUNNING"] == [
            ("chat", gang_id)]
        answer = httpx.get(f"http://127.0.0.1:{http_port}/chat", timeout=30)
        assert answer.status_code == 200 and answer.json()["path"] == "/chat"
    finally:
        undeployed = run_cli("undeploy", "chat", api=api_server)
    assert ok(undeployed) == "deployment chat: CANCELLED\n"
    with api_server.client("admin") as admin:
        assert [d for d in admin.get("/v1/deployments").json() if d["state"] == "RUNNING"] == []
        assert admin.get(f"/v1/gangs/{gang_id}").json()["reason"] == "undeployed"
    line = one_error_line(run_cli("undeploy", "chat", api=api_server), 1)
    assert line == "error: no deployment named 'chat'"
