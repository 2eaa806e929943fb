"""Ray Jobs queued by raygang (`raygang.submit_job`), started through Ray's Job Submission
API on the shared real cluster (its head runs the dashboard, which serves that API)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import ray
from ray import serve
from ray.job_submission import JobStatus, JobSubmissionClient
from ray.util.state import list_actors

import raygang
from raygang import GangState
from raygang.runtime.ray_private import dashboard_url
from tests.integration.helpers import wait_state, wait_until

PY = sys.executable


@pytest.fixture
def jobs(ray_cluster):
    """Jobs a test submits: stopped afterwards; then no Ray job of raygang's may run."""
    refs: list = []
    yield refs
    for ref in refs:
        ref.stop()
    client = JobSubmissionClient(dashboard_url())
    running = [j.submission_id for j in client.list_jobs()
               if (j.submission_id or "").startswith("raygang-")
               and not JobStatus(j.status).is_terminal()]
    assert running == []


@raygang.gang_task(num_gpus=1, priority=500)
def preemptor(seconds: float):
    time.sleep(seconds)
    return "done"


def test_a_job_queued_behind_another_runs_after_it_and_a_stopped_one_never_starts(
        jobs, tmp_path):
    marks = tmp_path / "order.txt"
    line = "import sys, time; time.sleep({}); open({!r}, 'a').write(sys.argv[1] + chr(10))"
    first = raygang.submit_job(f"{PY} -c \"{line.format(3, str(marks))}\" first",
                               gpus=1, queue="load", name="first")
    jobs.append(first)
    wait_state(first, GangState.RUNNING, timeout=60)
    second = raygang.submit_job(f"{PY} -c \"{line.format(0, str(marks))}\" second",
                                gpus=1, queue="load", name="second")
    third = raygang.submit_job(f"{PY} -c \"{line.format(0, str(marks))}\" third",
                               gpus=1, queue="load", name="third")
    jobs.extend([second, third])
    # A place in line is the last cycle's: a job submitted after it has none until the
    # next (a cycle at most a second away; CI read one too early).
    status = wait_until(lambda: (s := second.status()).queue_position and s, timeout=10)
    assert status.state is GangState.PENDING and status.queue_position == 1
    assert status.ray_job_id is None and "limit" in status.reason
    assert wait_until(lambda: third.status().queue_position, timeout=10) == 2

    stopped = third.stop()
    assert stopped.state is GangState.CANCELLED and stopped.ray_job_id is None

    assert second.wait(timeout=90).state is GangState.SUCCEEDED
    assert first.status().state is GangState.SUCCEEDED
    assert marks.read_text().split() == ["first", "second"]  # third never started
    listed = {s.gang_id: s for s in raygang.list_jobs()}
    assert listed[second.gang_id].entrypoint.endswith("second")
    assert listed[second.gang_id].ray_job_id == f"raygang-{second.gang_id}-0"


FAILING = """
import os, ray
ray.init()
# A task of the job, as Train's PlacementGroupCleaner is: its state API finds the cluster
# by RAY_ADDRESS, else the newest on the machine (the other test clusters here).
seen = ray.get(ray.remote(num_cpus=0)(lambda: os.environ.get("RAY_ADDRESS")).remote())
print(f"a task sees RAY_ADDRESS={seen}", flush=True)
print("about to fail", flush=True)
raise SystemExit(3)
"""


def test_a_job_s_output_and_failure_are_reported_and_its_tasks_know_their_cluster(
        jobs, tmp_path):
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    failing = raygang.submit_job(f"{PY} {script}", gpus=1, name="failing")
    jobs.append(failing)
    status = failing.wait(timeout=90)
    assert status.state is GangState.FAILED
    assert status.error.error_type == "JobFailed" and "about to fail" in status.error.message
    logs = failing.logs()
    assert "about to fail" in logs
    assert f"a task sees RAY_ADDRESS={ray.get_runtime_context().gcs_address}" in logs


RESUMING = """
import os, signal, sys, time
attempt = int(os.environ["RAYGANG_ATTEMPT"])
open(sys.argv[1], "a").write(f"attempt {attempt} job {os.environ['RAYGANG_JOB_ID']}\\n")
signal.signal(signal.SIGTERM, lambda *a: (open(sys.argv[1], "a").write("sigterm\\n"),
                                          sys.exit(0)))
time.sleep(0 if attempt else 120)
"""


def test_a_preempted_job_gets_sigterm_requeues_and_runs_its_entrypoint_again(jobs, tmp_path):
    script, marks = tmp_path / "resume.py", tmp_path / "attempts.txt"
    script.write_text(RESUMING)
    job = raygang.submit_job(f"{PY} {script} {marks}", gpus=8, name="big",
                             preemption_grace_s=5)
    jobs.append(job)
    wait_state(job, GangState.RUNNING, timeout=60)
    while not marks.exists():
        time.sleep(0.2)
    first_ray_job = job.status().ray_job_id
    urgent = preemptor.remote(3)
    assert urgent.result(timeout=90) == ["done"]
    status = job.wait(timeout=120)
    assert status.state is GangState.SUCCEEDED and status.preemptions == 1
    assert marks.read_text().splitlines() == [
        f"attempt 0 job {job.gang_id}", "sigterm", f"attempt 1 job {job.gang_id}"]
    assert status.ray_job_id == f"raygang-{job.gang_id}-1" != first_ray_job
    client = JobSubmissionClient(dashboard_url())
    assert client.get_job_status(first_ray_job) == JobStatus.STOPPED


