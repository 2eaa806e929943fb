"""A control plane on the in-memory cluster, in virtual time: no Ray, no waiting.

    def test_something():
        async def scenario():
            plane = make_plane(make_cluster("n0: GPU=4 CPU=8", "n1: GPU=4 CPU=8"))
            gang_id = await submit(plane, "train", "4xGPU=1", seconds=0.2)
            status = await plane.wait(gang_id, timeout=5)
        run(scenario)              # or run(scenario, seed=7)

`run` drives the scenario on a `VirtualTimeLoop`: every wait is a wait in virtual time, so
a scenario of seconds costs milliseconds and runs the same way every time. Its `seed`
sets the cluster's jitter (each step a run takes on Ray takes a few random milliseconds,
`control.memory`) and the gang ids: each seed interleaves the plane's tasks differently,
and the same seed the same way again, so a race found under a seed is reproduced by it.

Afterwards `run` checks what a scenario left: it closes every plane it made (every task
they started must end within a second of virtual time when cancelled) and fails if any
task of the loop is still running then. A scenario that waits for ever fails after
`virtual_s` of virtual time (a lost wake-up) or `wall_s` of real time (a livelock).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import random
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from raygang.control.config import SchedulerConfig
from raygang.control.history import History
from raygang.control.journal import Journal
from raygang.control.memory import MemoryCluster, MemoryProgram
from raygang.control.plane import ControlPlane
from raygang.control.ports import Metrics, Scaling
from raygang.control.program import RoleProgram
from raygang.control.store import MemoryStore
from raygang.control.virtual import VirtualClock, VirtualTimeLoop
from raygang.core.gang import GangState

from tests.unit.builders import node, spec

FAST = dict(resync_interval_s=0.05, restart_backoff_s=0.05, restart_backoff_max_s=0.2)
POLL_S = 0.005  # of virtual time: a helper waiting for a state looks this often
CLOSE_S = 1.0  # every task of a closed plane ends within this (virtual) time

_seed: contextvars.ContextVar[int | None] = contextvars.ContextVar("seed", default=None)
_default_seed: list[int] = [0]  # `run`'s seed when the test names none (`seeded`)
_DEFAULT = object()
_planes: contextvars.ContextVar[list[ControlPlane] | None] = contextvars.ContextVar(
    "planes", default=None)


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Every `run` that names no seed runs under `seed` meanwhile (a sweep over seeds of
    tests written for one: tests/control/test_seeds.py)."""
    _default_seed.append(seed)
    try:
        yield
    finally:
        _default_seed.pop()


def run(scenario: Callable[[], Awaitable[Any]], seed: Any = _DEFAULT,
        virtual_s: float = 120.0, wall_s: float = 60.0, clock: VirtualClock | None = None
        ) -> Any:
    """Run `scenario()` in virtual time under `seed` (None: no jitter); then close every
    plane it made and check that nothing is left running (see the module's docstring)."""
    seed = _default_seed[-1] if seed is _DEFAULT else seed
    loop = VirtualTimeLoop(clock, wall_limit_s=wall_s)
    planes: list[ControlPlane] = []
    context = contextvars.copy_context()
    context.run(_seed.set, seed)
    context.run(_planes.set, planes)
    try:
        task = context.run(loop.create_task, _within(scenario(), virtual_s, seed))
        result = loop.run_until_complete(task)
        loop.run_until_complete(_nothing_left(planes))
        return result
    finally:
        _cancel_everything(loop)
        loop.close()


async def _within(work: Awaitable[Any], virtual_s: float, seed: int | None) -> Any:
    try:
        return await asyncio.wait_for(work, virtual_s)
    except asyncio.TimeoutError:
        raise AssertionError(f"the scenario did not end within {virtual_s:g}s of virtual "
                             f"time (seed {seed}): something waits for an event that "
                             "nothing sends") from None


async def _nothing_left(planes: list[ControlPlane]) -> None:
    for plane in planes:
        stuck = await plane.close(CLOSE_S)
        assert not stuck, f"tasks that did not end when cancelled: {stuck}"
    left = asyncio.all_tasks() - {asyncio.current_task()}
    assert not left, f"tasks left running after the scenario: {left}"


