"""`GET /v1/debug/cycle` over real HTTP (the session's uvicorn API, auth on) against the
real scheduler: admin tokens get a cycle's inputs and plan, other tokens a 403; the
answer, saved to a file, replays with `raygang sim --replay-cycle` (a process of its own)
to the plan the scheduler made."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.api_server import ApiServer, wait_for_state


def gang(name: str) -> dict:
    return {"name": name, "queue": "load", "priority": "batch",
            "roles": [{"name": "worker", "resources": {"GPU": 1},
                       "entrypoint": "raygang.demo:sleep", "args": [60]}]}


def test_an_admin_dumps_a_cycle_that_replays_from_the_command_line(api_server: ApiServer,
                                                                   ray_cluster, tmp_path):
    with api_server.client("admin") as admin, api_server.client("team-a") as team, \
            api_server.client(None) as nobody:
        refused = team.get("/v1/debug/cycle")
        assert refused.status_code == 403
        assert refused.json()["detail"].startswith("token 'team-a' is not an admin")
        assert nobody.get("/v1/debug/cycle").status_code == 401
        ids = []
        try:
            for name in ("dump-running", "dump-waiting"):
                created = admin.post("/v1/gangs", json=gang(name))
                assert created.status_code == 201, created.text
                ids.append(created.json()["gang_id"])
            wait_for_state(admin, ids[0], {"RUNNING"})
            answer = admin.get("/v1/debug/cycle")
            assert answer.status_code == 200, answer.text
            dump = answer.json()
            assert [g["gang_id"] for g in dump["backlog"]["load"]] == [ids[1]]
            assert dump["plan"]["waiting"][ids[1]]["code"] == "LIMIT"
            path = tmp_path / "cycle.json"
            path.write_text(answer.text)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYGANG_"))}
            done = subprocess.run([sys.executable, "-m", "raygang.cli.main", "sim",
                                   "--replay-cycle", str(path)], env=env,
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, (done.stdout, done.stderr)
            assert "LIMIT: queue 'load'" in done.stdout
            assert done.stdout.splitlines()[-1] == "same plan as the scheduler made"
        finally:
            for gang_id in ids:
                admin.delete(f"/v1/gangs/{gang_id}", timeout=120)
