"""`RaygangTrain`: the Ray Train V2 callback that makes a Train run a raygang gang.

Pass it in `RunConfig(callbacks=[RaygangTrain(queue=..., priority=...)])`, or set
`RAY_TRAIN_CALLBACKS=raygang.RaygangTrain` (raygang does this for the jobs it starts and
for the trials of `raygang.tune`; the queue and priority then come from `RAYGANG_QUEUE`
and `RAYGANG_PRIORITY`) to use it with no change to the script. Where both are set, the
one in the run's config decides and the other stands down. It runs in Train's controller:

- before every worker group starts (`on_controller_start_worker_group`) it waits until
  raygang admits the group (queue, priority, quota, preemption) and reserves its bundles,
  claims their nodes and returns a node-id label selector: Train's worker group placement
  group is placed there. Inside a raygang job (`RAYGANG_JOB_ID`), the group is placed
  inside the job's budget instead of queueing again;
- once the group has started (`after_worker_group_start`) it reports Train's placement
  group, which raygang checks against the nodes it handed over and adopts; a thread then
  waits for raygang's preemption, and passes it on through Train's own preemption path:
  every worker is marked preempted with a deadline (`ray.train.get_preemption_info()`),
  Train lets them checkpoint and restarts the run, which queues again here;
- when the group shuts down or the run ends, it tells raygang.

The wait for admission blocks the controller's loop (the hook is synchronous in Ray 2.60);
it asks the scheduler in rounds of CLAIM_POLL_S, so a cancelled gang ends the wait.

An elastic run (`num_workers=(min, max)`) is an elastic gang (`resize: restart`): raygang,
not Train, decides its size. The callback puts `RaygangScalingPolicy` in place of Train's
elastic scaling policy (which sizes a group to what Ray's AutoscalingCoordinator reserved,
with no queue, priority or quota): each worker group is the size raygang claimed for it,
and a running group is never resized by Train. raygang grows or shrinks the run through
Train's preemption path (the grace period, a checkpoint; with
`FailureConfig(max_preemption_failures=-1)`, Train's default, a resize never ends the run),
and Train restarts at the new size from that checkpoint. If the policy cannot be put in
place (a Ray other than the one pinned), the run is admitted rigidly at its maximum.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from typing import Any

import ray

from raygang.control.api import TrainAPI
from raygang.core.spec import GangSpec, Resize, RoleSpec
from raygang.runtime.client.connection import SchedulerClient
from raygang.runtime.names import NODE_ID_LABEL, node_selector
from raygang.runtime.ray_private import (
    ControllerCallback,
    NoopDecision,
    ResizeDecision,
    ScalingDecision,
    ScalingPolicy,
    WorkerGroupCallback,
    train_controller,
    train_replace_scaling_policy,
    train_stop_worker_group,
)

log = logging.getLogger(__name__)
CLAIM_POLL_S = 10.0
WATCH_POLL_S = 30.0
TRAIN_RESTARTS = 1_000_000


class RaygangTrain(ControllerCallback, WorkerGroupCallback):
    """Queue a Ray Train V2 run in raygang (see the module's doc)."""

    def __init__(self, queue: str | None = None, priority: int | str | None = None,
                 name: str | None = None, preemption_grace_s: float | None = None,
                 parent: str | None = None, key: str | None = None):
        self.queue = queue or os.environ.get("RAYGANG_QUEUE") or "default"
        self.priority = priority if priority is not None else (
            os.environ.get("RAYGANG_PRIORITY") or "training")
        self.name = name
        self.preemption_grace_s = preemption_grace_s
        # Made in the driver (RAYGANG_JOB_ID is the raygang job's), sent to the controller.
        self.parent = parent or os.environ.get("RAYGANG_JOB_ID") or None
        self.key = key or uuid.uuid4().hex  # which instance this is, once sent (see _inert)
        self._inert = False
        self.session: str | None = None
        self._client: SchedulerClient | None = None
        self._watcher: threading.Thread | None = None
        self._stop_watch = threading.Event()
        self._finishing = False  # Train is shutting down for good (not restarting)
        self._policy: RaygangScalingPolicy | None = None  # an elastic run's, once in place
        self.next_nodes: list[str] | None = None  # the policy claimed the next group's nodes
        self._placing: list[str] | None = None  # the next group's node per bundle

    def __reduce__(self):  # sent to the controller: no client, thread or session
        return (type(self), (self.queue, self.priority, self.name, self.preemption_grace_s,
                               self.parent, self.key))

    @property
    def client(self) -> SchedulerClient:
        if self._client is None:
            self._client = SchedulerClient()
        return self._client

    # ControllerCallback -----------------------------------------------------------
    def after_controller_start(self, train_run_context: Any) -> None:
        given = [c for c in (train_run_context.run_config.callbacks or [])
                 if isinstance(c, RaygangTrain)]
        if given and all(c.key != self.key for c in given):
            # Made from RAY_TRAIN_CALLBACKS (set for a raygang job's driver, a raygang
            # sweep's trials) while the run's config names one of its own (`raygang.train`,
            # `RunConfig(callbacks=[RaygangTrain(...)])`): that one queues the run, with its
            # queue and priority; two would queue every worker group twice
            self._inert = True
            return
        if self.name is None:
            self.name = _gang_name(getattr(train_run_context.run_config, "name", None))
        if train_run_context.scaling_config.elasticity_enabled and self.parent is None:
            self._policy = RaygangScalingPolicy.put_in_place(self)

    def on_controller_start_worker_group(self, *, scaling_config: Any,
                                         num_workers: int) -> dict[str, str] | None:
        if self._inert:
            return None
        nodes, self.next_nodes = self.next_nodes, None  # the scaling policy claimed them
        while not nodes:
            nodes = self.claim(scaling_config, num_workers)
        self._placing = sorted(nodes)
        return node_selector(nodes)

    def claim(self, scaling_config: Any, num_workers: int) -> list[str] | None:
        """Queue the run (the first time), then wait one round for the nodes of its next
        worker group: None if raygang has not reserved them yet."""
        if self.session is None:
            spec = self.gang_spec(scaling_config, num_workers)
            controller = ray.get_runtime_context().get_actor_id()
            self.session = self.client.call(TrainAPI.train_open, spec, self.parent, controller,
                                            uuid.uuid4().hex)
            log.info("raygang: Train run queued as %s", self.session)
        nodes = self.client.call(TrainAPI.train_claim, self.session, CLAIM_POLL_S)
        if nodes:
            log.info("raygang: Train run %s placed on %s", self.session, sorted(set(nodes)))
        return nodes or None

    def after_controller_state_update(self, previous_state: Any, current_state: Any) -> None:
        # The last worker group shuts down in ShuttingDownState; a restart goes through
        # RestartingState/ReschedulingState and asks for a group again.
        self._finishing = type(current_state).__name__ == "ShuttingDownState"

    def after_controller_finish(self, result: Any) -> None:
        self._end_watch()
        if self.session is not None:
            error = getattr(result, "error", None)
            self.client.call(TrainAPI.train_finished, self.session,
                             None if error is None else f"{type(error).__name__}: {error}")

    def before_controller_abort(self) -> None:
        self._end_watch()
        if self.session is not None:
            self.client.call(TrainAPI.train_finished, self.session, "the Train run was aborted")

    # WorkerGroupCallback ----------------------------------------------------------
    def before_worker_group_start(self, worker_group_context: Any) -> None:
        """Pin each bundle of Train's group to its node. The selector returned above is
        one set of nodes for every worker (Train copies it per worker), so PACK could put
        more workers on one of them than raygang reserved there, and the group would be
        refused; Train's per-bundle selectors, made just before its placement group, can
        say which node each bundle goes to."""
        nodes, self._placing = self._placing, None
        selectors = worker_group_context.label_selector
        if nodes and selectors is not None and len(selectors) == len(nodes):
            selectors[:] = [{NODE_ID_LABEL: node} for node in nodes]

    def after_worker_group_start(self, worker_group: Any) -> None:
        if self.session is None:
            return
        state = worker_group.get_worker_group_state()
        pg_id = state.placement_group_handle.placement_group.id.hex()
        self.client.call(TrainAPI.train_adopt, self.session, pg_id)
        workers = {w.distributed_context.world_rank: w for w in worker_group.get_workers()}
        self._start_watch(workers)

    def after_worker_group_shutdown(self, worker_group_context: Any) -> None:
        self._released()

    def after_worker_group_abort(self, worker_group_context: Any) -> None:
        self._released()

    def _released(self) -> None:
        self._end_watch()
        if self.session is not None:
            self.client.call(TrainAPI.train_released, self.session, self._finishing)

    # Preemption, through Train's own path -------------------------------------------
    def _start_watch(self, workers: dict[int, Any]) -> None:
        self._end_watch()
        self._stop_watch = threading.Event()
        self._watcher = threading.Thread(target=self._watch, args=(workers, self._stop_watch),
                                         name="raygang-preemption", daemon=True)
        self._watcher.start()

    def _end_watch(self) -> None:
        self._stop_watch.set()

    def _watch(self, workers: dict[int, Any], stop: threading.Event) -> None:
        from ray.train.v2.api.preemption import PreemptionInfo

        session = self.session
        assert session is not None  # the watch starts once Train's group is adopted
        while not stop.is_set():
            try:
                told = self.client.call(TrainAPI.train_wait_preempt, session, WATCH_POLL_S)
            except Exception:  # the scheduler restarting: ask again
                log.warning("raygang: waiting for preemption failed", exc_info=True)
                stop.wait(1.0)
                continue
            if not told:
                continue
            if "deadline_ms" in told:
                nodes: dict[str, list[int]] = {}
                for rank, worker in workers.items():
                    nodes.setdefault(worker.metadata.node_id, []).append(rank)
                info = PreemptionInfo(deadline_ms=told["deadline_ms"],
                                      preempted_node_to_ranks=nodes)
                log.warning("raygang: run %s preempted; workers must checkpoint by %s",
                            session, told["deadline_ms"])
                for worker in workers.values():
                    worker.actor.mark_preempt.remote(info)
            return

    # The gang ---------------------------------------------------------------------
    def gang_spec(self, scaling_config: Any, num_workers: int) -> GangSpec:
        resources = dict(scaling_config._resources_per_worker_not_none)
        options: dict[str, Any] = {}
        minimum = None
        if scaling_config.elasticity_enabled:
            num_workers = scaling_config.max_workers
            if self._policy is not None:  # raygang sizes it between min and max
                minimum = scaling_config.min_workers
                options["resize"] = Resize.RESTART
            # else: admitted rigidly at its maximum (the policy is not in place)
        if self.preemption_grace_s is not None:
            options["preemption_grace_s"] = self.preemption_grace_s
        return GangSpec(
            name=self.name or "train", queue=self.queue, priority=self.priority,
            strategy=scaling_config.placement_strategy,
            roles=(RoleSpec(name="worker", replicas=num_workers, min_replicas=minimum,
                            resources=resources),),
            # Train's FailureConfig decides when a run has failed; raygang requeues every
            # worker group Train restarts.
            max_restarts=TRAIN_RESTARTS,
            **options,
        )


class RaygangScalingPolicy(ScalingPolicy):
    """Train's scaling policy for an elastic run under raygang: every worker group is the
    size raygang reserved for it (it claims the nodes, then sizes the group to them), and
    Train never resizes a running group on its own (raygang restarts it through Train's
    preemption path when its core decides a new size)."""

    def __init__(self, scaling_config: Any, train: RaygangTrain, controller: Any):
        super().__init__(scaling_config)
        self._train = train
        self._controller = controller

    @classmethod
    def put_in_place(cls, train: RaygangTrain) -> RaygangScalingPolicy | None:
        """Replace the controller's policy with one for `train`; None if that cannot be
        done here."""
        try:
            controller = train_controller()
            if controller is None:
                raise RuntimeError("not running in a Ray Train controller")
            return train_replace_scaling_policy(
                controller, lambda config: cls(config, train, controller))
        except Exception:  # noqa: BLE001 - the run is admitted rigidly instead
            log.warning("raygang: cannot size this elastic Train run; it is admitted at its "
                        "maximum", exc_info=True)
            return None

    def _get_num_workers_for_resource_request(self) -> int:
        return self.scaling_config.max_workers

    def make_decision_for_non_running_worker_group(self) -> ScalingDecision:
        if self._coordinator_client is not None:
            self._maybe_send_resource_request()
        # The group Train still has (failed, preempted or being resized) goes first: its
        # capacity is what the next one may be given.
        train_stop_worker_group(self._controller)
        nodes = self._train.claim(self.scaling_config, self.scaling_config.max_workers)
        if not nodes:
            return NoopDecision()  # Train asks again
        self._train.next_nodes = nodes
        per_worker = self.scaling_config._resources_per_worker_not_none
        return ResizeDecision(num_workers=len(nodes), resources_per_worker=per_worker)

    def make_decision_for_running_worker_group(self, worker_group_state: Any,
                                               worker_group_status: Any) -> ScalingDecision:
        if self._coordinator_client is not None:
            self._maybe_send_resource_request()
        return NoopDecision()


def _gang_name(run_name: str | None) -> str:
    """A gang name from Train's run name (names become parts of Ray names)."""
    cleaned = "".join(c if c.isalnum() or c in "_.-" else "-" for c in (run_name or "train"))
    return cleaned.strip("-_.")[:40] or "train"
