"""`raygang.tune(tuner, queue=..., priority=...)`: a Ray Tune sweep whose trials are raygang
gangs.

Why a function around `tuner.fit()`, not a `TuneConfig`/`RunConfig` option: Tune decides
where a trial runs in its `ResourceManager` (`ray.air.execution.resources`), which
`TuneController` takes as `resource_manager_factory` but which neither `Tuner`,
`TuneConfig`, `RunConfig` nor `tune.run` lets a user pass (`TuneConfig` is a closed
dataclass; a Tune `Callback` sees trials, never the controller's resources). So
`raygang.tune` runs `tuner.fit()` with raygang's resource manager in that place
(`ray_private.tune_resource_manager`, for this thread only: two Tuners in two threads may
use two queues) and returns its `ResultGrid`. Nothing else of the Tuner changes.

What the manager does (`RaygangTuneResources`, Tune's calls in order):
- `request_resources`: each trial's `PlacementGroupFactory` (a `ResourceRequest`) is queued
  in raygang as one hand-off gang (kind "tune": the same exchange as `RaygangTrain`'s,
  `runtime/handoff/train.py`): one role per run of equal bundles, Tune's strategy. Tune asks
  for every pending trial at once (`TUNE_MAX_PENDING_TRIALS_PG`), so the whole sweep waits
  in raygang's queue, and raygang's queue (priority, quota, limit, fair share, preemption),
  not `max_concurrent_trials`, says how many trials run;
- a claim (a long poll, one `ObjectRef` per waiting trial, which Tune's event loop awaits
  through `get_resource_futures`) returns the reserved nodes once raygang admitted the
  gang; the manager then makes the trial's placement group with each bundle pinned to its
  node, and once it is ready reports it (`train_adopt`): raygang books it. Tune sees it
  "ready", acquires it and starts the trial's actors in it;
- `free_resources` (a trial finished, failed, or was stopped early by a Tune scheduler):
  the group is removed at once, and raygang is told the gang ended (its capacity is free
  for the next trial in the same cycle). `cancel_resource_request`: the gang is cancelled
  (waiting in the queue, or reserved but not yet taken). `clear` does both for all.

Preemption (a more urgent gang needs a trial's GPUs) goes through Tune's own pause, as
Train's does through Train's: each placed trial's gang is watched (`train_wait_preempt`, a
long poll per trial); when raygang preempts it, the manager asks Tune, in Tune's loop
(`on_tune_step`, called by the controller at each step's start), to pause the trial
(`TuneController.pause_trial`: with a checkpoint if it has reported, saved at its next
report; once its actor runs: a trial paused while its actor starts is never asked for
again). Its group is then removed and raygang told it was released as asked, not finished:
the gang goes back to the queue as PREEMPTED, keeps its place, and is claimed again. Tune
resumes the paused trial from its checkpoint once it asks for resources for it again
(FIFOScheduler: after every pending trial has started), and gets the preempted gang back:
from the notice on, the manager keeps one "credit" per pausing trial, which Tune's next
request of that shape takes instead of opening a gang (gangs are fungible between trials
of equal requests, as Tune's own placement groups are). Credits beyond the trials paused or
pausing (a trial that ended before it could pause) cancel a waiting gang at the next step.
A preempted trial not yet taken by Tune is simply handed back and claimed again.

A Train V2 trainable's worker group is a gang of its own, in the sweep's queue at its
priority, with no change to the trainable: each trial's actor is started with
`RAY_TRAIN_CALLBACKS` naming raygang's Train callback, and `RAYGANG_QUEUE` and
`RAYGANG_PRIORITY` set to the sweep's (`TrialResources`; Ray merges these env vars into the
job's runtime env), so a trainer's `fit()` inside the trial queues its worker group as
`raygang.train` would. A trainable that calls `raygang.train` itself (another queue, say)
keeps its own: the callback from the env var then stands down. Not yet: the trial and its
worker group as one gang (see TUNE-NOTES.md).
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.air.execution.resources.placement_group import PlacementGroupAcquiredResources
from ray.air.execution.resources.request import ResourceRequest
from ray.air.execution.resources.resource_manager import ResourceManager
from ray.exceptions import RayActorError
from ray.util.placement_group import (
    PlacementGroup,
    placement_group,
    remove_placement_group,
)

from raygang.control.api import SchedulerAPI, TrainAPI
from raygang.core.spec import GangSpec, RoleSpec, Strategy
from raygang.runtime.client.connection import SchedulerClient
from raygang.runtime.names import NODE_ID_LABEL, TRAIN_CALLBACK
from raygang.runtime.ray_private import (
    JOB_REQUESTER,
    tune_resource_manager,
    tune_trial_in_group,
)

log = logging.getLogger(__name__)
CLAIM_POLL_S = 2.0  # one long poll of the scheduler per waiting trial
TRIAL_RESTARTS = 1_000_000  # Tune's FailureConfig, not raygang, decides when a trial failed


def tune(tuner: Any, queue: str | None = None, priority: int | str | None = None,
         name: str | None = None) -> Any:
    """Run `tuner.fit()` with every trial queued in raygang as a gang (queue `queue`,
    priority class or number `priority`, gangs named `name`-N), and return its
    `ResultGrid`. Trials start as raygang admits them; leave
    `TuneConfig.max_concurrent_trials` unset (raygang's queue limits the sweep)."""
    label = name or _gang_name(getattr(getattr(tuner, "_local_tuner", None), "_run_config",
                                       None))
    # Tune's registry of trainables is not safe for two threads that register at once (a
    # dict changes while another thread flushes it: ray.tune.registry). Two sweeps started
    # together in one process (two threads, two queues) take turns until each has
    # registered, which is done once Tune asks for its resource manager.
    starting = True
    _STARTING.acquire()

    def manager() -> RaygangTuneResources:
        nonlocal starting
        if starting:
            starting = False
            _STARTING.release()
        return RaygangTuneResources(queue, priority, label)

    try:
        with tune_resource_manager(manager):
            return tuner.fit()
    finally:
        if starting:
            _STARTING.release()


_STARTING = threading.Lock()


@dataclass(eq=False)
class _Trial:
    """One resource request's gang, from queued to freed."""

    request: ResourceRequest
    session: str
    claim: ray.ObjectRef | None = None  # the claim in flight
    group: PlacementGroup | None = None
    ready: ray.ObjectRef | None = None  # the group's `ready()` until it is placed
    nodes: list[str] = field(default_factory=list)
    watch: ray.ObjectRef | None = None  # the preemption watch in flight (once placed)
    preempted: bool = False  # raygang preempted its gang: Tune pauses the trial
    requeued: bool = False  # preempted before: its gang waits in the queue again


class RaygangTuneResources(ResourceManager):
    """Tune's resource manager under raygang (see the module's doc)."""

    def __init__(self, queue: str | None = None, priority: int | str | None = None,
                 name: str = "tune", client: SchedulerClient | None = None):
        self.queue = queue or "default"
        self.priority = priority if priority is not None else "training"
        self.name = name
        self._client = client or SchedulerClient(start_if_missing=True, restart_wait_s=60.0)
        # The trials' requester: once this driver is dead (killed, its job stopped), raygang
        # cancels its trials still waiting in the queue, and fails those admitted for it
        self._driver = JOB_REQUESTER + ray.get_runtime_context().get_job_id()
        self._waiting: dict[ResourceRequest, list[_Trial]] = defaultdict(list)
        self._ready: dict[ResourceRequest, list[_Trial]] = defaultdict(list)
        self._acquired: dict[PlacementGroup, _Trial] = {}
        self._futures: dict[ray.ObjectRef, tuple[_Trial, str]] = {}  # -> claim/ready/watch
        self._count = 0
        # Per request: gangs kept for a request Tune will make again (a preempted trial's,
        # for when Tune resumes it), so that it does not open another
        self._credits: dict[ResourceRequest, int] = defaultdict(int)
        self._to_pause: list[_Trial] = []  # preempted while Tune runs them
        self._trial_env = trial_env(self.queue, self.priority)

    # Tune's calls --------------------------------------------------------------------
    def request_resources(self, resource_request: ResourceRequest) -> None:
        if self._credits[resource_request] > 0:  # a preempted trial's gang, queued again
            self._credits[resource_request] -= 1
            return
        self._count += 1
        spec = trial_gang_spec(resource_request, f"{self.name}-{self._count}", self.queue,
                               self.priority)
        session = self._client.call(TrainAPI.train_open, spec, None, self._driver,
                                    uuid.uuid4().hex, "tune")
        trial = _Trial(resource_request, session)
        self._waiting[resource_request].append(trial)
        self._ask(trial)

    def cancel_resource_request(self, resource_request: ResourceRequest) -> None:
        # A trial not yet placed goes first (as Tune's own manager does).
        pool = self._waiting[resource_request] or self._ready[resource_request]
        if not pool:
            raise RuntimeError(f"no resource request to cancel: {resource_request}")
        self._end(pool.pop(), cancel=True)

    def has_resources_ready(self, resource_request: ResourceRequest) -> bool:
        if not self._ready[resource_request]:
            self.update_state()
        return bool(self._ready[resource_request])

    def acquire_resources(self, resource_request: ResourceRequest
                          ) -> PlacementGroupAcquiredResources | None:
        if not self.has_resources_ready(resource_request):
            return None
        trial = self._ready[resource_request].pop(0)
        assert trial.group is not None
        self._acquired[trial.group] = trial
        return TrialResources(placement_group=trial.group, resource_request=resource_request,
                              env_vars=self._trial_env)

    def free_resources(self, acquired_resource: Any) -> None:
        trial = self._acquired.pop(acquired_resource.placement_group)
        if trial.preempted:  # Tune paused it as asked: its gang waits in the queue again
            self._hand_back(trial)
        else:
            self._end(trial, cancel=False)

    def get_resource_futures(self) -> list[ray.ObjectRef]:
        return list(self._futures)

    def update_state(self) -> None:
        if not self._futures:
            return
        done, _ = ray.wait(list(self._futures), num_returns=len(self._futures), timeout=0)
        for ref in done:
            trial, what = self._futures.pop(ref)
            if what == "claim":
                trial.claim = None
                self._claimed(trial, ref)
            elif what == "ready":
                trial.ready = None
                self._placed(trial)
            else:
                trial.watch = None
                self._watched(trial, ref)

    def on_tune_step(self, controller: Any) -> None:
        """Called by Tune's controller at the start of each step (`ray_private`'s hook):
        pause the trials whose gangs raygang preempted; cancel the gangs kept for trials
        Tune will not resume."""
        later = []
        for trial in self._to_pause:
            running = None if trial.group is None else tune_trial_in_group(controller,
                                                                           trial.group)
            if running is None:
                continue  # freed meanwhile
            if running.status != "RUNNING":
                # Its actor is still starting: Tune pauses a trial only once it runs (one
                # paused while it starts stays staged, and Tune never asks for it again)
                later.append(trial)
                continue
            # A trial that has reported nothing has nothing to save (Tune's save of a
            # function trainable fails then): it stops, and starts again from its last
            # checkpoint, if any
            saves = running.has_reported_at_least_once
            log.info("raygang: trial %s preempted (gang %s): Tune pauses it%s", running,
                     trial.session, " with a checkpoint" if saves else "")
            controller.pause_trial(running, should_checkpoint=saves)
        self._to_pause = later
        for request, credits in list(self._credits.items()):
            paused = sum(1 for t in controller.get_trials()
                         if t.status == "PAUSED" and t.placement_group_factory == request)
            pausing = sum(1 for t in self._acquired.values()
                          if t.preempted and t.request == request)
            while credits > paused + pausing and self._waiting[request]:
                # Tune may ask for the paused trial before it frees the preempted group:
                # the gang then opened for it goes, not the preempted one (which keeps its
                # place in the queue)
                pool = self._waiting[request]
                fresh = [t for t in pool if not t.requeued]
                extra = fresh[-1] if fresh else pool[-1]
                pool.remove(extra)
                credits -= 1
                self._end(extra, cancel=True)
            self._credits[request] = credits

    def clear(self) -> None:
        if not ray.is_initialized():
            return
        trials = [t for pool in (*self._waiting.values(), *self._ready.values()) for t in pool]
        for trial in trials + list(self._acquired.values()):
            self._end(trial, cancel=True)
        self._waiting.clear()
        self._ready.clear()
        self._acquired.clear()
        self._futures.clear()
        self._credits.clear()
        self._to_pause.clear()

    def __del__(self) -> None:
        try:
            self.clear()
        except Exception:
            log.debug("raygang: clearing Tune's resources at exit failed", exc_info=True)

    # The exchange with raygang ------------------------------------------------------
    def _ask(self, trial: _Trial) -> None:
        trial.claim = self._client.remote(TrainAPI.train_claim, trial.session, CLAIM_POLL_S)
        self._futures[trial.claim] = (trial, "claim")

    def _scheduler_back(self) -> None:
        """The scheduler actor died while a long poll waited: wait (up to the client's
        `restart_wait_s`) for the restarted one, which recovered every gang; the poll is
        then asked again (SchedulerUnavailable past that: the sweep cannot go on)."""
        self._client.forget()
        self._client.call(SchedulerAPI.ping)

    def _claimed(self, trial: _Trial, ref: ray.ObjectRef) -> None:
        try:
            nodes = ray.get(ref)
        except RayActorError:  # the scheduler restarts: its gang is still queued there
            self._scheduler_back()
            self._ask(trial)
            return
        except Exception as error:  # noqa: BLE001 - the gang ended in raygang
            log.warning("raygang: trial gang %s ended while it waited: %s; queued again",
                        trial.session, error)
            self._requeue(trial)
            return
        if not nodes:
            self._ask(trial)  # not admitted yet: ask again
            return
        trial.nodes = list(nodes)
        trial.group = placement_group(
            trial.request.bundles, strategy=trial.request.strategy,
            bundle_label_selector=[{NODE_ID_LABEL: node} for node in nodes])
        trial.ready = trial.group.ready()
        self._futures[trial.ready] = (trial, "ready")

    def _placed(self, trial: _Trial) -> None:
        assert trial.group is not None
        try:
            self._client.call(TrainAPI.train_adopt, trial.session, trial.group.id.hex())
        except Exception as error:  # noqa: BLE001 - the hand-off failed: queue again
            log.warning("raygang: trial gang %s: hand-off failed: %s", trial.session, error)
            self._requeue(trial)
            return
        self._waiting[trial.request].remove(trial)
        self._ready[trial.request].append(trial)
        self._watch(trial)

    def _watch(self, trial: _Trial) -> None:
        trial.watch = self._client.remote(TrainAPI.train_wait_preempt, trial.session,
                                          CLAIM_POLL_S)
        self._futures[trial.watch] = (trial, "watch")

    def _watched(self, trial: _Trial, ref: ray.ObjectRef) -> None:
        if trial.group is None or trial.preempted:
            return  # freed meanwhile, or already told
        try:
            told = ray.get(ref)
        except RayActorError:  # the scheduler restarts (and adopts the trial's group)
            self._scheduler_back()
            told = None
        if told is None:
            self._watch(trial)
        elif "deadline_ms" in told:
            trial.preempted = True
            if trial in self._ready[trial.request]:  # placed, not yet taken by Tune
                self._ready[trial.request].remove(trial)
                self._hand_back(trial)
            else:  # Tune pauses it, and asks for it again later: its gang will be there
                self._credits[trial.request] += 1
                self._to_pause.append(trial)
        # else the gang ended (cancelled in raygang): Tune sees its actor fail

    def _hand_back(self, trial: _Trial) -> None:
        """A preempted trial's group goes, and its gang, requeued by raygang, is claimed
        again for the same request."""
        assert trial.group is not None
        if trial.watch is not None:
            self._futures.pop(trial.watch, None)
            trial.watch = None
        remove_placement_group(trial.group)
        trial.group, trial.nodes, trial.preempted, trial.requeued = None, [], False, True
        self._call(TrainAPI.train_released, trial.session, False)
        self._waiting[trial.request].append(trial)
        self._ask(trial)

    def _requeue(self, trial: _Trial) -> None:
        """The gang ended without handing its nodes over: a new one takes its place."""
        self._waiting[trial.request].remove(trial)
        self._end(trial, cancel=True)
        self.request_resources(trial.request)

    def _end(self, trial: _Trial, cancel: bool) -> None:
        """Remove the trial's group (if any) and end its gang: at once, so that the next
        trial may have its capacity."""
        for ref in (trial.claim, trial.ready, trial.watch):
            if ref is not None:
                self._futures.pop(ref, None)
        if trial.group is not None:
            remove_placement_group(trial.group)
            trial.group = None
            self._call(TrainAPI.train_released, trial.session, True)
        if cancel:
            self._call(SchedulerAPI.cancel, trial.session, "Ray Tune no longer needs it")
        else:
            self._call(TrainAPI.train_finished, trial.session, None)

    def _call(self, method: Any, *args: Any) -> None:
        try:
            self._client.call(method, *args)
        except Exception as error:  # noqa: BLE001 - already ended there: nothing to undo
            log.debug("raygang: %s%s: %s", method.__name__, args, error)


def trial_env(queue: str, priority: int | str) -> dict[str, str]:
    """What a trial's actor is started with: a Train V2 run inside it is queued in the
    sweep's queue at its priority (callbacks the driver's env already names are kept)."""
    named = [c.strip() for c in os.environ.get("RAY_TRAIN_CALLBACKS", "").split(",")
             if c.strip()]
    if TRAIN_CALLBACK not in named:
        named.append(TRAIN_CALLBACK)
    return {"RAY_TRAIN_CALLBACKS": ",".join(named), "RAYGANG_QUEUE": queue,
            "RAYGANG_PRIORITY": str(priority)}


@dataclass
class TrialResources(PlacementGroupAcquiredResources):
    """A trial's placed group, as Tune's own, whose actors also get `env_vars`."""

    env_vars: dict[str, str] = field(default_factory=dict)

    def _annotate_remote_entity(self, entity: Any, bundle: dict, bundle_index: int) -> Any:
        return super()._annotate_remote_entity(_WithEnv(entity, self.env_vars), bundle,
                                               bundle_index)


@dataclass
class _WithEnv:
    """A remote class whose `options` also set env vars (merged into the job's)."""

    entity: Any
    env_vars: dict[str, str]

    def options(self, **options: Any) -> Any:
        return self.entity.options(**options, runtime_env={"env_vars": self.env_vars})


def trial_gang_spec(request: ResourceRequest, name: str, queue: str,
                    priority: int | str) -> GangSpec:
    """A trial's gang: one role per run of equal bundles, in Tune's bundle order (the
    nodes a claim returns are in that order)."""
    roles: list[RoleSpec] = []
    runs: list[tuple[dict[str, float], int]] = []
    for bundle in request.bundles:
        if runs and runs[-1][0] == bundle:
            runs[-1] = (bundle, runs[-1][1] + 1)
        else:
            runs.append((bundle, 1))
    for i, (bundle, count) in enumerate(runs):
        roles.append(RoleSpec(name=f"bundle{i}", replicas=count, resources=bundle))
    return GangSpec(name=name, queue=queue, priority=priority, roles=tuple(roles),
                    strategy=Strategy(request.strategy), max_restarts=TRIAL_RESTARTS)


def _gang_name(run_config: Any) -> str:
    cleaned = "".join(c if c.isalnum() or c in "_.-" else "-"
                      for c in (getattr(run_config, "name", None) or "tune"))
    return cleaned.strip("-_.")[:32] or "tune"

