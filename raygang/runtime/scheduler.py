"""The scheduler actor: a detached, named async Ray actor, the RPC facade of one
`ControlPlane` (raygang/control) wired to Ray: the cluster port (`RayCluster`: placement
groups, member actors, Serve), the durable store (Ray's GCS key-value store by default),
Ray's metrics, and the scaler (KubeRay or Ray's autoscaler).

Each method is one call of the plane; only `results` adds Ray's part: object refs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from typing import Any

import ray
from ray import cloudpickle

from raygang.control import kinds
from raygang.control.config import SchedulerConfig, StateConfig
from raygang.control.errors import GangNotFoundError
from raygang.control.journal import Journal
from raygang.control.plane import ControlPlane
from raygang.control.program import RoleProgram
from raygang.control.status import ClusterStatus, DryRunResult, GangStatus, QueueStatus
from raygang.control.store import MemoryStore, SqliteStore, Store
from raygang.core.gang import GangState
from raygang.core.queues import QueueSpec
from raygang.core.spec import DeploymentSpec, GangSpec, JobSpec
from raygang.runtime.cluster import RayCluster
from raygang.runtime.gcs_store import GcsStore
from raygang.runtime.scaling import ScaleDriver
from raygang.runtime.train_desk import TrainDesk


def open_store(state: StateConfig) -> Store:
    if state.store == "memory":
        return MemoryStore()
    if state.store == "sqlite":
        assert state.path is not None
        return SqliteStore(state.path)
    return GcsStore()


class Scheduler:
    def __init__(self, config: SchedulerConfig, clock: Callable[[], float] = time.time):
        from raygang.runtime.metrics import SchedulerMetrics  # made in the actor process

        scaling = (ScaleDriver(config.scaling, clock=clock)
                   if config.scaling.mode != "off" else None)
        journal = Journal(open_store(config.state), config.state, pickler=cloudpickle)
        cluster = RayCluster(config.serve_http_port, config.handoff_lease_s,
                             config.jobs_address)
        self._cluster = cluster
        self._plane = ControlPlane(config, cluster, journal, clock, SchedulerMetrics(), scaling)
        self._train = TrainDesk(self._plane, cluster)

    @property
    def plane(self) -> ControlPlane:
        """The control plane behind the facade (for tests that drive it by hand)."""
        return self._plane

    async def ping(self) -> dict:
        return await self._plane.ping()

    async def submit(self, spec: GangSpec, programs: dict[str, RoleProgram],
                     idempotency_key: str | None = None, parent: str | None = None) -> str:
        return await self._plane.submit(spec, programs, idempotency_key, parent)

    async def deploy(self, deployment: DeploymentSpec, app: Any = None,
                     parent: str | None = None) -> str:
        return await self._plane.deploy(deployment, app, parent)

    async def undeploy(self, name: str) -> GangStatus:
        return await self._plane.undeploy(name)

    async def list_deployments(self) -> list[GangStatus]:
        return await self._plane.list_deployments()

    async def queues(self) -> list[QueueStatus]:
        return await self._plane.queues()

    async def set_queue(self, queue: QueueSpec) -> list[QueueStatus]:
        return await self._plane.set_queue(queue)

    async def dry_run(self, spec: GangSpec) -> DryRunResult:
        return await self._plane.dry_run(spec)

    async def status(self, gang_id: str) -> GangStatus:
        return await self._plane.status(gang_id)

    async def debug_cycle(self) -> dict:
        """The next cycle's inputs and plan, for `raygang sim --replay-cycle`."""
        return await self._plane.debug_cycle()

    async def list_gangs(self, state: GangState | None = None,
                         queues: Collection[str] | None = None) -> list[GangStatus]:
        return await self._plane.list_gangs(state, queues)

    async def gang_page(self, state: GangState | None, queues: Collection[str] | None,
                        offset: int, limit: int, newest_first: bool = False,
                        ) -> tuple[list[GangStatus], int]:
        return await self._plane.gang_page(state, queues, offset, limit, newest_first)

    async def cluster(self) -> ClusterStatus:
        return await self._plane.cluster()

    async def wait(self, gang_id: str, timeout: float | None = None,
                   until_running: bool = False) -> GangStatus:
        return await self._plane.wait(gang_id, timeout, until_running)

    async def results(self, gang_id: str) -> list:
        """Object refs of the members' results in rank order (for a SUCCEEDED gang)."""
        return await self._plane.results(gang_id)

    async def cancel(self, gang_id: str, reason: str = "cancelled by user") -> GangStatus:
        return await self._plane.cancel(gang_id, reason)

    # Ray Jobs (runtime/jobs.py) ------------------------------------------------------
    async def submit_job(self, job: JobSpec, idempotency_key: str | None = None) -> str:
        return await self._plane.submit_job(job, idempotency_key)

    async def list_jobs(self, state: GangState | None = None) -> list[GangStatus]:
        return await self._plane.list_jobs(state)

    async def job_logs(self, gang_id: str) -> str:
        """The output of the job's Ray job (its last attempt's); empty before it started."""
        status = await self._plane.status(gang_id)
        if not kinds.of(status.kind).ray_job:
            raise GangNotFoundError(f"{gang_id} is a {status.kind}, not a job")
        if status.ray_job_id is None:
            return ""
        return await asyncio.to_thread(self._cluster.jobs.logs, status.ray_job_id)

    # Ray Train runs (runtime/train_callback.py calls these) ---------------------------
    # Each waits for the recovered state first: a restarted scheduler must have adopted a
    # run's session before it answers for it (a watcher told "ended" stops watching).
    async def train_open(self, spec: GangSpec, parent: str | None, controller: str | None,
                         key: str) -> str:
        await self._plane.ready()
        return await self._train.open(spec, parent, controller, key)

    async def train_claim(self, session: str, timeout: float) -> list[str] | None:
        await self._plane.ready()
        return await self._train.claim(session, timeout)

    async def train_adopt(self, session: str, pg_id: str) -> list[str]:
        await self._plane.ready()
        return self._train.adopt(session, pg_id)

    async def train_released(self, session: str, final: bool) -> None:
        await self._plane.ready()
        self._train.released(session, final)

    async def train_finished(self, session: str, error: str | None) -> None:
        await self._plane.ready()
        await self._train.finished(session, error)

    async def train_wait_preempt(self, session: str, timeout: float) -> dict | None:
        await self._plane.ready()
        return await self._train.wait_preempt(session, timeout)

    async def shutdown(self) -> int:
        return await self._plane.shutdown()


# The actor: no resources of its own, many concurrent calls (waits are long polls).
# Ray restarts it whenever it dies (its process or its node); it then recovers its state
# from the store (control/recovery.py). Calls in flight are not retried by Ray: the
# client retries them (the Python API's submissions carry an idempotency key).
SchedulerActor = ray.remote(num_cpus=0, max_concurrency=10_000, max_restarts=-1)(Scheduler)
