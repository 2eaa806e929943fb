"""A Ray Job as a hand-off gang: queued by raygang, started by Ray's Job Submission API.

The job waits in its queue like any gang; once admitted, its budget (`JobSpec.bundles`)
is held on the chosen nodes (`handoff.budget.Budget`) and only then is the entrypoint submitted
to Ray (`raygang-<gang id>-<attempt>`). The driver runs with:

- `RAYGANG_JOB_ID`: its raygang id, so Ray Train runs it starts (`TrainSession`s of this
  job), and the gangs and deployments it submits (`control.inside`), are placed inside
  the job's budget instead of queueing a second time;
- `RAY_TRAIN_CALLBACKS`: raygang's Train callback, so that happens with no code change;
- `RAYGANG_ATTEMPT`: 0, then one more after each restart or preemption;
- `RAY_JOB_STOP_WAIT_TIME_S`: the grace period (and a margin), Ray's wait between SIGTERM
  and SIGKILL. The entrypoint runs under `process_group`, which ends its whole process
  group at a stop, SIGKILL after the grace period.

Stopping (preemption or `job stop`): Train runs inside are preempted through Train's own
path first (their workers checkpoint; Train tears them down at the deadline); then Ray
stops the job (SIGTERM, the grace period, SIGKILL). A preempted job goes back to its queue
with the same id and starts its entrypoint again when admitted (a new Ray job id), once
Ray says every earlier attempt ended. A stop at any point of the start ends the Ray job:
a submission under way then is let finish (Ray may still accept it) and is stopped.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from raygang.control.ports import MemberFailure
from raygang.control.status import GangError
from raygang.control.tasks import run_to_completion
from raygang.core.budget import never_fits
from raygang.core.resources import Resources
from raygang.core.spec import GangSpec
from raygang.core.workload_specs import JobSpec
from raygang.runtime.handoff.budget import Budget
from raygang.runtime.handoff.train import TrainSession
from raygang.runtime.kinds.job import process_group
from raygang.runtime.kinds.job.submission import (
    TERMINAL,
    JobClient,
    stop_until_ended,
    transient,
)
from raygang.runtime.kinds.kind import NoLiveResize, NoRestartResize
from raygang.runtime.names import TRAIN_CALLBACK, node_selector, ray_job_id
from raygang.runtime.ray_private import GCS_DOWN, gcs_reconnect_s

log = logging.getLogger(__name__)
POLL_S = 1.0
LOG_TAIL_CHARS = 2000
STOP_MARGIN_S = 5
JOB_ACTOR = "_ray_internal_job_actor_{}"  # the name Ray gives a job's supervisor actor


def driver_command(entrypoint: str, gcs_address: str | None, grace_s: float) -> str:
    """The entrypoint, its `ray.init()` joining this cluster, run by `process_group` so that
    a stop ends every process it started.

    RAY_ADDRESS: Ray's job supervisor sets the driver's to the cluster last recorded in
    its temp dir (`canonicalize_bootstrap_address_or_die("auto")` in job_supervisor.py),
    not to its own: with two Ray clusters on one machine the driver joins the other one
    (and a Train run it starts never runs: its controller is pinned to a node of the wrong
    cluster). Its value overrides the runtime env's `env_vars`; an export in front of the
    command (Ray runs entrypoints with a POSIX shell) comes after it.

    `exec`: the shell Ray starts becomes `process_group` (no fork), so it is the process
    Ray's stop signals. It runs with this process's interpreter, isolated (`-I`: the
    standard library only), which the driver's node has as every raygang node does."""
    if os.name != "posix":
        return entrypoint
    if gcs_address:
        entrypoint = f"export RAY_ADDRESS={shlex.quote(gcs_address)}; {entrypoint}"
    return " ".join(["exec", shlex.quote(sys.executable), "-I", shlex.quote(process_group.__file__),
                     f"{grace_s:g}", shlex.quote(entrypoint)])


