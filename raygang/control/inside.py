"""Gangs inside a job: what a running raygang job's driver submits is placed in the job's
budget, not queued a second time.

A Ray Job is admitted with a budget of bundles (`runtime.kinds.job`). The `@gang_task` gangs
and Serve deployments its driver then submits (the driver runs with `RAYGANG_JOB_ID`, and
the client sends it as the submission's `parent`) are that job's work: they take whole
bundles of the job's budget (`core.budget.take`), run on those bundles' nodes through the
same driver, lifecycle and runs as any gang, and give the bundles back when they end.
So they count against the job's budget only: they are never in a queue's line nor in
the book the core decides on (the job books the capacity), they never preempt anything,
and nothing but their job's end preempts them.

Within a job, gangs are placed in submission order; one that does not fit the budget's
free bundles waits, and so do those after it (first come, first served, as a job's own
work is ordered by its driver). A gang that could never fit the budget, or whose job is
not running, is refused at submission. When a job stops (it ended, failed, was stopped or
preempted), the gangs inside it are cancelled after its driver has stopped, before its
capacity is let go: a preempted job's driver runs again from the start and submits its
gangs again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from raygang.control.errors import GangNotFoundError, UnschedulableError
from raygang.control.fleet import Fleet
from raygang.control.ports import Cluster
from raygang.control.records import GangRecord
from raygang.control.registry import Registry
from raygang.control.tasks import Spawn, first_set, spawn_free
from raygang.core.gang import GangState
from raygang.core.plan import Admission, WaitCode
from raygang.core.spec import GangSpec

log = logging.getLogger(__name__)


class Inside:
    """Places the gangs submitted from inside running jobs (see the module's docstring):
    at once on submission and when one ends, and every `interval()` seconds for the room
    a job's Train run gives back."""

    def __init__(self, registry: Registry, fleet: Fleet, cluster: Cluster,
                 clock: Callable[[], float], interval: Callable[[], float],
                 cancel: Callable[[str, str], Coroutine[Any, Any, object]],
                 spawn: Spawn = spawn_free):
        self._registry = registry
        self._fleet = fleet
        self._budgets = cluster.budget
        self._clock = clock
        self._interval = interval
        self._cancel = cancel
        self._spawn = spawn
        self._wake = asyncio.Event()
        self._cancelling: set[str] = set()

    async def run(self) -> None:
        while True:
            await first_set([self._wake], self._interval())
            self._wake.clear()
            self._place()

    def _place(self) -> None:
        try:
            self.place()
        except Exception:  # never let one bad placement stop the others for good
            log.exception("placing gangs inside their jobs failed")

    def _wake_after(self, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self._wake.set)

    def check(self, spec: GangSpec, parent: str) -> None:
        """Refuse a submission that cannot run inside job `parent` (with why, and how to
        queue it on its own instead)."""
        record = self._registry.find(parent)
        if record is None:
            raise GangNotFoundError(
                f"parent: no job with id {parent!r} (RAYGANG_JOB_ID); unset RAYGANG_JOB_ID "
                "to queue the gang on its own")
        budget = self._budgets(parent)
        if record.state is not GangState.RUNNING or budget is None:
            raise UnschedulableError(
                f"parent: {record.display} is {record.state.value}, not a running job; "
                "only a running raygang job's driver places gangs inside its budget")
        if spec.layout is not None:
            raise UnschedulableError(
                f"topology: {spec.name!r} asks for a topology, which a gang placed inside "
                f"{record.display}'s budget cannot have (the budget's nodes are chosen "
                "already); unset RAYGANG_JOB_ID to queue the gang on its own")
        why = budget.never_fits(spec.bundles)
        if why:
            raise UnschedulableError(
                f"{spec.name!r} can never be placed inside {record.display}'s budget: {why}")

    def place(self) -> None:
        """Place every waiting gang whose job's budget has room now, in submission order
        per job (one that does not fit holds back its job's later gangs)."""
        if not self._registry.jobs_with_gangs():  # the usual case: every second, nothing
            return
        now = self._clock()
        self._orphans()
        blocked: dict[str, str] = {}  # job id -> the gang that waits first
        for record in self._registry.waiting_inside():
            parent = record.parent
            assert parent is not None
            budget = self._budgets(parent)
            if budget is None:
                continue  # its job is stopping: `ended` cancels it
            if record.not_before is not None and record.not_before > now:
                self._wake_after(record.not_before - now)
                blocked.setdefault(parent, record.gang_id)
                continue
            if parent in blocked:
                record.set_waiting(WaitCode.BEHIND, f"behind {blocked[parent]} inside job "
                                   f"{parent}'s budget", None)
                continue
            nodes = budget.take(record.gang_id, record.spec.bundles)
            if nodes is None:
                blocked[parent] = record.gang_id
                record.set_waiting(
                    WaitCode.NO_FIT,
                    f"waiting for room inside job {parent}'s budget ({budget.in_use()} of "
                    f"{len(budget.bundles)} bundles in use)", None)
                continue
            self._fleet.admit(record, Admission(record.gang_id, tuple(nodes)), now)

    def _orphans(self) -> None:
        """Cancel the gangs of a job that holds nothing any more and is not stopping (a
        restarted scheduler found the job gone, or requeued it, but its gangs): `ended`
        cancels them on every other path."""
        for parent in self._registry.jobs_with_gangs():
            job = self._registry.find(parent)
            if self._budgets(parent) is None and (
                    job is None or job.state is GangState.PENDING or job.state.finished):
                why = f"its job {parent} is not running ({job.state.value if job else 'gone'})"
                for record in self._registry.inside(parent):
                    if record.gang_id not in self._cancelling:
                        self._cancelling.add(record.gang_id)
                        task = self._spawn(self._cancel(record.gang_id, why))
                        task.add_done_callback(functools.partial(
                            lambda g, _: self._cancelling.discard(g), record.gang_id))

    def recovered(self, record: GangRecord) -> None:
        """A restarted scheduler adopted `record`, running inside its job: the job's
        budget learns again which bundles it holds."""
        budget = self._budgets(record.parent) if record.parent else None
        if budget is not None:
            budget.restore(record.gang_id, record.nodes, record.spec.bundles)

    def released(self, record: GangRecord) -> None:
        """A gang inside a job let go of what it held: the job's budget has it back."""
        if record.parent is None:
            return
        budget = self._budgets(record.parent)
        if budget is not None:
            budget.give_back(record.gang_id)
        self.place()

    async def ended(self, record: GangRecord) -> None:
        """Job `record` is stopping (its driver has stopped): cancel the gangs inside it,
        and wait until they are gone, so its capacity is not let go before them."""
        inside = self._registry.inside(record.gang_id)
        if inside:
            why = f"its job {record.gang_id} stopped ({record.reason or record.state.value})"
            await asyncio.gather(*(self._cancel(r.gang_id, why) for r in inside))
