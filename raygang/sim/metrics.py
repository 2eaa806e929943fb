"""The figures of one replay, from its ledger (all times in hours unless named `_s`).

- JCT: completion minus submission. Queueing: the time a job was not running between
  submission and completion (every wait, requeues after preemption included); also the
  wait for its first start.
- Makespan: from the first submission to the last completion.
- GPU allocation rate: GPUs held by running jobs over the cluster's GPUs, averaged over
  the submission window (first to last submission: after it only the long tail runs).
- Preemptions: how many, by action, and the GPU-hours they lost (work since the victim's
  last checkpoint). Churn: victims that had run less than the checkpoint interval, stops
  within 10 minutes of a restart, the most stops of one job; and the share of lost
  GPU-hours from victims with more GPUs than the gang they made room for (an upper bound
  on "a smaller victim would have done": whether one was there is not known here).
- Fairness: each tenant's share of its guarantee is the GPU-time it got up to what it was
  entitled to, over the GPU-time it was entitled to, where at every moment it is entitled
  to min(quota, what it runs + what it waits for); Jain's index over the tenants entitled
  to anything. 1 when every tenant got the same share of its guarantee.
- Large gangs: the longest and mean queueing of the jobs with the most GPUs (>= 32).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from raygang.sim.engine import NO_PARTITION, Replay
from raygang.sim.inference import INFERENCE_QUEUE
from raygang.sim.ledger import JobLog, jain

HOUR = 3600.0
RESTART_WINDOW_S = 600.0  # "reclaimed within 10 minutes of restarting"
LARGE_GPUS = 32


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def summarize(replay: Replay, checkpoint_s: float) -> dict:
    logs = list(replay.jobs.values())
    done = [log for log in logs if log.jct_s is not None and log.skipped is None]
    jct = [log.jct_s / HOUR for log in done]
    queued = [log.queued_s / HOUR for log in done]
    first = [(log.first_start - log.submitted_at) / HOUR for log in done]
    submits = [log.submitted_at for log in logs if log.submitted_at is not None]
    window = (min(submits), max(submits)) if submits else (0.0, 0.0)
    ends = [log.finished_at for log in done]
    return {
        "policy": replay.policy,
        "jobs": {"in_trace": len(logs), "completed": len(done),
                 "skipped": sum(1 for log in logs if log.skipped is not None),
                 # jobs no partition held, by queue (`static`: a queue without a quota)
                 "no_partition": dict(sorted(Counter(
                     log.job.queue for log in logs
                     if log.skipped and log.skipped.startswith(NO_PARTITION)).items()))},
        "jct_h": _spread(jct),
        "queueing_h": _spread(queued),
        "first_start_h": _spread(first),
        "makespan_h": (max(ends) - window[0]) / HOUR if ends else math.nan,
        "gpu_allocation": allocation(replay, *window),
        "preemptions": preemptions(logs, checkpoint_s),
        "fairness": fairness(replay),
        "large_gangs": large_gangs(done),
        "racks": racks(done),
        "tenants": tenants(done),
        "inference": inference(replay),
        "speed": {"wall_s": replay.wall_s, "simulated_h": replay.end_s / HOUR,
                  "simulated_h_per_wall_s": replay.end_s / HOUR / max(replay.wall_s, 1e-9),
                  "cycles": replay.cycles},
    }


def _spread(values: Sequence[float]) -> dict:
    return {"mean": mean(values), "p50": percentile(values, 50),
            "p99": percentile(values, 99), "max": max(values, default=math.nan)}


def allocation(replay: Replay, start: float, end: float) -> float:
    """Mean share of the cluster's GPUs held by running jobs over [start, end]."""
    if end <= start:
        return math.nan
    steps = replay.usage.allocation
    area = 0.0
    for (t0, gpus), (t1, _) in zip(steps, steps[1:] + [(math.inf, 0)]):
        lo, hi = max(t0, start), min(t1, end)
        if hi > lo:
            area += gpus * (hi - lo)
    return area / ((end - start) * replay.gpus)


