"""Jobs stopped or preempted at every point of their start: before raygang submits them to
Ray, while the submission is under way (a `working_dir` being uploaded), while Ray sets up
the driver's runtime env, and once the driver runs. However the stop falls, no Ray job of
theirs is left running, and no two attempts of one job ever run at once.

`RAYGANG_JOB_RACE_TRIES` sets how many jobs are stopped or preempted (default 8, half of
each; the check of issue 28 is 200)."""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from ray.job_submission import JobStatus, JobSubmissionClient

import raygang
from raygang import GangState
from raygang.runtime.ray_private import dashboard_url, job_status_now

TRIES = int(os.environ.get("RAYGANG_JOB_RACE_TRIES", "8"))
PER_ROUND = 4  # jobs of 2 GPUs: the cluster's 8
# Each try stops (or preempts) its job a while after one point of its start, spread over
# that phase: once submitted to raygang (queued, admitted, its holds made, the submission
# to Ray under way), once Ray has it (the runtime env set up, the supervisor starting),
# once its entrypoint runs. Points, not times: the phases' lengths vary with the load.
POINTS = {"submitted": 0.6, "in Ray": 1.2, "running": 0.3}  # -> the phase's spread (s)

# Attempt 0 runs until stopped, later attempts end at once. Each holds a lock on its job's
# file while its process lives: an attempt that finds it taken ran beside another.
ENTRYPOINT = r"""
import fcntl, os, sys, time
job, attempt = os.environ["RAYGANG_JOB_ID"], int(os.environ["RAYGANG_ATTEMPT"])
open(os.path.join(sys.argv[1], "started"), "a").write(f"{job} {attempt}\n")
lock = open(os.path.join(sys.argv[1], job + ".lock"), "a")
try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    open(os.path.join(sys.argv[1], "overlaps"), "a").write(f"{job} attempt {attempt}\n")
    raise SystemExit(1)
time.sleep(0 if attempt else 120)
"""


@raygang.gang_task(num_gpus=4, replicas=2, priority=500, preemption_grace_s=0)
def preemptor():
    return "done"


class RayJobs:
    """Ray's own view of the test's jobs, polled in the background: which attempts of one
    job were pending or running at the same time."""

    def __init__(self):
        self.client = JobSubmissionClient(dashboard_url())
        self.gangs: set[str] = set()
        self.overlaps: set[str] = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def ours(self) -> dict[str, dict[int, object]]:
        """gang id -> attempt -> Ray's JobDetails."""
        found: dict[str, dict[int, object]] = {}
        for job in self.client.list_jobs():
            gang, _, attempt = (job.submission_id or "").removeprefix("raygang-") \
                .rpartition("-")
            if gang in self.gangs:
                found.setdefault(gang, {})[int(attempt)] = job
        return found

    def _poll(self) -> None:
        while not self._done.wait(0.2):
            for gang, attempts in self.ours().items():
                live = [a for a, job in attempts.items()
                        if not JobStatus(job.status).is_terminal()]
                if len(live) > 1:
                    self.overlaps.add(f"{gang} attempts {sorted(live)}")

    def close(self) -> None:
        self._done.set()
        self._thread.join()

    def left_running(self) -> list[str]:
        return [job.submission_id for attempts in self.ours().values()
                for job in attempts.values() if not JobStatus(job.status).is_terminal()]

    def stop_left(self) -> None:
        """Stop what a failed run left (the next tests must not find it)."""
        for job_id in self.left_running():
            self.client.stop_job(job_id)
        deadline = time.time() + 30
        while self.left_running() and time.time() < deadline:
            time.sleep(0.5)


def moments(count: int) -> list[tuple[str, float]]:
    """(point, delay) of each try: every point in turn, the delays spread evenly over
    its phase in any prefix (the golden-ratio sequence)."""
    return [(point, (k * 0.6180339887) % 1 * POINTS[point])
            for k, point in zip(range(count), itertools.cycle(POINTS))]


