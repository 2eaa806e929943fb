"""Rebuilding the scheduler's book after its process restarted (Ray restarts the actor),
from the journal and from what is left in the cluster.

- Queue changes made at run time are applied again over the config.
- Finished and cancelled gangs stay as they were (their results come back from the store
  only if they were kept there).
- A gang whose cancellation was written but not carried out is cancelled now.
- A pending gang keeps its id and its place in line (same submission sequence).
- A running gang whose parts are all there (members and reservation, or a Serve
  application) is adopted: the new process takes over its run without restarting
  anything; its history says so.
- A gang that was admitted or starting, or running but missing a part, is torn down and
  requeued, with an event saying so. It counts as neither a restart nor a preemption.
- What belongs to no unfinished gang is removed (orphans of a crash between creating
  something and recording it).
- Idempotency keys are restored, so a client retrying across the restart gets its gang.
- The queues' usage over time (time-based fair share, `control.usage`) is read back.

The cluster is met first, the book written after (`rebuild`): every call to the cluster
(listing what is left, adopting, removing) is made before anything is restored, so a
call that fails or does not answer leaves nothing half-done in the book, and the plane
tries the whole rebuild again (`ControlPlane._recover`) instead of deciding anything
about a gang it could not see: a GCS that does not answer is never a gang dead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from raygang.control.errors import ClusterUnreachable
from raygang.control.fleet import Fleet
from raygang.control.journal import Journal
from raygang.control.ports import Cluster, GangRun
from raygang.control.records import GangRecord
from raygang.control.registry import Registry
from raygang.core.gang import GangState
from raygang.core.queues import QueueSpec
from raygang.core.lifecycle import FoundAfterRestart, Outcome, RestartPolicy, decide

log = logging.getLogger(__name__)
T = TypeVar("T")

# Recovery's calls to a cluster whose calls may block (`Cluster.calls_block`: on Ray,
# GCS calls, which wait while the GCS is down, up to its request timeout of 60 s) run in a
# thread, each within this: the actor's event loop goes on answering meanwhile (`ping`
# says it is not ready yet). As long as the store's own timeout (gcs_store.py): listing
# every named actor and placement group, or removing a thousand orphans, takes seconds
# on a loaded cluster, and a healthy GCS must not be taken for an outage.
CALL_TIMEOUT_S = 30.0


class RecoveryCalls:
    """Recovery's calls to one plane's cluster, one at a time: a late adoption would
    otherwise register its run (e.g. a job's budget) over the run of the try after it.
    The plane keeps one for all its tries, as a call may outlive the try that made it."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        # A call still running past its timeout: the next try waits for it first
        self._late: asyncio.Future[Any] | None = None

    async def call(self, call: Callable[..., T], *args: Any) -> T:
        """`call(*args)`, off the loop within CALL_TIMEOUT_S where the cluster's calls may
        block (ClusterUnreachable past it); in place where they never do (an in-process
        cluster: its calls keep their order among a simulation's callbacks, and its
        state is never touched from another thread)."""
        if not self.cluster.calls_block:
            return call(*args)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CALL_TIMEOUT_S
        late = self._late
        if late is not None and not late.done() and late.get_loop() is loop:
            await asyncio.wait({late}, timeout=CALL_TIMEOUT_S)
            if not late.done():
                raise ClusterUnreachable("a recovery call of an earlier try has not "
                                         f"returned within {CALL_TIMEOUT_S:g} s more")
        # Never cancelled: it ends when its thread does (a `late` one then says so)
        calling = asyncio.ensure_future(asyncio.to_thread(call, *args))
        try:
            done, _ = await asyncio.wait({calling},
                                         timeout=max(0.0, deadline - loop.time()))
        finally:
            if not calling.done():  # timed out, or the plane is closing
                self._late = calling
                calling.add_done_callback(lambda c: c.cancelled() or c.exception())
        if not done:
            raise ClusterUnreachable(f"the cluster did not answer a recovery call "
                                     f"({getattr(call, '__name__', call)}) within "
                                     f"{CALL_TIMEOUT_S:g} s")
        return calling.result()


async def rebuild(journal: Journal, registry: Registry, fleet: Fleet, calls: RecoveryCalls,
                  policy: RestartPolicy, clock: Callable[[], float],
                  apply_queues: Callable[[list[QueueSpec]], None],
                  changed: Callable[[GangRecord], None],
                  restore_usage: Callable[[dict[str, bytes]], bool] | None = None,
                  ) -> dict[str, Any]:
    """Fill `registry` (and `fleet`, with the adopted gangs) from the journal and from
    the cluster (met through `calls`), after handing the queue changes read back to
    `apply_queues` and the queues' usage over time to `restore_usage` (which says
    whether it found any); returns what it found and did.
    Raises (nothing restored) if the store or the cluster fails or does not answer."""
    started = time.monotonic()
    queues, records = await journal.load()
    if queues:
        apply_queues(queues)
    usage = restore_usage is not None and restore_usage(await journal.load_usage())
    found: dict[str, Any] = {"gangs": len(records), "pending": 0, "adopted": 0,
                             "requeued": 0, "cancelled": 0, "finished": 0,
                             "orphans_removed": 0, "usage": usage}
    now = clock()
    fates, found["orphans_removed"] = await _meet_the_cluster(records, calls, policy, now)
    for record in records:  # the book, on the loop: nothing here waits for the cluster
        registry.restore(record)
        fate = fates.get(record.gang_id)
        if record.state.finished:
            found["finished"] += 1
        elif record.state is GangState.PENDING and not record.cancel_reason:
            found["pending"] += 1
        elif isinstance(fate, Outcome):  # cancelled, or requeued: its parts are removed
            record.apply(fate, now)
            changed(record)
            if record.cancel_reason:
                registry.finished(record)
                found["cancelled"] += 1
            else:
                found["requeued"] += 1
        elif fate is not None:
            fleet.adopt(record, fate)
            found["adopted"] += 1
    found["results_expired"] = await journal.expire_results(records, now)
    registry.resume_seq()
    found["seconds"] = round(time.monotonic() - started, 3)
    if records:
        log.warning("raygang scheduler recovered its state: %s", found)
    return found


async def _meet_the_cluster(records: list[GangRecord], calls: RecoveryCalls,
                            policy: RestartPolicy, now: float
                            ) -> tuple[dict[str, Outcome | GangRun], int]:
    """What becomes of each unfinished gang that is not simply pending, by id: its run
    (adopted) or the decision that requeues or cancels it (its parts removed now); and
    how many parts of no unfinished gang were removed. Touches no record's state."""
    cluster = calls.cluster
    leftovers = await calls.call(cluster.leftovers, {r.gang_id for r in records})
    fates: dict[str, Outcome | GangRun] = {}
    for record in records:
        if record.state.finished or \
                (record.state is GangState.PENDING and not record.cancel_reason):
            continue
        if record.state is GangState.RUNNING and not record.cancel_reason:
            run = await calls.call(cluster.adopt, record, leftovers)
            if run is not None:
                fates[record.gang_id] = run
                leftovers.take(record.gang_id)  # its own now, not leftovers
                continue
        await calls.call(leftovers.clear, record.gang_id)
        fates[record.gang_id] = decide(record.life(), FoundAfterRestart(), policy, now)
    unfinished = {r.gang_id for r in records if not r.state.finished
                  and not _ends(fates.get(r.gang_id))}
    return fates, await calls.call(leftovers.orphans, unfinished)


def _ends(fate: Outcome | GangRun | None) -> bool:
    """Whether the decision leaves the gang finished (a cancellation carried out)."""
    return isinstance(fate, Outcome) and bool(fate.moves) and fate.moves[-1].to.finished

