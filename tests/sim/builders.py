"""Tiny hand-made traces for the simulator's tests.

    trace(job("a", at=0, run=100, gpus=8, queue="t1"), quotas={"t1": 8})
"""

from __future__ import annotations

from raygang.control.config import SchedulerConfig
from raygang.sim.engine import Replay, replay
from raygang.sim.policies import policy
from raygang.sim.settings import SimSettings
from raygang.sim.trace import Trace, TraceJob, gang_shape


def job(name: str, at: float, run: float, gpus: int = 8, queue: str = "t1",
        priority: int | str = "training") -> TraceJob:
    members, each = gang_shape(gpus, 8)
    return TraceJob(name=name, submit_s=at, duration_s=run, members=members,
                    gpus_per_member=each, queue=queue, priority=priority)


def trace(*jobs: TraceJob, quotas: dict[str, int] | None = None) -> Trace:
    return Trace(tuple(sorted(jobs, key=lambda j: (j.submit_s, j.name))), source="test",
                 quotas=quotas or {})


def run(t: Trace, policy_name: str, nodes: int = 1, **settings: object) -> dict[str, tuple]:
    """job name -> (first start, finish, stops) under `policy_name`."""
    result = replay_of(t, policy_name, nodes, **settings)
    return {log.job.name: (log.first_start, log.finished_at, len(log.stops))
            for log in result.jobs.values()}


def replay_of(t: Trace, policy_name: str, nodes: int = 1, config: dict | None = None,
              **settings: object) -> Replay:
    return replay(t, policy(policy_name), SimSettings(nodes=nodes, **settings),
                  SchedulerConfig.model_validate(config or {}))