class JobLaunch(NoLiveResize, NoRestartResize):  # a job's budget has a fixed size
    """The run of a job gang (the `GangRun` port)."""

    def __init__(self, gang_id: str, spec: GangSpec, job: JobSpec, nodes: Sequence[str],
                 attempt: int, client: JobClient, lease_s: float,
                 sessions: dict[str, TrainSession], started: Callable[[str], None]):
        self.gang_id = gang_id
        self.spec = spec
        self.job = job
        self.client = client
        self.lease_s = lease_s
        self.attempt = attempt
        self.job_id = ray_job_id(gang_id, attempt)
        self.budget = Budget(gang_id, spec.bundles, nodes, spec.reservation_timeout_s)
        self._sessions = sessions
        self._mine: dict[str, TrainSession] = {}
        self._inside: dict[str, list[int]] = {}  # gang inside it -> the bundles it took
        self._started = started
        # The submit call runs in a thread, which cancelling `start_members` does not stop:
        # its own task, waited for by a stop (`_in_ray`).
        self._submission: asyncio.Future | None = None
        self._submitted = False  # Ray has the job
        self._stopping = False
        self._stop_taken = False  # Ray's job supervisor has the stop
        self._abandoned = False  # a stop gave up waiting for the submission: it stops itself
        self.on_close: Callable[[], Any] = lambda: None

    @classmethod
    def adopted(cls, gang_id: str, spec: GangSpec, job: JobSpec, nodes: Sequence[str],
                job_id: str, client: JobClient, lease_s: float,
                sessions: dict[str, TrainSession], holds: dict[int, Any]) -> JobLaunch:
        """A job a previous scheduler process started, still running in Ray."""
        launch = cls(gang_id, spec, job, nodes, 0, client, lease_s, sessions, lambda _: None)
        launch.job_id = job_id
        launch._submitted = True
        launch.budget.adopt_holds(holds)
        launch.budget.claimed.update(set(range(len(spec.bundles))) - set(holds))
        return launch

    # Hand-off of the budget to Train runs of the job ------------------------------
    def open_session(self, name: str, wanted: Sequence[Resources],
                     controller_id: str | None) -> TrainSession:
        """A Train run of the job's driver: placed inside the job's budget."""
        why = never_fits(self.budget.bundles, wanted)
        if why:
            raise ValueError(f"the Train run cannot be placed in job {self.gang_id}'s budget: "
                             f"{why}")
        session_id = f"{self.gang_id}/{name}"
        old = self._mine.get(session_id)
        if old is not None:  # the driver started this run again (a new controller)
            self._end_session(old)
        session = TrainSession(session_id, wanted, self.budget, self.lease_s, controller_id,
                               on_release=self._give_back)
        session.claimable.set()  # the budget is held already
        self._mine[session_id] = self._sessions[session_id] = session
        return session

    def _give_back(self, session: TrainSession) -> None:
        indices, session.indices = session.indices, []
        if not self._stopping:
            self.budget.give_back(indices)

    def _end_session(self, session: TrainSession) -> None:
        session.end_watch()
        self._mine.pop(session.session_id, None)
        if self._sessions.get(session.session_id) is session:
            del self._sessions[session.session_id]

    # Gangs and deployments of the job's driver (control.inside.JobBudget) -------------
    @property
    def bundles(self) -> tuple[Resources, ...]:
        return self.budget.bundles

    def never_fits(self, wanted: Sequence[Resources]) -> str | None:
        return never_fits(self.budget.bundles, wanted)

    def take(self, gang_id: str, wanted: Sequence[Resources]) -> list[str] | None:
        chosen = None if self.budget.closing else self.budget.take(wanted)
        if chosen is None:
            return None
        self._inside[gang_id] = chosen
        return [self.budget.nodes[i] for i in chosen]

    def give_back(self, gang_id: str) -> None:
        self.budget.give_back(self._inside.pop(gang_id, []))

    def in_use(self) -> int:
        return len(self.budget.claimed)

    def restore(self, gang_id: str, nodes: Sequence[str],
                bundles: Sequence[Resources]) -> None:
        """An adopted job's budget counts every bundle without a hold as claimed; these
        are the ones `gang_id` runs on (by node and shape), given back when it ends."""
        mine = {i for indices in self._inside.values() for i in indices}
        chosen: list[int] = []
        for node, bundle in zip(nodes, bundles):
            index = next((i for i in sorted(self.budget.claimed)
                          if i not in mine and self.budget.nodes[i] == node
                          and bundle.fits_in(self.budget.bundles[i])), None)
            if index is not None:
                mine.add(index)
                chosen.append(index)
        self._inside[gang_id] = chosen

    # GangRun --------------------------------------------------------------------------
    def lost_members(self) -> list[str]:
        """Its one member is Ray's job supervisor, which Ray's job manager starts and watches: none to tell."""
        return []

    async def reserve(self) -> None:
        await self.budget.hold()

    async def start_members(self) -> None:
        """Submit the entrypoint once no earlier attempt runs in Ray; return once Ray runs
        it (or it already ended)."""
        deadline = time.monotonic() + self.spec.startup_timeout_s
        await self._earlier_attempts_ended(deadline)
        while True:
            self._submission = asyncio.ensure_future(self._submit(**self._request()))
            # Not cancelled with the start, nor when it times out: Ray may still accept it.
            await asyncio.wait([self._submission],
                               timeout=max(0.0, deadline - time.monotonic()))
            if not self._submission.done():
                self._abandoned = True  # if Ray accepts it after all, it stops it again
                raise MemberFailure(GangError(
                    error_type="StartupTimeout",
                    message=f"Ray's Job Submission API did not accept job {self.job_id} "
                            f"within {self.spec.startup_timeout_s:g}s"))
            try:
                self._submission.result()
                break
            except Exception as error:
                # The dashboard's job agent answers "No available agent ... try again
                # later" for a while after the cluster starts: retry that, not the rest.
                if not transient(error) or time.monotonic() > deadline:
                    raise MemberFailure(GangError(error_type="JobSubmissionFailed",
                                                  message=f"{type(error).__name__}: {error}"))
                await asyncio.sleep(POLL_S)
        self._started(self.job_id)
        while (status := await self._status()) in (None, "PENDING"):
            if time.monotonic() > deadline:
                raise MemberFailure(GangError(
                    error_type="StartupTimeout",
                    message=f"Ray did not start job {self.job_id} within "
                            f"{self.spec.startup_timeout_s:g}s ({status or 'unknown'})"))
            await asyncio.sleep(POLL_S / 4)

    def _request(self) -> dict[str, Any]:
        """The arguments of Ray's submit_job for this attempt."""
        job = self.job
        runtime_env = dict(job.runtime_env or {})
        if job.working_dir:
            runtime_env["working_dir"] = job.working_dir
        runtime_env["env_vars"] = {
            **(runtime_env.get("env_vars") or {}), **job.env_vars,
            "RAYGANG_JOB_ID": self.gang_id,
            "RAYGANG_ATTEMPT": str(self.attempt),
            "RAY_TRAIN_CALLBACKS": TRAIN_CALLBACK,
            # Ray's SIGKILL comes after `process_group` killed what the grace left.
            "RAY_JOB_STOP_WAIT_TIME_S": str(math.ceil(job.preemption_grace_s) + STOP_MARGIN_S),
        }
        if gcs_address := self.client.gcs_address():
            # The job's actors look their cluster up by RAY_ADDRESS too: Train's
            # PlacementGroupCleaner asks the state API whether its controller lives, and
            # without it that API picks the newest Ray cluster on the machine; on another
            # cluster the controller is "gone" and the cleaner removes the run's group.
            runtime_env["env_vars"]["RAY_ADDRESS"] = gcs_address
        return dict(
            entrypoint=driver_command(job.entrypoint, gcs_address, job.preemption_grace_s),
            submission_id=self.job_id,
            runtime_env=runtime_env,
            metadata={**job.metadata, "raygang_gang_id": self.gang_id},
            # The driver takes none of the job's capacity (its Train run does), and runs
            # on the node of the job's first bundle, not on the head: Ray puts drivers
            # given no resources on the head, where hundreds of them exhaust its memory
            # (ray#41241).
            entrypoint_num_cpus=0,
            entrypoint_label_selector=node_selector(self.budget.nodes[:1]))

    async def _submit(self, **request: Any) -> None:
        try:
            await asyncio.to_thread(self.client.submit, **request)
        except RuntimeError as error:
            # Ray has a job of this id, which names this attempt: a retry of a submission
            # Ray accepted though its answer failed (the dashboard's head timed out on its
            # agent), or one a previous scheduler process made.
            if "already exists" not in str(error):
                raise
        self._submitted = True
        if self._abandoned:
            await stop_until_ended(self.client, self.job_id, time.monotonic() + self._stop_wait_s())

    async def _earlier_attempts_ended(self, deadline: float) -> None:
        """No two attempts of a job run at once: an earlier one a stop gave up waiting for,
        or one a previous scheduler process left, is stopped and ended first."""
        for attempt in range(self.attempt):
            job_id = ray_job_id(self.gang_id, attempt)
            status = await stop_until_ended(self.client, job_id, deadline)
            if status not in TERMINAL | {None}:
                raise MemberFailure(GangError(
                    error_type="StartupTimeout",
                    message=f"Ray job {job_id}, an earlier attempt, was still {status} "
                            f"{self.spec.startup_timeout_s:g}s after it was stopped"))

    async def _in_ray(self) -> bool:
        """Whether Ray has this attempt's job. A submission under way is let finish first:
        Ray may accept it although the start was cancelled."""
        submission = self._submission
        if submission is not None and not submission.done():
            if not self._abandoned:  # the start gave up on it already: no second wait
                await asyncio.wait([submission], timeout=self.spec.startup_timeout_s)
            if not submission.done():
                self._abandoned = True
                log.warning("submitting %s took over %gs: it is stopped if Ray accepts it",
                            self.job_id, self.spec.startup_timeout_s)
                return False
        if submission is not None and not self._submitted:
            if not submission.cancelled():
                submission.exception()  # retrieved: the start reported it
            # It failed, perhaps after Ray accepted it (its answer was lost).
            self._submitted = (await self._status()) is not None
        return self._submitted

    def _stop_wait_s(self) -> float:
        """How long a stop waits for Ray to end the job: a driver still setting up its
        runtime env stops only once that is done (the startup timeout), then SIGTERM,
        the grace period and SIGKILL."""
        return self.spec.startup_timeout_s + self.job.preemption_grace_s + 15

    async def _status(self) -> str | None:
        """Ray's word on this attempt's job (None: it has none). A GCS that does not
        answer is no word: asked again until it does, never a job that ended (a Train run
        in a job was restarted at each GCS kill before: bench/head_faults.py), for as long
        as Ray's own processes wait for it (`gcs_reconnect_s`; a fixed 60 s ended a job
        whose scheduler ran where Ray waits longer); then the error is raised."""
        since: float | None = None
        while True:
            try:
                return await self.client.status(self.job_id)
            except GCS_DOWN:
                since = time.monotonic() if since is None else since
                if time.monotonic() - since >= gcs_reconnect_s():
                    raise
                log.debug("no status of %s: the GCS does not answer", self.job_id)
                await asyncio.sleep(POLL_S)

    async def run(self) -> list[Any]:
        """Until the entrypoint ends: SUCCEEDED returns, anything else fails the gang."""
        while True:
            status = await self._status()
            if status == "SUCCEEDED":
                return []
            if status in ("FAILED", "STOPPED") or status is None:
                why = await asyncio.to_thread(self._why, status)
                raise MemberFailure(GangError(member="driver", rank=0,
                                              error_type=f"Job{(status or 'lost').title()}",
                                              message=why))
            for session in list(self._mine.values()):  # a Train run's group being placed
                session.watch_workers()
            await asyncio.sleep(POLL_S)

    def _why(self, status: str | None) -> str:
        if status is None:
            return f"Ray job {self.job_id} is gone"
        if status == "STOPPED":
            return f"Ray job {self.job_id} was stopped" + (
                "" if self._stopping else " outside raygang")
        message = self.client.message(self.job_id)
        tail = self.client.logs(self.job_id)[-LOG_TAIL_CHARS:].strip()
        return f"{message}\n{tail}".strip()

    async def resume(self) -> list[Any]:
        return await self.run()

    def _running(self) -> list[TrainSession]:
        return [s for s in self._mine.values() if s.adopted.is_set()
                and not s.released.is_set()]

    async def signal_preempt(self, grace_s: float,
                             members: Sequence[Any] | None = None) -> list[dict]:
        """Train runs inside the job: through Train's preemption path. A job without
        one: SIGTERM now, and Ray's hard stop after the grace period."""
        running = self._running()
        for session in running:
            session.preempt(grace_s)
        if not running:
            await self._stop()
        return [{"member": "driver", "rank": 0, "hooks": 0, "error": None, "running": True}]

    async def wait_bodies(self, ranks: Sequence[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        await self._sessions_released(timeout)
        await self._stop()
        await self._ended(max(0.0, deadline - time.monotonic()))

    async def _sessions_released(self, timeout: float) -> None:
        """Until Train has torn down the worker group of every run inside (or timeout)."""
        deadline = time.monotonic() + timeout
        for session in list(self._mine.values()):
            await session.wait_released(max(0.0, deadline - time.monotonic()))

    async def _stop(self) -> None:
        """Ask Ray to stop the job, once (`_ended` asks again if Ray did not take it)."""
        self._stopping = True
        self.budget.closing = True
        if not self._stop_taken and await self._in_ray() \
                and (await self._status()) not in TERMINAL:
            self._stop_taken = await asyncio.to_thread(self.client.stop, self.job_id)

    async def _ended(self, timeout: float) -> None:
        """Until Ray says the stopped job ended (or `timeout`)."""
        if self._submitted:
            await stop_until_ended(self.client, self.job_id, time.monotonic() + timeout,
                                   self._stop_taken)

    async def close(self) -> None:
        """Stop the job (Train runs inside through Train's path, then SIGTERM, then Ray's
        SIGKILL after the grace), wait until Ray says it ended, and leave no group behind:
        Train's inside it, the holds. Runs to the end even if cancelled meanwhile (the
        driver's halt cancels the drive every second)."""
        await run_to_completion(self._close())

    async def _close(self) -> None:
        try:
            if self._submitted and not self._stopping and (running := self._running()):
                # Stopped, not preempted (a preemption told them already): Train runs
                # inside still stop through Train's path first, so they checkpoint.
                grace = self.job.preemption_grace_s
                for session in running:
                    session.preempt(grace)
                await self._sessions_released(grace)
            await self._stop()
            await self._ended(self._stop_wait_s())
            for session in list(self._mine.values()):
                session.end_watch()
                await session.close()
                self._end_session(session)
        except Exception:
            log.exception("stopping job %s failed", self.job_id)
        finally:
            await self.budget.close()
            self.on_close()
