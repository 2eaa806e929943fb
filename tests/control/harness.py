"""A control plane on an in-memory cluster, in the test's own event loop: no Ray.

    plane = make_plane(make_cluster("n0: GPU=4 CPU=8", "n1: GPU=4 CPU=8"))
    gang_id = await submit(plane, "train", "4xGPU=1", seconds=0.2)
    status = await plane.wait(gang_id, timeout=5)
"""

from __future__ import annotations

import asyncio
import time

from raygang.control.config import SchedulerConfig
from raygang.control.journal import Journal
from raygang.control.memory import MemoryCluster, MemoryProgram
from raygang.control.plane import ControlPlane
from raygang.control.program import RoleProgram
from raygang.control.store import MemoryStore
from raygang.core.gang import GangState

from tests.unit.builders import node, spec

FAST = dict(resync_interval_s=0.05, restart_backoff_s=0.05, restart_backoff_max_s=0.2)


def make_cluster(*lines: str) -> MemoryCluster:
    return MemoryCluster((n.node_id, n.total) for n in map(node, lines))


def make_plane(cluster: MemoryCluster, store: MemoryStore | None = None,
               **config: object) -> ControlPlane:
    cfg = SchedulerConfig(**{**FAST, **config})
    journal = Journal(store if store is not None else MemoryStore(), cfg.state)
    return ControlPlane(cfg, cluster, journal, time.time)


async def submit(plane: ControlPlane, name: str, shape: str, strategy: str = "PACK",
                 key: str | None = None, **options: object) -> str:
    """A gang of `shape` (builders' syntax; roles r0, r1...) whose members all run the
    same `MemoryProgram(**program)`; gang options (priority, queue, max_restarts,
    preemption_grace_s...) are taken from `options`, the rest go to the program."""
    gang_fields = {k: options.pop(k) for k in list(options)
                   if k in ("priority", "queue", "max_restarts", "preemption_grace_s",
                            "reservation_timeout_s", "startup_timeout_s")}
    s = spec(name, shape, strategy, **gang_fields)
    program = RoleProgram(target=MemoryProgram(**options))
    return await plane.submit(s, {role.name: program for role in s.roles}, key)


async def wait_for(plane: ControlPlane, gang_id: str, *states: GangState,
                   timeout: float = 10.0):
    """Poll until the gang is in one of `states`; returns its status."""
    deadline = time.monotonic() + timeout
    while True:
        status = await plane.status(gang_id)
        if status.state in states:
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"{gang_id} is {status.state.value}, wanted "
                                 f"{[s.value for s in states]}: {status.reason}")
        await asyncio.sleep(0.005)


def moves(status) -> list[tuple[str, str]]:
    """The gang's history as (state moved to, reason)."""
    return [(e.to_state.value, e.reason) for e in status.events]


async def released(plane: ControlPlane, timeout: float = 5.0) -> None:
    """Wait until no gang holds anything (a gang is torn down just after its end is
    recorded, as on Ray)."""
    deadline = time.monotonic() + timeout
    while list(plane.fleet) or plane.fleet.held():
        assert time.monotonic() < deadline, f"still held: {[r.gang_id for r in plane.fleet]}"
        await asyncio.sleep(0.005)