def _at(job: raygang.JobRef, moment: tuple[str, float], marks: Path) -> None:
    """Return at `moment` of the job's start."""
    point, delay = moment
    reached = {
        "submitted": lambda: True,
        "in Ray": lambda: job_status_now(f"raygang-{job.gang_id}-0") is not None,
        "running": lambda: f"{job.gang_id} 0" in _lines(marks / "started"),
    }[point]
    deadline = time.monotonic() + 60
    while not reached():
        assert time.monotonic() < deadline, f"{job.gang_id} never got to {point}"
        time.sleep(0.005)
    time.sleep(delay)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _submit_round(script: Path, marks: Path, working_dir: Path, ray_jobs: RayJobs,
                  refs: list) -> list[raygang.JobRef]:
    jobs = [raygang.submit_job(f"{sys.executable} {script} {marks}", gpus=2, name="race",
                               preemption_grace_s=1,
                               **({"working_dir": str(working_dir)} if i % 2 else {}))
            for i in range(PER_ROUND)]
    refs.extend(jobs)
    ray_jobs.gangs.update(j.gang_id for j in jobs)
    return jobs


def _stop_round(jobs: list[raygang.JobRef], when: list[tuple[str, float]], marks: Path,
                stopped_at: dict[str, float]) -> None:
    def stop(job: raygang.JobRef, moment: tuple[str, float]) -> None:
        _at(job, moment, marks)
        stopped_at[job.gang_id] = time.time()
        assert job.stop().state is GangState.CANCELLED

    threads = [threading.Thread(target=stop, args=(j, m)) for j, m in zip(jobs, when)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _preempt_round(jobs: list[raygang.JobRef], moment: tuple[str, float], marks: Path,
                   stopped_at: dict[str, float]) -> list[GangState]:
    _at(jobs[0], moment, marks)
    stopped_at.update(dict.fromkeys((j.gang_id for j in jobs), time.time()))
    assert preemptor.remote().result(timeout=120) == ["done", "done"]
    return [j.wait(timeout=120).state for j in jobs]


def _phase(gang_id: str, first: object, started: set[str],
           stopped_at: dict[str, float]) -> str:
    """Where in its start the job's stop (or its preemptor) was sent."""
    if first is None:
        return "never in Ray"
    if stopped_at[gang_id] < first.start_time / 1000:
        return "before Ray had it"
    return "before its entrypoint ran" if f"{gang_id} 0" not in started else \
        "as its entrypoint ran"


@pytest.fixture
def working_dir(tmp_path_factory) -> Path:
    """16 MB that the client uploads before it submits (once per test run: the package is
    named by its content), and that Ray unpacks on the driver's node."""
    path = tmp_path_factory.mktemp("wd")
    (path / "data.bin").write_bytes(os.urandom(16 << 20))
    return path


def test_jobs_stopped_or_preempted_at_every_point_of_their_start_leave_nothing_running(
        ray_cluster, tmp_path, working_dir):
    script, marks = tmp_path / "attempt.py", tmp_path / "marks"
    script.write_text(ENTRYPOINT)
    marks.mkdir()
    ray_jobs, refs, ended, stopped_at = RayJobs(), [], Counter(), {}
    began = time.monotonic()
    rounds = max(1, TRIES // PER_ROUND)
    when = moments(rounds * PER_ROUND)
    try:
        for r in range(rounds):
            jobs = _submit_round(script, marks, working_dir, ray_jobs, refs)
            mine = when[r * PER_ROUND:(r + 1) * PER_ROUND]
            if r % 2 == 0:
                _stop_round(jobs, mine, marks, stopped_at)
                ended.update(["stopped"] * len(jobs))
            else:
                ended.update(s.value for s in _preempt_round(jobs, mine[0], marks, stopped_at))
        time.sleep(3)  # a submission that went on after its stop would show by now
        ray_jobs.close()
        left, seen = ray_jobs.left_running(), ray_jobs.ours()
        started = set(_lines(marks / "started"))
        phases = Counter(_phase(j.gang_id, seen.get(j.gang_id, {}).get(0), started,
                                stopped_at) for j in refs)
        overlaps = _lines(marks / "overlaps")
        summary = (f"{len(refs)} tries in {time.monotonic() - began:.0f}s: {dict(ended)}; "
                   f"attempt 0 stopped {dict(phases)}; {len(left)} Ray jobs left running, "
                   f"{len(overlaps)} attempts beside another (Ray: {len(ray_jobs.overlaps)})")
        print("\n" + summary)
        assert left == [], f"{summary}. Ray jobs still running after their job ended: {left}"
        assert overlaps == [] and not ray_jobs.overlaps, \
            f"{summary}. Attempts beside another: {overlaps} {sorted(ray_jobs.overlaps)}"
        assert set(ended) <= {"stopped", GangState.SUCCEEDED.value}, summary
    finally:
        ray_jobs.close()
        for ref in refs:
            ref.stop()
        ray_jobs.stop_left()
