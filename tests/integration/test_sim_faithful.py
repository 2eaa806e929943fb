"""The simulator is faithful: a short trace replayed by `raygang sim` and on the real local
Ray cluster (its jobs as sleeping gangs on virtual GPUs, through the real scheduler actor)
gives the same admission order and job completion times within a stated tolerance.

The trace: 20 jobs of two tenants (queues `team-a` and `team-b`, GPU quota 2 each and
strict lines, as the test session's scheduler has them: with the default best-effort
lines, which gang of a line starts first hangs on when capacity frees, and the simulator
models Ray's start times by their mean, so the order it predicts is the order of strict
lines; a CI run at load ~10, start spread 2.6 s, saw a 1-GPU job pass its line 13 s
earlier in the simulator than on Ray) on the session cluster's two 4-GPU workers, submitted
over 24 s and running 3 to 9 s each (a trace in minutes, compressed 60x), with 1, 2 or 4
GPUs, so that gangs queue, borrow beyond their quota and are reclaimed (`the_trace`). A reclaimed job
starts again from the beginning on both sides (a sleeping gang keeps no checkpoint; the
simulator is told its checkpoints are never reached), with no grace period.

The simulator replays the jobs at the times the real scheduler received them, and is given
what Ray costs here, measured in the same run: each job's own time from its admission to
its members running (placement group, actor start: `TraceJob.start_s`), and the mean time
from a job's work's end to its own (the end noticed, everything torn down: a second or
more on a loaded machine, where real jobs ended that much later than simulated ones
before the simulator modelled it). Each job's own start, not one mean for all: on a
loaded machine Ray's starts spread by seconds (a burst of gangs starts at ~1.7 actors/s),
and which gang is still starting when a reclaim comes decides which gang is reclaimed.
The test runs `alone` (tests/conftest.py): the other worker's Ray tests wait meanwhile.
Tolerance:
- admission order: of two jobs the real scheduler admitted more than SAME_CYCLE_S apart,
  the simulator started the later one no more than ORDER_SLACK_S before the earlier (jobs
  admitted in one cycle may start in either order: seen in CI, two jobs admitted in one
  real cycle were admitted a second apart by the simulator);
- completion time (submission to end) of every job within JCT_ABS_S + JCT_REL of the
  real one's; the mean difference under JCT_MEAN_S plus the spread (standard deviation)
  of the real end times, which the simulator's one mean end cannot predict.
"""

from __future__ import annotations

import itertools
import random
import statistics
import time

import pytest

import raygang
from raygang import GangState
from raygang.sim import SimSettings, simulate
from raygang.sim.trace import Trace, TraceJob, sorted_jobs
from tests.conftest import SCHEDULER_CONFIG, WORKER_GPUS

# alone: Ray's start times, which the simulator is compared with, spread by seconds when
# the other worker's Ray tests load the machine (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.alone]

ORDER_SLACK_S = 1.0
SAME_CYCLE_S = 0.5
JCT_ABS_S = 2.5
JCT_REL = 0.15
# Jobs that waited for another's capacity are admitted ~1-2 s later on Ray than in the
# simulator, which frees capacity at a gang's end: the time until Ray shows the room and
# the next cycle takes it is not modelled. Mean differences seen: CI 1.19 and 1.50 s; here
# 1.80 s on a quiet full run, 1.90 and 1.91 s on runs loaded by other work (with one mean
# start for every job); with each job's own start, 0.3 s quiet, ~1.5 s beside two busy loops.
JCT_MEAN_S = 2.5
SEED = 29  # see the_trace


def the_trace() -> Trace:
    """team-a fills the cluster first (its 5 first jobs run 6-9 s, with up to 4 GPUs);
    team-b's jobs (1 or 2 GPUs) then reclaim its quota from team-a's borrowed GPUs."""
    rng = random.Random(SEED)
    jobs = []
    for i in range(20):
        a = i < 5 or rng.random() < 0.5
        jobs.append(TraceJob(
            name=f"j{i:06d}", submit_s=round(i * 1.2 + rng.uniform(0, 0.6), 1),
            duration_s=float(rng.randint(6, 9) if i < 5 else rng.randint(3, 9)), members=1,
            gpus_per_member=rng.choice([1, 2, 2, 4] if a else [1, 1, 2]),
            queue="team-a" if a else "team-b"))
    return Trace(sorted_jobs(jobs), source=f"test_sim_faithful (generated, seed {SEED})")