def preemptions(logs: Sequence[JobLog], checkpoint_s: float) -> dict:
    stops = [(log, stop) for log in logs for stop in log.stops]
    lost = sum(s.lost_s * s.gpus for _, s in stops) / HOUR
    oversized = sum(s.lost_s * s.gpus for _, s in stops if s.gpus > s.for_gpus) / HOUR
    by_action: dict[str, int] = {}
    for _, stop in stops:
        by_action[stop.action] = by_action.get(stop.action, 0) + 1
    after_restart = sum(1 for log in logs for i, s in enumerate(log.stops)
                        if i > 0 and s.ran_s < RESTART_WINDOW_S)
    return {
        "count": len(stops), "by_action": by_action,
        "gpu_hours_lost": lost,
        "victims_ran_under_checkpoint": sum(1 for _, s in stops if s.ran_s < checkpoint_s),
        "stopped_within_10min_of_restart": after_restart,
        "jobs_stopped": sum(1 for log in logs if log.stops),
        "most_stops_of_one_job": max((len(log.stops) for log in logs), default=0),
        "oversized_victims_share_of_lost": oversized / lost if lost else 0.0,
        "resize_restarts": sum(log.resize_restarts for log in logs),
        "gpu_hours_lost_to_resize_restarts": sum(log.resize_lost_gpu_s for log in logs) / HOUR,
    }


def fairness(replay: Replay) -> dict:
    usage = replay.usage
    shares = {q: usage.got_s.get(q, 0.0) / usage.entitled_s[q]
              for q in sorted(usage.entitled_s)
              if usage.entitled_s[q] > 0 and q != INFERENCE_QUEUE}
    return {"jain_share_of_guarantee": jain(list(shares.values())),
            "share_of_guarantee": shares}


def inference(replay: Replay) -> dict | None:
    """The inference stream (sim.inference): how long its deployments waited to run."""
    if replay.inference_note is not None:
        return {"note": replay.inference_note}
    if not replay.services:
        return None
    end = replay.end_s
    waits = [s.waited_s(end) for s in replay.services]
    served = sum(((s.ended_at if s.ended_at is not None else end) - s.running_at) * s.gpus
                 for s in replay.services if s.running_at is not None) / HOUR
    return {"deployments": len(replay.services),
            "never_ran": sum(1 for s in replay.services if s.running_at is None),
            "wait_mean_s": mean(waits), "wait_p99_s": percentile(waits, 99),
            "wait_max_s": max(waits, default=math.nan), "gpu_hours_served": served}


def large_gangs(done: Sequence[JobLog]) -> dict:
    """Queueing of the multi-node gangs, in all (>= 32 GPUs) and per size."""
    large = [log for log in done if log.job.gpus >= LARGE_GPUS]
    waits = [log.queued_s / HOUR for log in large]
    by_size: dict[int, list[float]] = {}
    for log in done:
        if log.job.members > 1:
            by_size.setdefault(log.job.gpus, []).append(log.queued_s / HOUR)
    return {"min_gpus": LARGE_GPUS, "jobs": len(large),
            "queueing_max_h": max(waits, default=math.nan), "queueing_mean_h": mean(waits),
            "queueing_by_gpus_h": {str(g): {"jobs": len(w), "min": min(w), "mean": mean(w),
                                            "max": max(w)}
                                   for g, w in sorted(by_size.items())}}


def racks(done: Sequence[JobLog]) -> dict:
    """How the multi-member jobs sat on the racks (when racks are labelled): how many ran
    across more than one, and their queueing against those in one."""
    multi = [log for log in done if log.job.members > 1 and log.racks]
    split = [log for log in multi if log.racks > 1]
    return {"multi_member_jobs": len(multi), "across_racks": len(split),
            "across_racks_share": len(split) / len(multi) if multi else math.nan,
            "queueing_mean_h": mean([log.queued_s / HOUR for log in multi])}


def tenants(done: Sequence[JobLog]) -> dict:
    by: dict[str, list[float]] = {}
    for log in done:
        by.setdefault(log.job.queue, []).append(log.jct_s / HOUR)
    return {q: {"jobs": len(v), "jct_mean_h": mean(v)} for q, v in sorted(by.items())}
