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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from raygang.control.fleet import Fleet
from raygang.control.journal import Journal
from raygang.control.ports import Cluster
from raygang.control.records import GangRecord
from raygang.control.registry import Registry
from raygang.core.gang import GangState
from raygang.core.queues import QueueSpec
from raygang.core.lifecycle import FoundAfterRestart, RestartPolicy, decide

log = logging.getLogger(__name__)


async def rebuild(journal: Journal, registry: Registry, fleet: Fleet, cluster: Cluster,
                  policy: RestartPolicy, clock: Callable[[], float],
                  apply_queues: Callable[[list[QueueSpec]], None],
                  changed: Callable[[GangRecord], None],
                  restore_usage: Callable[[dict[str, bytes]], bool] | None = None,
                  ) -> dict[str, Any]:
    """Fill `registry` (and `fleet`, with the adopted gangs) from the journal, after
    handing the queue changes read back to `apply_queues` and the queues' usage over time
    to `restore_usage` (which says whether it found any); returns what it found and did."""
    started = time.monotonic()
    queues, records = await journal.load()
    if queues:
        apply_queues(queues)
    usage = restore_usage is not None and restore_usage(await journal.load_usage())
    found: dict[str, Any] = {"gangs": len(records), "pending": 0, "adopted": 0,
                             "requeued": 0, "cancelled": 0, "finished": 0,
                             "orphans_removed": 0, "usage": usage}
    now = clock()
    leftovers = cluster.leftovers({r.gang_id for r in records})
    for record in records:
        registry.restore(record)
        if record.state.finished:
            found["finished"] += 1
        elif record.cancel_reason:
            leftovers.clear(record.gang_id)
            record.apply(decide(record.life(), FoundAfterRestart(), policy, now), now)
            changed(record)
            registry.finished(record)
            found["cancelled"] += 1
        elif record.state is GangState.PENDING:
            found["pending"] += 1
        elif record.state is GangState.RUNNING and \
                (run := cluster.adopt(record, leftovers)) is not None:
            fleet.adopt(record, run)
            leftovers.take(record.gang_id)  # its own now, not leftovers
            found["adopted"] += 1
        else:
            leftovers.clear(record.gang_id)
            record.apply(decide(record.life(), FoundAfterRestart(), policy, now), now)
            changed(record)
            found["requeued"] += 1
    found["results_expired"] = await journal.expire_results(records, now)
    unfinished = {r.gang_id for r in records if not r.state.finished}
    found["orphans_removed"] = leftovers.orphans(unfinished)
    registry.resume_seq()
    found["seconds"] = round(time.monotonic() - started, 3)
    if records:
        log.warning("raygang scheduler recovered its state: %s", found)
    return found
