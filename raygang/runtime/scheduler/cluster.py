"""The control plane's `Cluster` port on Ray.

- observe: nodes and free resources from the GCS (`observe.py`);
- a run per admitted gang, made by its kind (`runtime.kinds`: `GangLaunch`, placement
  group + member actors, for a gang; `ServeLaunch`, a Serve application on the reserved
  nodes, for a deployment; a Ray Job; a Ray Train run);
- recovery: the `raygang-*` member actors and placement groups left in Ray
  (`leftovers.py`), adopting a running gang whose parts are all there (its kind
  says which parts);
- results: object refs, fetched to keep them in the store and put back after a restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Container, Iterable, Mapping, Sequence
from typing import Any

import ray

from raygang.control.errors import ClusterUnreachable
from raygang.control.ports import GangRun, Leftovers
from raygang.control.records import GangRecord
from raygang.control.status import MemberStatus
from raygang.core.gang import GangState
from raygang.core.resources import Resources, per_node
from raygang.core.snapshot import ClusterSnapshot, PlacedGang
from raygang.core.spec import Resize
from raygang.runtime import kinds
from raygang.runtime.handoff.train import TrainSession
from raygang.runtime.kinds.job.launch import JobLaunch
from raygang.runtime.kinds.job.submission import JobClient
from raygang.runtime.ray_private import GCS_DOWN, available_resources_per_node
from raygang.runtime.scheduler.gcs_store import gcs_reachable
from raygang.runtime.scheduler.leftovers import RayLeftovers
from raygang.runtime.scheduler.observe import observe, schedulable

log = logging.getLogger(__name__)
FREE_POLL_S = 0.01  # how often `until_free` reads the GCS (the view lags by 10-100 ms)


class RayCluster:
    # GangLaunch adds and removes an elastic gang's surplus members, or restarts it whole
    resizes = frozenset({Resize.LIVE, Resize.RESTART})
    # GCS calls wait while the GCS is down: the loop reads, and recovers, in a thread
    calls_block = True
    always_answers = False
    gangs_inside_jobs = True  # Ray Jobs' (`launches`)
    tells_changes = False  # nodes join and other work frees room without a word

    def __init__(self, serve_http_port: int | None, lease_s: float = 120.0,
                 jobs_address: str | None = None):
        self.serve_http_port = serve_http_port
        self.lease_s = lease_s
        self.jobs = JobClient(jobs_address)
        # Hand-offs under way, by id: a Train run's (its gang id, or "<job id>/<run>").
        self.sessions: dict[str, TrainSession] = {}
        self.launches: dict[str, JobLaunch] = {}  # running jobs (Train runs find budgets)
        # Each node's labels as last observed: what a gang with a topology pins its
        # bundles to, beside the node id (core/topology.py `pins`).
        self.node_labels: dict[str, Mapping[str, str]] = {}
        # `until_free`'s read under way or last made, and when it began (the loop's clock)
        self._reading_free: tuple[asyncio.Future[dict[str, dict[str, float]]] | None,
                                  float] = (None, 0.0)

    def observe(self, held: Iterable[PlacedGang], draining: Collection[str]) -> ClusterSnapshot:
        try:
            snapshot = observe(held, draining)
        except GCS_DOWN as error:
            raise ClusterUnreachable(f"Ray's GCS did not answer: {error}") from error
        self.node_labels = {n.node_id: n.labels for n in snapshot.nodes}
        return snapshot

    async def answers(self, timeout: float) -> bool:
        return await gcs_reachable(timeout)

    async def until_free(self, bundles: Sequence[tuple[str, Resources]],
                         timeout: float) -> bool:
        """Until the GCS shows `bundles` free on their nodes. A placement group created
        before it does (a removed group's resources show tens of milliseconds after the
        removal) fails its first try; the GCS retries it after a backoff only when
        something else makes it schedule, else at its tick, once a second: reserved
        ~0.5 s late on average. Created once the room shows, it is placed at once."""
        need = per_node(bundles)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            # A GCS that does not answer (an outage) holds this wait, not the scheduler's
            # loop, and no longer than `timeout`; the read left running then ends when the
            # GCS answers, for whoever waits next.
            read = self._free_read()
            done, _ = await asyncio.wait({read}, timeout=max(0.0, deadline - loop.time()))
            if not done:
                return False
            available = read.result()
            if all(amount.fits_in(schedulable(available.get(node, {})))
                   for node, amount in need.items()):
                return True
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(FREE_POLL_S)

    def _free_read(self) -> asyncio.Future[dict[str, dict[str, float]]]:
        """The free resources per node, read in a thread; one read for every waiter
        (`until_free`), begun again once the last one has returned and is FREE_POLL_S
        old. A read each per waiter and poll would queue in the default thread pool
        (6 threads on 2 cores) while many admissions wait, and eat their timeouts."""
        loop = asyncio.get_running_loop()
        read, since = self._reading_free
        if read is None or read.get_loop() is not loop \
                or (read.done() and loop.time() - since >= FREE_POLL_S):
            read = asyncio.ensure_future(asyncio.to_thread(available_resources_per_node))
            read.add_done_callback(lambda late: late.cancelled() or late.exception())
            self._reading_free = (read, loop.time())
        return read

    def new_run(self, record: GangRecord, nodes: Sequence[str], attempt: int,
                on_member_ready: Callable[[MemberStatus], None]) -> GangRun:
        return kinds.of(record.kind).new_run(self, record, nodes, attempt, on_member_ready)

    def budget(self, job_id: str) -> JobLaunch | None:
        """A running job's budget, for the gangs and deployments its driver submits."""
        return self.launches.get(job_id)

    def leftovers(self, known: Container[str]) -> RayLeftovers:
        return RayLeftovers(known)

    def adopt(self, record: GangRecord, leftovers: Leftovers) -> GangRun | None:
        """A running gang whose parts are all still in Ray, as its kind finds them (a
        gang's members and placement group, a deployment's Serve application, ...)."""
        assert isinstance(leftovers, RayLeftovers)  # what `self.leftovers` read
        if record.state is not GangState.RUNNING:
            return None
        return kinds.of(record.kind).adopt(self, record, leftovers)

    async def fetch(self, results: list[Any]) -> list[Any]:
        return list(await asyncio.gather(*results))

    def restore_results(self, values: list[Any]) -> list[Any]:
        return [ray.put(value) for value in values]

    async def job_logs(self, ray_job_id: str) -> str:
        return await asyncio.to_thread(self.jobs.logs, ray_job_id)
