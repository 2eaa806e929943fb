"""`raygang job ...` as a user runs it: a subprocess against the session's real API server
(auth on) and Ray cluster, whose Job Submission API starts the jobs. Two Ray jobs in all
(a `print` and a `sleep` holding the `load` queue); every job is stopped by the end of its
test (the `jobs` fixture of test_jobs_rest). The request body a command builds is checked
offline, on httpx's mock transport."""

from __future__ import annotations

import json
import shlex
import sys

import httpx
import pytest

from raygang.cli import jobs as job_commands
from raygang.cli import main as cli_main
from raygang.cli.http import ApiClient
from raygang.core.spec import Strategy
from tests.e2e.test_cli import ok, one_error_line, run_cli
from tests.e2e.test_jobs_rest import jobs, wait_for_job  # noqa: F401 - a fixture

PY = sys.executable
GREETING = f"{PY} -c \"import os; print(os.environ['GREETING'], 'from the cli')\""


def submit(api, jobs: list[str], *args: str, token: str = "admin"):  # noqa: F811
    done = run_cli("job", "submit", *args, api=api, token=token)
    if done.returncode == 0 or done.stdout.strip():
        jobs.append(done.stdout.splitlines()[0].strip())
    return done


def test_submit_wait_then_list_status_and_logs(api_server, jobs):  # noqa: F811
    command = shlex.split(GREETING)
    done = submit(api_server, jobs, "--queue", "team-a", "--name", "cli-hello", "--gpus", "1",
                  "--env", "GREETING=hello", "--wait", "--", *command, token="team-a")
    out = ok(done).splitlines()
    job_id = out[0]
    assert job_id.startswith("cli-hello-")
    progress = [line.split()[1] for line in out[1:]]  # a line per state change seen
    assert progress[-1] == "SUCCEEDED" and len(progress) >= 2, out  # (RUNNING may be brief)

    with api_server.client("admin") as admin:
        final = wait_for_job(admin, job_id, {"SUCCEEDED"})
    assert final["entrypoint"] == shlex.join(command)  # what the shell runs, quoted
    ray_job = f"raygang-{job_id}-0"
    assert final["ray_job_id"] == ray_job

    listed = ok(run_cli("job", "list", "--queue", "team-a", api=api_server, token="team-a"))
    header, row = listed.splitlines()[0], next(r for r in listed.splitlines() if job_id in r)
    assert header.split() == ["ID", "QUEUE", "STATE", "POSITION", "AGE", "RAY", "JOB",
                              "REASON"], header
    assert row.split()[:4] == [job_id, "team-a", "SUCCEEDED", "-"] and ray_job in row, row
    page = json.loads(ok(run_cli("job", "list", "--state", "succeeded", "-o", "json",
                                 api=api_server)))
    assert job_id in [j["gang_id"] for j in page["items"]]
    assert {j["state"] for j in page["items"]} == {"SUCCEEDED"}
    assert {j["kind"] for j in page["items"]} == {"job"}

    status = ok(run_cli("job", "status", job_id, api=api_server, token="team-a"))
    assert ray_job in status and "os.environ" in status and "SUCCEEDED" in status
    as_json = json.loads(ok(run_cli("job", "status", job_id, "-o", "json", api=api_server)))
    assert as_json["gang_id"] == job_id and as_json["ray_job_id"] == ray_job

    logs = ok(run_cli("job", "logs", job_id, api=api_server, token="team-a"))
    assert "hello from the cli" in logs

    line = one_error_line(run_cli("job", "stop", job_id, api=api_server), 1)
    assert line == f"error: job {job_id} already SUCCEEDED"
    line = one_error_line(run_cli("job", "logs", job_id, api=api_server, token="team-b"), 1)
    assert line == "error: token 'team-b' may not use queue 'team-a'"


def test_stop_a_queued_job_and_the_one_it_waits_for(api_server, jobs):  # noqa: F811
    long = submit(api_server, jobs, "--queue", "load", "--name", "cli-long", "--gpus", "1",
                  "--grace", "2", "--", PY, "-c", "import time; time.sleep(60)")
    long_id, state = ok(long).splitlines()
    assert state.split()[0] in ("PENDING", "ADMITTED", "RESERVED", "STARTING", "RUNNING")
    with api_server.client("admin") as admin:
        wait_for_job(admin, long_id, {"RUNNING"}, timeout=60)

    queued = submit(api_server, jobs, "--queue", "load", "--name", "cli-queued", "--gpus",
                    "1", "--", PY, "-c", "print('never')")
    queued_id, state = ok(queued).splitlines()
    assert state.startswith("PENDING"), state
    with api_server.client("admin") as admin:  # its reason comes with the next cycle
        wait_for_job(admin, queued_id, {"PENDING"}, timeout=30,
                     until=lambda job: job["queue_position"] == 1 and job["reason"])

    status = ok(run_cli("job", "status", queued_id, api=api_server))
    assert "queue position  1" in status and "not started" in status, status
    logs = run_cli("job", "logs", queued_id, api=api_server)
    assert ok(logs) == "" and logs.stderr == \
        f"job {queued_id} has not started (PENDING): no output yet\n"

    stopped = ok(run_cli("job", "stop", queued_id, api=api_server))
    assert stopped == f"{queued_id} CANCELLED: stopped by admin (REST)\n"
    stopped = ok(run_cli("job", "stop", long_id, api=api_server))
    assert stopped.startswith(f"{long_id} CANCELLED")
    with api_server.client("admin") as admin:
        assert admin.get(f"/v1/jobs/{queued_id}").json()["ray_job_id"] is None
        assert admin.get(f"/v1/jobs/{long_id}").json()["ray_job_id"] == f"raygang-{long_id}-0"
    cancelled = ok(run_cli("job", "list", "--queue", "load", "--state", "cancelled",
                           api=api_server))
    assert queued_id in cancelled and long_id in cancelled