@raygang.gang_task(strategy="PACK", priority="training", preemption_grace_s=0)
def sleeper(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def replay_on_ray(trace: Trace) -> dict[str, raygang.GangStatus]:
    """Submit each job at its time (relative to the first), wait for all to end."""
    refs = {}
    started = time.monotonic()
    for job in trace.jobs:
        delay = started + job.submit_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        task = sleeper.options(name=job.name, queue=job.queue,
                               resources={"GPU": job.gpus_per_member})
        refs[job.name] = task.remote(job.duration_s)
    return {name: ref.wait(timeout=240) for name, ref in refs.items()}


def first(status: raygang.GangStatus, state: GangState) -> float:
    return next(e.at for e in status.events if e.to_state is state)


def last(status: raygang.GangStatus, state: GangState) -> float:
    return [e.at for e in status.events if e.to_state is state][-1]


def own_start(status: raygang.GangStatus) -> float:
    """Admitted -> running of the job's first attempt that ran (one reclaimed while its
    members started went from ADMITTED to PREEMPTING, or back to the queue)."""
    admitted = None
    for event in status.events:
        if event.to_state is GangState.ADMITTED:
            admitted = event.at
        elif event.to_state is GangState.RUNNING and admitted is not None:
            return event.at - admitted
    raise AssertionError(f"{status.gang_id} never ran")


def test_the_simulator_admits_in_the_same_order_and_predicts_completion_times(ray_cluster):
    trace = the_trace()
    real = replay_on_ray(trace)
    assert {s.state for s in real.values()} == {GangState.SUCCEEDED}
    assert any(s.preemptions for s in real.values()), "the trace should exercise reclaim"
    # Each job's own start (admitted -> running) as Ray took it, for the first attempt that
    # ran: the simulator replays every gang at its real pace. With one mean start for all,
    # which gang is still starting when a reclaim comes hangs on Ray's spread (a CI run at
    # load ~10, spread 3.5 s: the real j000002 started in 3 s and j000000 was reclaimed; the
    # simulated j000002, at the mean 5.3 s, was reclaimed while starting instead).
    starts = {name: own_start(status) for name, status in real.items()}
    start_s = statistics.mean(starts.values())  # reported; every job replays its own
    durations = {job.name: job.duration_s for job in trace.jobs}
    ends = [s.finished_at - last(s, GangState.RUNNING) - durations[name]
            for name, s in real.items() if not s.preemptions]
    end_s = statistics.mean(ends)

    # The simulator replays the jobs as the scheduler received them: at the times each
    # submission reached it (the test's calls take a moment, more on a busy machine).
    t0 = min(s.submitted_at for s in real.values())
    received = Trace(sorted_jobs(job.model_copy(update={
        "submit_s": round(real[job.name].submitted_at - t0, 3), "start_s": starts[job.name]})
        for job in trace.jobs), source=trace.source)
    settings = SimSettings(nodes=2, gpus_per_node=WORKER_GPUS, checkpoint_s=1e9,
                           preemption_grace_s=0, end_s=max(0.0, end_s),
                           resync_s=1.0)
    sim = simulate(received, ["raygang"], settings, SCHEDULER_CONFIG).replays[0]
    simulated = {log.job.name: log for log in sim.jobs.values()}

    report = []
    for name, status in sorted(real.items(), key=lambda kv: first(kv[1], GangState.ADMITTED)):
        log = simulated[name]
        jct_real = status.finished_at - status.submitted_at
        report.append((name, first(status, GangState.ADMITTED) - status.submitted_at,
                       log.first_admitted - log.submitted_at, jct_real, log.jct_s,
                       status.preemptions, len(log.stops)))
    table = "\n".join(f"{n} admitted real {a:5.1f} sim {b:5.1f}  JCT real {c:5.1f} sim "
                      f"{d:5.1f}  stops real {e} sim {f}" for n, a, b, c, d, e, f in report)
    # Each job ends in the mean end time in the simulator: how far Ray's ends stray from it
    # (their spread, which grows with the machine's load) is error it cannot predict.
    spread = statistics.pstdev(ends)
    print(f"start_s {start_s:.2f} (spread {statistics.pstdev(starts.values()):.2f}) "
          f"end_s {end_s:.2f} (spread {spread:.2f})\n{table}")

    # Order between cycles: a job the real scheduler admitted in a later cycle than another
    # is admitted by the simulator no more than ORDER_SLACK_S before it. Jobs the real
    # scheduler admitted in one cycle (within SAME_CYCLE_S) have no order between them.
    # Admissions, not first starts: a job reclaimed while its members start never ran that
    # attempt.
    admitted = {name: first(status, GangState.ADMITTED) for name, status in real.items()}
    for earlier, later in itertools.combinations([name for name, *_ in report], 2):
        if admitted[later] - admitted[earlier] > SAME_CYCLE_S:
            assert simulated[later].first_admitted >= \
                simulated[earlier].first_admitted - ORDER_SLACK_S, (earlier, later, table)
    errors = [abs(c - d) for _, _, _, c, d, _, _ in report]
    for name, *_, jct_real, jct_sim, _, _ in report:
        assert abs(jct_real - jct_sim) <= JCT_ABS_S + JCT_REL * jct_real, (name, table)
    assert statistics.mean(errors) <= JCT_MEAN_S + spread, table