def _cancel_everything(loop: asyncio.AbstractEventLoop) -> None:
    """After a failure: end what is left, so the next test starts clean."""
    left = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in left:
        task.cancel()
    if left:
        try:
            loop.run_until_complete(asyncio.wait(left, timeout=CLOSE_S))
        except Exception:  # noqa: BLE001 - the test has failed already
            pass


def make_cluster(*lines: str, seed: int | None = None, clock=None,
                 view_lag_s: float = 0.0) -> MemoryCluster:
    """Nodes in the builders' syntax (`@rack=r1`: a label); jittered by `seed` (default:
    the run's seed); `view_lag_s`: the view shows a removal's room that late (as Ray's GCS
    does)."""
    seed = _seed.get() if seed is None else seed
    nodes = [node(line) for line in lines]
    return MemoryCluster(((n.node_id, n.total) for n in nodes), clock, seed=seed,
                         view_lag_s=view_lag_s,
                         labels={n.node_id: n.labels for n in nodes if n.labels})


def make_plane(cluster: MemoryCluster, store: MemoryStore | None = None,
               scaling: Scaling | None = None, metrics: Metrics | None = None,
               history: History | None = None, **config: object) -> ControlPlane:
    cfg = SchedulerConfig(**{**FAST, **config})
    journal = Journal(store if store is not None else MemoryStore(), cfg.state)
    seed = _seed.get()
    plane = ControlPlane(cfg, cluster, journal, cluster.clock, metrics, scaling=scaling,
                         ids=random.Random(seed) if seed is not None else None,
                         history=history)
    planes = _planes.get()
    if planes is not None:
        planes.append(plane)
    return plane


async def stepped_plane(cluster: MemoryCluster, **options: object) -> ControlPlane:
    """A ready plane whose loop never cycles on its own: the test drives its cycles one by
    one (`plane.loop.cycle()`, or `schedule` and `plane.loop._apply`)."""
    plane = make_plane(cluster, **options)

    async def no_loop() -> None:
        await asyncio.Event().wait()

    plane.loop.run = no_loop
    await plane.ready()
    return plane


async def submit(plane: ControlPlane, name: str, shape: str, strategy: str = "PACK",
                 key: str | None = None, **options: object) -> str:
    """A gang of `shape` (builders' syntax; roles r0, r1...) whose members all run the
    same `MemoryProgram(**program)`; gang options (priority, queue, max_restarts,
    preemption_grace_s...) are taken from `options`, the rest go to the program."""
    gang_fields = {k: options.pop(k) for k in list(options)
                   if k in ("priority", "queue", "max_restarts", "preemption_grace_s",
                            "reservation_timeout_s", "startup_timeout_s", "topology",
                            "max_runtime_s")}
    s = spec(name, shape, strategy, **gang_fields)
    program = RoleProgram(target=MemoryProgram(**options))
    return await plane.submit(s, {role.name: program for role in s.roles}, key)


async def until(check: Callable[[], bool], timeout: float, why: Callable[[], str]) -> None:
    """Until `check()` holds, looking every POLL_S of virtual time; fails after `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(why())
        await asyncio.sleep(POLL_S)


async def wait_for(plane: ControlPlane, gang_id: str, *states: GangState,
                   timeout: float = 10.0):
    """Until the gang is in one of `states`; returns its status."""
    record = plane.registry.get(gang_id)
    await until(lambda: record.state in states, timeout,
                lambda: f"{gang_id} is {record.state.value}, wanted "
                        f"{[s.value for s in states]}: {record.reason}")
    return await plane.status(gang_id)


def moves(status) -> list[tuple[str, str]]:
    """The gang's history as (state moved to, reason)."""
    return [(e.to_state.value, e.reason) for e in status.events]


async def released(plane: ControlPlane, timeout: float = 5.0) -> None:
    """Until no gang holds anything (a gang is torn down just after its end is recorded,
    as on Ray)."""
    await until(lambda: not list(plane.fleet) and not plane.fleet.held(), timeout,
                lambda: f"still held: {[r.gang_id for r in plane.fleet]}")