# Refusals -------------------------------------------------------------------------------
@pytest.mark.parametrize("args, says", [
    (["--gpus", "1", "--name", "bad name!"], "error: --name: String should match pattern"),
    (["--resources", '{"GPU": "many"}'], "error: --resources: resource 'GPU' must be a number"),
    (["--gpus", "1", "--env", "A=1", "--working-dir", "/tmp",
      "--runtime-env", '{"working_dir": "/srv"}'],
     "error: --working-dir: also set in runtime_env; give it once"),
    (["--gpus", "1", "--priority", "urgent"], "error: --priority: unknown priority class"),
    (["--gpus", "64"], "error: job 'job' can never be admitted: "),
])
def test_a_field_the_api_refuses_is_named_by_its_option(api_server, args, says):
    line = one_error_line(run_cli("job", "submit", *args, "--", "true", api=api_server), 1)
    assert line.startswith(says), line


@pytest.mark.parametrize("args, says", [
    (["--resources", "{GPU: 1}"], "error: --resources: not valid JSON (column 2): "),
    (["--bundle", "[1]"], 'error: --bundle: expected a JSON object such as {"GPU": 1}, got a list'),
    (["--gpus", "1", "--runtime-env", "null"], "error: --runtime-env: expected a JSON object"),
    (["--gpus", "1", "--env", "NOVALUE"], "error: --env: expected KEY=VALUE, got 'NOVALUE'"),
    (["--gpus", "0"], "error: Invalid value for '--gpus': 0 is not in the range x>=1."),
    (["--gpus", "1", "--resources", '{"GPU": 1}'], "error: --gpus and --resources exclude"),
    ([], "error: say what the job needs: --gpus N, --resources JSON or --bundle JSON"),
    (["--gpus", "1", "--strategy", "diagonal"], "error: Invalid value for '--strategy'"),
])
def test_bad_options_are_usage_errors_before_any_request(args, says):
    line = one_error_line(run_cli("job", "submit", *args, "--", "true",
                                  address="http://127.0.0.1:1"), 2)
    assert line.startswith(says), line


def test_a_command_is_required():
    line = one_error_line(run_cli("job", "submit", "--gpus", "1"), 2)
    assert line == ("error: Missing argument '-- COMMAND...'. "
                    "(see raygang job submit --help)")


def test_a_team_token_may_not_submit_to_another_teams_queue(api_server):
    line = one_error_line(run_cli("job", "submit", "--queue", "team-b", "--gpus", "1", "--",
                                  "true", api=api_server, token="team-a"), 1)
    assert line == "error: token 'team-a' may not use queue 'team-b'"
    line = one_error_line(run_cli("job", "list", "--queue", "team-b", api=api_server,
                                  token="team-a"), 1)
    assert line == "error: token 'team-a' may not use queue 'team-b'"
    line = one_error_line(run_cli("job", "stop", "nope-1234", api=api_server), 1)
    assert line == "error: no job with id 'nope-1234'"


# The request a command sends (no server) -------------------------------------------------
def test_the_cli_knows_every_strategy():
    assert job_commands.STRATEGIES == tuple(s.value for s in Strategy)


def test_submit_sends_the_options_as_a_job_spec(monkeypatch, capsys):
    sent: list[httpx.Request] = []

    def api(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if request.method == "POST":
            return httpx.Response(201, json={"gang_id": "train-1", "location": "/v1/jobs/train-1"})
        return httpx.Response(200, json={"gang_id": "train-1", "state": "PENDING",
                                         "queue_position": 2, "reason": "queue full"})

    monkeypatch.setattr(cli_main, "ApiClient", lambda address, token: ApiClient(
        address, token, transport=httpx.MockTransport(api)))
    with pytest.raises(SystemExit) as ended:
        cli_main.main(["--address", "http://api.test", "job", "submit", "--queue", "team-a",
                       "--priority", "500", "--bundle", '{"GPU": 1, "CPU": 4}', "--resources",
                       '{"GPU": 2, "CPU": 8}', "--strategy", "spread", "--working-dir",
                       "s3://bucket/code.zip", "--name", "train", "--grace", "45", "--env",
                       "A=1", "--env", "B=x=y", "--max-restarts", "2", "--idempotency-key",
                       "k-1", "python", "train.py", "--epochs", "3", "it's"])
    out = capsys.readouterr()
    assert ended.value.code == 0, out.err
    assert out.out == "train-1\nPENDING queue position 2: queue full\n"
    post, get = sent
    assert (post.url.path, post.headers["Idempotency-Key"]) == ("/v1/jobs", "k-1")
    assert json.loads(post.content) == {
        "entrypoint": "python train.py --epochs 3 'it'\"'\"'s'", "queue": "team-a",
        "name": "train", "priority": 500, "resources": {"GPU": 2, "CPU": 8},
        "bundle": {"GPU": 1, "CPU": 4}, "strategy": "SPREAD",
        "working_dir": "s3://bucket/code.zip", "env_vars": {"A": "1", "B": "x=y"},
        "preemption_grace_s": 45.0, "max_restarts": 2,
    }
    assert get.url.path == "/v1/jobs/train-1"
