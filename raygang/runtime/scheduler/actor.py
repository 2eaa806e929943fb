"""The scheduler actor: a detached, named async Ray actor, the RPC facade of one
`ControlPlane` (raygang/control) wired to Ray: the cluster port (`RayCluster`: placement
groups, member actors, Serve), the durable store (Ray's GCS key-value store by default),
Ray's metrics, and the scaler (KubeRay or Ray's autoscaler).

Each call of `control.api.SchedulerAPI` is the plane's call of that name, forwarded (but
`deploy`, which reads the application's graph first, where Serve is); the calls of
`TrainAPI` go to the Train desk (`train_desk.py`) once the plane has recovered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import ray
from ray import cloudpickle

from raygang.control.api import SchedulerAPI, calls
from raygang.control.config import SchedulerConfig, StateConfig
from raygang.control.history import History
from raygang.control.intake import revalidated
from raygang.control.journal import Journal
from raygang.control.plane import ControlPlane
from raygang.control.store import MemoryStore, SqliteStore, Store
from raygang.core.spec import GangSpec
from raygang.core.workload_specs import DeploymentSpec
from raygang.runtime.scheduler.cluster import RayCluster
from raygang.runtime.scheduler.gcs_store import GcsStore
from raygang.runtime.scheduler.scaling import ScaleDriver
from raygang.runtime.scheduler.train_desk import TrainDesk


def open_store(state: StateConfig) -> Store:
    if state.store == "memory":
        return MemoryStore()
    if state.store == "sqlite":
        assert state.path is not None
        return SqliteStore(state.path)
    return GcsStore()


class Scheduler:
    def __init__(self, config: SchedulerConfig, clock: Callable[[], float] = time.time):
        from raygang.runtime.scheduler.metrics import SchedulerMetrics  # in the actor

        scaling = (ScaleDriver(config.scaling, clock=clock)
                   if config.scaling.mode != "off" else None)
        journal = Journal(open_store(config.state), config.state, pickler=cloudpickle)
        cluster = RayCluster(config.serve_http_port, config.handoff_lease_s,
                             config.jobs_address)
        metrics = SchedulerMetrics()
        history = History(config.history_interval_s, config.history_kept_s)
        self._plane = ControlPlane(config, cluster, journal, clock, metrics, scaling,
                                   history=history)
        self._train = TrainDesk(self._plane, cluster)

    @property
    def plane(self) -> ControlPlane:
        """The control plane behind the facade (for tests that drive it by hand)."""
        return self._plane

    # `SchedulerAPI.deploy` (its doc is the protocol's, as for the forwarded calls), its
    # application read first, here where Serve is: an application of several deployments
    # (or one given per-deployment options) becomes a gang of a role per deployment
    # (`runtime.serve_graph.complete`); the plane runs without Ray.
    async def deploy(self, deployment: DeploymentSpec, app: Any = None,
                     parent: str | None = None) -> str:
        from raygang.runtime import serve_graph  # imports Serve: only with a deployment

        deployment = revalidated(deployment, DeploymentSpec, "deploy")
        deployment = await asyncio.to_thread(serve_graph.complete, deployment, app)
        return await self._plane.deploy(deployment, app, parent)

    # Ray Train runs (runtime/client/train_callback.py calls these) ---------------------------
    # Each waits for the recovered state first: a restarted scheduler must have adopted a
    # run's session before it answers for it (a watcher told "ended" stops watching).
    async def train_open(self, spec: GangSpec, parent: str | None, controller: str | None,
                         key: str, kind: str = "train") -> str:
        await self._plane.ready()
        return await self._train.open(spec, parent, controller, key, kind)

    async def train_claim(self, session: str, timeout: float) -> list[str] | None:
        await self._plane.ready()
        return await self._train.claim(session, timeout)

    async def train_adopt(self, session: str, pg_id: str) -> list[str]:
        await self._plane.ready()
        return await self._train.adopt(session, pg_id)

    async def train_released(self, session: str, final: bool) -> None:
        await self._plane.ready()
        self._train.released(session, final)

    async def train_finished(self, session: str, error: str | None) -> None:
        await self._plane.ready()
        await self._train.finished(session, error)

    async def train_wait_preempt(self, session: str, timeout: float) -> dict | None:
        await self._plane.ready()
        return await self._train.wait_preempt(session, timeout)


def _forward(name: str) -> Callable[..., Any]:
    """`SchedulerAPI.<name>` on the actor: the plane's call of that name."""
    async def call(self: Scheduler, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self._plane, name)(*args, **kwargs)

    call.__name__, call.__qualname__ = name, f"Scheduler.{name}"
    call.__doc__ = getattr(SchedulerAPI, name).__doc__
    return call


# Every call of the protocol is one call of the plane: forwarded, not written out again
# (but for `deploy`)
# (the protocol is where each is declared and typed; tests/unit/test_scheduler_api.py
# checks that the actor offers them all).
for _name in calls(SchedulerAPI):
    if _name not in Scheduler.__dict__:  # written out above: it does more than forward
        setattr(Scheduler, _name, _forward(_name))
Scheduler.deploy.__doc__ = SchedulerAPI.deploy.__doc__


# The actor: no resources of its own, many concurrent calls (waits are long polls).
# Ray restarts it whenever it dies (its process or its node); it then recovers its state
# from the store (control/recovery.py). Calls in flight are not retried by Ray: the
# client retries them (the Python API's submissions carry an idempotency key).
# (Ray's overloads of `ray.remote` leave out `max_concurrency`, an actor option.)
SchedulerActor = ray.remote(  # type: ignore[call-overload]
    num_cpus=0, max_concurrency=10_000, max_restarts=-1)(Scheduler)
