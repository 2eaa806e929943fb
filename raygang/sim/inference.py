"""A diurnal stream of inference deployments beside a trace's training jobs.

GPU training traces (Philly) hold no inference; a cluster that serves models as well
sees inference demand rise by day and fall by night, and inference must not wait for
training. With `SimSettings.inference_gpus` set, the replay runs, next to the trace, a
stream of deployments in queue `inference` (GPU quota: the stream's peak, on top of the
tenants' guarantees, since inference comes first), each a non-preemptible gang of the
`inference` class with `inference_gang_gpus` GPUs (whole nodes at 8 or more: one
replica per node), like `raygang.deploy(..., priority="inference")`. Every
`inference_step_s` the stream sets the number of deployments to what the hour of the
day asks:

    deployments(h) = round(peak / gang * (low + (1 - low) * (1 + cos(2 pi (h - 14) / 24)) / 2))

a cosine from `inference_low` of the peak at 02:00 to the peak at 14:00 (the trace's
clock where it has one, else time 0 is midnight): new ones are submitted, the newest are
undeployed when demand falls. A deployment never ends by itself. Training jobs it
displaces are preempted through the product's path (grace period, lost work since their
last checkpoint, requeued), so preemption by inference is exercised as the issue asks.
How long each deployment waited to run is reported (`inference` in the summary): under a
policy that cannot preempt (FIFO) it waits for training to end.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass

from raygang.control.plane import ControlPlane
from raygang.control.program import RoleProgram
from raygang.core.queues import QueueSpec
from raygang.core.resources import Resources
from raygang.core.spec import GangSpec, RoleSpec, Strategy
from raygang.sim.settings import SimSettings

INFERENCE_QUEUE = "inference"
PEAK_HOUR = 14.0
_PROGRAM = RoleProgram(target="raygang.sim:inference_replica")  # never run: simulated


@dataclass
class ServiceLog:
    """One deployment of the stream: when it was asked for, ran, and was undeployed."""

    name: str
    gpus: int
    submitted_at: float
    running_at: float | None = None
    ended_at: float | None = None

    def waited_s(self, end: float) -> float:
        """Until it ran; one that never did waited until undeployed or the replay's `end`
        (a lower bound)."""
        until = self.running_at if self.running_at is not None else (
            self.ended_at if self.ended_at is not None else end)
        return until - self.submitted_at


def deployments_wanted(settings: SimSettings, hour_of_day: float) -> int:
    """How many deployments the stream runs at this hour of the day (see the module)."""
    peak = settings.inference_gpus / settings.inference_gang_gpus
    low = settings.inference_low
    level = low + (1 - low) * (1 + math.cos(2 * math.pi * (hour_of_day - PEAK_HOUR) / 24)) / 2
    return round(peak * level)


def queue(settings: SimSettings) -> QueueSpec:
    return QueueSpec(name=INFERENCE_QUEUE, quota={"GPU": settings.inference_gpus})


def spec(name: str, settings: SimSettings, queue_name: str) -> GangSpec:
    gpus, per_node = settings.inference_gang_gpus, settings.gpus_per_node
    members = max(1, math.ceil(gpus / per_node))
    return GangSpec(
        name=name, queue=queue_name, priority="inference", strategy=Strategy.SPREAD
        if members > 1 else Strategy.PACK,
        roles=(RoleSpec(name="replica", replicas=members,
                        resources=Resources(GPU=gpus // members)),),
        reservation_timeout_s=settings.reservation_timeout_s)


class InferenceStream:
    def __init__(self, plane: ControlPlane, settings: SimSettings, queue_name: str,
                 clock: Callable[[], float], start_hour: float,
                 services: dict[str, ServiceLog]):
        self._plane = plane
        self._settings = settings
        self._queue = queue_name
        self._clock = clock
        self._start_hour = start_hour  # the hour of the day at simulated time 0
        self._services = services  # name -> log, shared with the simulated cluster
        self._running: list[tuple[str, str]] = []  # (name, gang id), oldest first
        self._made = 0

    async def run(self) -> None:
        while True:
            await self.reconcile()
            await asyncio.sleep(self._settings.inference_step_s)

    async def reconcile(self) -> None:
        now = self._clock()
        hour = (self._start_hour + now / 3600) % 24
        wanted = deployments_wanted(self._settings, hour)
        while len(self._running) < wanted:
            name = f"inference-{self._made:05d}"
            self._made += 1
            self._services[name] = ServiceLog(name, self._settings.inference_gang_gpus, now)
            gang_id = await self._plane.submit(spec(name, self._settings, self._queue),
                                               {"replica": _PROGRAM})
            self._running.append((name, gang_id))
        while len(self._running) > wanted:
            name, gang_id = self._running.pop()
            if self._services[name].running_at is None:
                self._services[name].ended_at = now  # undeployed before it ever ran
            await self._plane.cancel(gang_id, "undeployed: inference demand fell")