def test_a_train_run_inside_a_job_runs_in_its_budget_and_a_stop_reaches_it_through_train(
        jobs, tmp_path):
    # One Train run serves both checks (each Train start costs ~20 s on a loaded machine);
    # a Train script run to its end inside a job is examples/train_job.py's (tests/e2e).
    script = Path(__file__).parents[2] / "examples" / "jobs" / "train.py"
    job = raygang.submit_job(f"{PY} {script} {tmp_path / 'storage'} 400", gpus=2,
                             name="stopped", preemption_grace_s=10)
    jobs.append(job)
    deadline = time.time() + 120
    while "starts at step" not in job.logs():
        assert time.time() < deadline and job.status().state in (
            GangState.PENDING, GangState.ADMITTED, GangState.RESERVED, GangState.STARTING,
            GangState.RUNNING), job.logs()
        time.sleep(0.5)
    # The driver (Ray's supervisor actor) runs on the node of the job's first bundle, not
    # on the head, where Ray puts drivers given no resources.
    status = job.status()
    driver = status.members[0]
    supervisor = list_actors(filters=[("name", "=", driver.actor_name)], detail=True)
    assert [a.node_id for a in supervisor] == [driver.node_id]
    assert driver.node_id != ray.get_runtime_context().get_node_id()
    # The run was not queued as a gang of its own: it uses the job's two bundles.
    assert not [g for g in raygang.list_gangs() if g.kind == "train"
                and g.name == "resumable"]
    assert {q.name: q.usage.get("GPU", 0) for q in raygang.queues()}["default"] == 2

    status = job.stop()
    assert status.state is GangState.CANCELLED
    # The workers were told through Train's preemption path and checkpointed before the
    # driver got SIGTERM.
    logs = job.logs()
    assert "preempted: checkpoint saved at step" in logs, logs
    assert list((tmp_path / "storage" / "resumable").glob("checkpoint_*")), logs


GANGS_IN_JOB = """
import json, sys, time
import ray, raygang
from ray import serve

@serve.deployment
class Hello:
    def __call__(self, request):
        return "hello"

@raygang.gang_task(num_gpus=1)
def where(seconds):
    time.sleep(seconds)
    return ray.get_runtime_context().get_node_id()

ray.init()
refs = [where.options(name=f"inner{i}").remote(3) for i in range(3)]
while sum(r.status().state.value == "RUNNING" for r in refs) < 2:
    time.sleep(0.2)
print("STATES", json.dumps([[s.state.value, s.parent, s.reason]
                            for s in (r.status() for r in refs)]), flush=True)
print("NODES", json.dumps([r.result(timeout=120)[0] for r in refs]), flush=True)
where.options(name="long").remote(600).ready(timeout=60)
raygang.deploy("inner-hello", Hello.bind(), num_gpus=1).ready(timeout=120)
print("ALL RUNNING", flush=True)
time.sleep(600)
"""


def test_gangs_a_job_s_driver_submits_run_inside_its_budget_and_end_with_it(jobs, tmp_path,
                                                                           http_port):
    # http_port: Serve started on this module's port (and shut down after it), not by the
    # scheduler on its default one, which later modules' Serve would find running.
    script = tmp_path / "gangs.py"
    script.write_text(GANGS_IN_JOB)
    job = raygang.submit_job(f"{PY} {script}", gpus=2, name="gangjob", queue="team-a")
    jobs.append(job)
    deadline = time.time() + 180
    while "ALL RUNNING" not in (logs := job.logs()):
        assert time.time() < deadline and not job.status().finished, logs
        time.sleep(0.5)
    # Two of the three 1-GPU gangs ran in the job's 2 bundles; the third waited for one.
    states = json.loads(next(line for line in logs.splitlines() if "STATES" in line)
                        .split("STATES ", 1)[1])
    assert sorted(s[0] for s in states) == ["PENDING", "RUNNING", "RUNNING"], states
    assert {s[1] for s in states} == {job.gang_id}
    waiting = next(s for s in states if s[0] == "PENDING")
    assert waiting[2].startswith(f"waiting for room inside job {job.gang_id}'s budget")
    # On the job's nodes, and counted once: the queue's usage is the job's 2 GPUs.
    held = {b.gang_id: n.node_id for n in raygang.cluster().nodes for b in n.bundles}
    nodes = json.loads(next(line for line in logs.splitlines() if "NODES" in line)
                       .split("NODES ", 1)[1])
    job_nodes = {n.node_id for n in raygang.cluster().nodes
                 if any(b.gang_id == job.gang_id for b in n.bundles)}
    assert set(nodes) <= job_nodes and held
    usage = {q.name: q.usage.get("GPU", 0) for q in raygang.queues()}
    assert usage["team-a"] == 2
    # A gang and a Serve app run inside it now, its whole budget.
    inside = {g.name: g for g in raygang.list_gangs()
              if g.parent == job.gang_id and not g.finished}
    assert sorted(inside) == ["inner-hello", "long"]
    assert {g.state for g in inside.values()} == {GangState.RUNNING}
    assert inside["inner-hello"].kind == "deployment"
    # Stopping the job ends what runs inside it, and leaves nothing behind (the fixtures
    # check placement groups, actors and Ray jobs).
    assert job.stop().state is GangState.CANCELLED
    for gang in inside.values():
        ended = raygang.GangRef(gang.gang_id).status()
        assert ended.state is GangState.CANCELLED
        assert ended.events[-1].reason.startswith(f"its job {job.gang_id} stopped")
    assert "inner-hello" not in serve.status().applications
