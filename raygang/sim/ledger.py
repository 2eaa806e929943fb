"""What happened to every job and every tenant during one replay: the simulator's own
book, kept by the simulated cluster (runs start and stop) and the metrics port (who was
preempted by what). The control plane never reads it.

Per job: when it was submitted, first started and finished; how long it ran in all; each
time it was stopped, how much work it lost (the work since its last checkpoint). Per
tenant: GPUs running and asked for over time, integrated exactly at every change (for
allocation rates and fairness) and kept as steps (for plots).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from raygang.sim.trace import TraceJob


@dataclass
class Stop:
    """One preemption of a job: when, after how long running, what it lost."""

    at: float
    ran_s: float  # since this attempt started
    lost_s: float  # work since its last checkpoint, redone later
    gpus: int
    action: str  # "reclaim" or "preempt" (core.plan.Preemption.action)
    started_at: float  # when the attempt started
    for_gpus: int  # GPUs of the gang it was stopped for


@dataclass
class JobLog:
    job: TraceJob
    gang_name: str
    remaining_s: float  # work still to do (duration less what checkpoints saved)
    submitted_at: float | None = None
    first_admitted: float | None = None  # its first attempt's capacity booked: an attempt
    # stopped while its members start never runs, so `first_start` is a later attempt's
    first_start: float | None = None
    finished_at: float | None = None
    running_s: float = 0.0  # all attempts
    attempts: int = 0
    stops: list[Stop] = field(default_factory=list)
    resize_restarts: int = 0  # an elastic job restarted at a new size (resize: restart)
    resize_lost_gpu_s: float = 0.0  # their cost: work redone, and GPUs idle while starting
    skipped: str | None = None  # why it was never submitted (never fits the cluster)
    attempt_start: float | None = None
    racks: int = 0  # the most racks one of its attempts spanned (0: no racks labelled)
    stopped_for: tuple[str, int] | None = None  # (action, preemptor's GPUs): set by the
    # metrics port when the plan is applied, read when the run is torn down

    @property
    def jct_s(self) -> float | None:
        if self.finished_at is None or self.submitted_at is None:
            return None
        return self.finished_at - self.submitted_at

    @property
    def queued_s(self) -> float | None:
        """Time not running between submission and completion (every wait, requeues too)."""
        jct = self.jct_s
        return None if jct is None else jct - self.running_s


class TenantUsage:
    """GPUs running and demanded (running + pending) per queue over time, integrated."""

    def __init__(self, quotas: Mapping[str, int], start: float = 0.0):
        self.quotas = dict(quotas)
        self.at = start
        self.running: dict[str, int] = {}
        self.pending: dict[str, int] = {}  # GPUs asked for by pending jobs
        self.pending_jobs: dict[str, int] = {}
        self.gpu_s: dict[str, float] = {}  # running GPU-seconds
        self.entitled_s: dict[str, float] = {}  # min(quota, demand), GPU-seconds
        self.got_s: dict[str, float] = {}  # min(running, entitled), GPU-seconds
        # Steps for plots: (time, cluster GPUs running) and (time, queue, pending jobs).
        self.allocation: list[tuple[float, int]] = [(start, 0)]
        self.backlog: list[tuple[float, str, int]] = []
        self.total_running = 0

    def _advance(self, now: float) -> None:
        dt = now - self.at
        if dt <= 0:
            return
        for queue in set(self.running) | set(self.pending):
            run = self.running.get(queue, 0)
            demand = run + self.pending.get(queue, 0)
            entitled = min(self.quotas.get(queue, 0), demand)
            self.gpu_s[queue] = self.gpu_s.get(queue, 0.0) + run * dt
            self.entitled_s[queue] = self.entitled_s.get(queue, 0.0) + entitled * dt
            self.got_s[queue] = self.got_s.get(queue, 0.0) + min(run, entitled) * dt
        self.at = now

    def change(self, now: float, queue: str, running: int = 0, pending: int = 0,
               pending_jobs: int = 0) -> None:
        self._advance(now)
        if running:
            self.running[queue] = self.running.get(queue, 0) + running
            self.total_running += running
            self.allocation.append((now, self.total_running))
        if pending:
            self.pending[queue] = self.pending.get(queue, 0) + pending
        if pending_jobs:
            count = self.pending_jobs[queue] = self.pending_jobs.get(queue, 0) + pending_jobs
            self.backlog.append((now, queue, count))

    def close(self, now: float) -> None:
        self._advance(now)


def jain(values: list[float]) -> float:
    """Jain's fairness index: 1 when all are equal, 1/n when one has everything."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return math.nan
    square = sum(v * v for v in values)
    return 1.0 if square == 0 else sum(values) ** 2 / (len(values) * square)
