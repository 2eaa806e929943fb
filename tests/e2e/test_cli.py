"""The `raygang` CLI as a user runs it: a subprocess against the session's real API server
(uvicorn, auth on) and Ray cluster. Every gang a test submits is finished or cancelled by
its end (the `gangs` fixture cancels what is left; `ray_cluster` checks for leaks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.api_server import FINISHED, ApiServer, free_port, wait_for_state
from tests.conftest import SCHEDULER_CONFIG


def run_cli(*args: str, api: ApiServer | None = None, token: str | None = "admin",
            address: str | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """`python -m raygang.cli.main ARGS` with RAYGANG_ADDRESS/RAYGANG_TOKEN set; no RAY_*
    variables (the CLI must not need them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYGANG_"))}
    env["COLUMNS"] = "250"  # wide tables: rows on one line each
    if address or api:
        env["RAYGANG_ADDRESS"] = address or api.url
    if token and api:
        env["RAYGANG_TOKEN"] = api.token(token) if token in ("admin", "team-a", "team-b") else token
    return subprocess.run([sys.executable, "-m", "raygang.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def one_error_line(done: subprocess.CompletedProcess, code: int) -> str:
    """The run failed with `code` and said so in exactly one `error: ` line."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


def spec_file(folder: Path, name: str, seconds: float = 1, replicas: int = 2,
              queue: str = "default", entrypoint: str = "raygang.demo:sleep",
              resources: str = "{CPU: 1}") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nqueue: {queue}\nroles:\n"
        f"  - name: worker\n    replicas: {replicas}\n    resources: {resources}\n"
        f"    entrypoint: {entrypoint}\n    args: [{seconds}]\n"
    )
    return path


def get(api: ApiServer, gang_id: str) -> dict:
    with api.client("admin") as client:
        return client.get(f"/v1/gangs/{gang_id}").json()


def wait_for(api: ApiServer, gang_id: str, states: set[str], timeout: float = 90) -> dict:
    with api.client("admin") as client:
        return wait_for_state(client, gang_id, states, timeout)


@pytest.fixture
def gangs(api_server: ApiServer, ray_cluster):
    """Ids of the gangs a test submitted; whatever is unfinished is cancelled after it."""
    ids: list[str] = []
    yield ids
    with api_server.client("admin") as client:
        for gang_id in ids:
            if client.get(f"/v1/gangs/{gang_id}").json()["state"] not in FINISHED:
                client.delete(f"/v1/gangs/{gang_id}")


def submit(api: ApiServer, gangs: list[str], spec: Path, *args: str,
           token: str = "admin") -> subprocess.CompletedProcess:
    done = run_cli("submit", str(spec), *args, api=api, token=token)
    if done.returncode == 0 or done.stdout.strip():
        gangs.append(done.stdout.splitlines()[0].strip())
    return done


# Gangs --------------------------------------------------------------------------------
def test_submit_wait_then_list_status_and_explain(api_server, gangs, tmp_path):
    done = submit(api_server, gangs, spec_file(tmp_path, "cli-demo"), "--wait")
    out = ok(done).splitlines()
    gang_id = out[0]
    assert gang_id.startswith("cli-demo-")
    # not a terminal: one plain line per state change, ending in SUCCEEDED
    progress = [line.split()[1] for line in out[1:]]
    assert progress[-1] == "SUCCEEDED" and "RUNNING" in progress, out
    assert all(line.split()[0].endswith("s") for line in out[1:]), out

    listed = ok(run_cli("list", "--queue", "default", api=api_server))
    row = next(line for line in listed.splitlines() if gang_id in line)
    assert row.split()[:4] == [gang_id, "default", "100", "SUCCEEDED"], row
    assert "POSITION" in listed and "AGE" in listed
    page = json.loads(ok(run_cli("list", "--state", "succeeded", "-o", "json", api=api_server)))
    assert gang_id in [g["gang_id"] for g in page["items"]]
    assert all(g["state"] == "SUCCEEDED" for g in page["items"])

    status = ok(run_cli("status", gang_id, api=api_server))
    final = get(api_server, gang_id)
    for member in final["members"]:
        assert member["node_id"] in status and member["actor_name"] in status
    for state in ("PENDING", "ADMITTED", "RESERVED", "STARTING", "RUNNING", "SUCCEEDED"):
        assert state in status
    assert json.loads(ok(run_cli("status", gang_id, "-o", "json", api=api_server))) == final

    explained = ok(run_cli("explain", gang_id, api=api_server))
    assert f"gang {gang_id} is SUCCEEDED in queue default" in explained
    assert "preempted 0 time(s)" in explained and "last 5 events" in explained


def test_a_failing_gang_exits_1_with_its_error(api_server, gangs, tmp_path):
    spec = spec_file(tmp_path, "cli-fail", seconds='"boom"', replicas=1,
                     entrypoint="raygang.demo:fail")
    line = one_error_line(submit(api_server, gangs, spec, "--wait"), 1)
    assert line.startswith(f"error: gang {gangs[0]} FAILED: ") and "RuntimeError: boom" in line


def test_the_same_idempotency_key_gives_the_same_gang(api_server, gangs, tmp_path):
    spec = spec_file(tmp_path, "cli-retry", replicas=1)
    key = f"cli-test-{time.time_ns()}"
    first = ok(submit(api_server, gangs, spec, "--idempotency-key", key))
    again = ok(submit(api_server, gangs, spec, "--idempotency-key", key, "--wait"))
    assert first.splitlines()[0] == again.splitlines()[0]
    other = ok(submit(api_server, gangs, spec, "--wait"))  # a new key per invocation
    assert other.splitlines()[0] != first.splitlines()[0]


def test_cancel_a_running_gang_and_explain_a_pending_one(api_server, gangs, tmp_path):
    # All 8 GPUs, then one more GPU in the same queue: it waits behind.
    big = spec_file(tmp_path, "cli-big", seconds=60, replicas=2, resources="{GPU: 4}")
    big_id = ok(submit(api_server, gangs, big)).strip()
    wait_for(api_server, big_id, {"RUNNING"})
    small = spec_file(tmp_path, "cli-small", seconds=1, replicas=1, resources="{GPU: 1}")
    small_id = ok(submit(api_server, gangs, small)).strip()
    assert wait_for(api_server, small_id, {"PENDING"})["reason"]

    explained = ok(run_cli("explain", small_id, api=api_server))
    assert f"gang {small_id} is PENDING in queue default" in explained
    assert "why: " in explained and "queue position: 1" in explained
    assert "its queue (and parents)" in explained and "GPU 8/" in explained, explained

    cluster = ok(run_cli("cluster", api=api_server))
    assert sum(f"{big_id}" in line for line in cluster.splitlines()) == 2, cluster

    cancelled = ok(run_cli("cancel", big_id, api=api_server))
    assert cancelled.startswith(f"{big_id} CANCELLED"), cancelled
    assert ok(run_cli("cancel", big_id, api=api_server)).startswith(f"{big_id} CANCELLED")
    wait_for(api_server, small_id, {"SUCCEEDED"})
    line = one_error_line(run_cli("cancel", small_id, api=api_server), 1)
    assert line == f"error: gang {small_id} already SUCCEEDED"


# Queues and cluster -------------------------------------------------------------------
def test_queues_and_cluster_tables(api_server):
    queues = ok(run_cli("queues", api=api_server))
    header = queues.splitlines()[0].split()
    assert header == ["NAME", "PARENT", "QUOTA", "LIMIT", "USAGE", "FAIR", "SHARE", "PENDING",
                      "RUNNING"]
    rows = {line.split()[0]: line for line in queues.splitlines()[2:] if line.strip()}
    assert {"default", "team-a", "team-b"} <= set(rows)
    team_a = next(q for q in SCHEDULER_CONFIG.queues if q.name == "team-a")
    assert f"GPU {team_a.quota['GPU']:g}" in rows["team-a"], rows["team-a"]
    as_json = json.loads(ok(run_cli("queues", "-o", "json", api=api_server)))
    assert {q["name"] for q in as_json} >= {"default", "team-a", "team-b"}
    # a team token sees its own queue only
    mine = json.loads(ok(run_cli("queues", "-o", "json", api=api_server, token="team-a")))
    assert [q["name"] for q in mine] == ["team-a"]

    cluster = ok(run_cli("cluster", api=api_server))
    nodes = json.loads(ok(run_cli("cluster", "-o", "json", api=api_server)))["nodes"]
    assert len(nodes) == 3
    for node in nodes:
        assert node["name"] in cluster
    assert cluster.count("/4 ") + cluster.count("/4\n") >= 2  # two workers of 4 GPUs


# Errors -------------------------------------------------------------------------------
def test_an_invalid_spec_names_the_field(api_server, tmp_path):
    line = one_error_line(run_cli("submit", str(spec_file(tmp_path, "x", replicas=0)),
                                  api=api_server), 1)
    assert line.startswith("error: roles[0].replicas: "), line


def test_local_file_problems_are_usage_errors(api_server, tmp_path):
    missing = one_error_line(run_cli("submit", str(tmp_path / "nope.yaml"), api=api_server), 2)
    assert missing == f"error: cannot read {tmp_path / 'nope.yaml'}: No such file or directory"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nroles: [\n  - {name: w\n")
    assert "not valid YAML (line" in one_error_line(run_cli("submit", str(bad), api=api_server), 2)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just a string\n")
    assert "expected a mapping" in one_error_line(
        run_cli("deploy", str(scalar), api=api_server), 2)


def test_a_wrong_token_is_refused(api_server, tmp_path):
    line = one_error_line(run_cli("list", api=api_server, token="not-a-token-0123456789"), 1)
    assert line == "error: missing or unknown bearer token"
    no_token = one_error_line(run_cli("queues", address=api_server.url, token=None), 1)
    assert no_token.startswith("error: missing or unknown bearer token (no token given")


def test_a_team_token_may_not_use_another_teams_queue(api_server, tmp_path):
    spec = spec_file(tmp_path, "cli-theirs", queue="team-b")
    line = one_error_line(run_cli("submit", str(spec), api=api_server, token="team-a"), 1)
    assert line == "error: token 'team-a' may not use queue 'team-b'"
    line = one_error_line(run_cli("list", "--queue", "team-b", api=api_server, token="team-a"), 1)
    assert line == "error: token 'team-a' may not use queue 'team-b'"


def test_an_unreachable_api_exits_3():
    url = f"http://127.0.0.1:{free_port()}"
    line = one_error_line(run_cli("list", address=url), 3)
    assert line == f"error: cannot reach the raygang API at {url}: connection refused"


# A deployment made and removed with the CLI: tests/e2e/test_api_deployments.py (one Serve).
def test_deploy_and_undeploy_errors(api_server, tmp_path):
    spec = tmp_path / "serve.yaml"
    spec.write_text("name: cli-app\nreplicas: 1\nresources: {CPU: 1}\n")
    line = one_error_line(run_cli("deploy", str(spec), api=api_server), 1)
    assert line.startswith("error: import_path: required over REST"), line
    line = one_error_line(run_cli("undeploy", "no-such-app", api=api_server), 1)
    assert line == "error: no deployment named 'no-such-app'"
    line = one_error_line(run_cli("status", "no-such-gang", api=api_server), 1)
    assert "no-such-gang" in line


# Commands that join a Ray cluster ------------------------------------------------------
def test_api_help():
    out = ok(run_cli("api", "--help"))
    assert "--tokens-file" in out and "--no-auth" in out and "--ray-address" in out


def test_start_without_a_reachable_ray_cluster_says_how_to_start_one():
    started = time.monotonic()
    done = run_cli("start", "--address", f"127.0.0.1:{free_port()}", "--no-auth", timeout=60)
    line = one_error_line(done, 3)
    assert "cannot reach the Ray cluster at" in line
    assert "ray start --head --num-gpus 4" in line
    assert time.monotonic() - started < 30


def test_start_refuses_a_bad_config_file_before_joining_ray(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("no_such_knob: 1\n")
    line = one_error_line(run_cli("start", "--address", "127.0.0.1:1", "--config",
                                  str(config)), 2)
    assert "no_such_knob" in line


def test_no_auth_and_tokens_file_exclude_each_other(tmp_path):
    done = run_cli("api", "--no-auth", "--tokens-file", str(tmp_path / "t.yaml"))
    line = one_error_line(done, 2)
    assert line == "error: --no-auth and --tokens-file exclude each other (see raygang api --help)"


@pytest.mark.parametrize("args, says", [
    (["submit"], "error: Missing argument 'SPEC.yaml'."),
    (["list", "--state", "sleeping"], "error: Invalid value for '--state': 'sleeping'"),
    (["list", "--limit", "5000"], "error: Invalid value for '--limit': 5000 is not in the range"),
    (["frobnicate"], "error: No such command 'frobnicate'."),
])
def test_usage_errors_are_one_line_and_exit_2(args, says):
    line = one_error_line(run_cli(*args), 2)
    assert line.startswith(says) and line.endswith("--help)"), line
