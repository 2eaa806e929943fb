"""A Ray Train V2 run queued on its own (`raygang.train`) whose worker group's creation
the GCS loses: the GCS is killed just as it schedules the group's workers, on a cluster of
its own with Redis as the GCS's store (the head takes no work and runs the scheduler).

    python -m tests.integration.train_gcs_outage   # prints one JSON line

Ray 2.60 loses an actor's creation when its GCS dies while scheduling it: the workers
stay PENDING_CREATION with no process after the GCS returns, and Train, which waits for
its workers with no timeout, would wait for ever (bench/head_faults.py found a run in a
job hung so). raygang removes their placement group once they have waited so for 30 s
(`TrainSession.watch_workers`); Train's start of the group then fails. This prints what
follows: how `fit` ended, how the run's gang ended, and what is left in Ray. It does so
twice: once left to the watch, once with the run's gang cancelled 8 s after the GCS's
return, before the watch acts (the waiting workers' group is then removed at once). Each
prints `lost_workers`, how many workers the GCS lost: 0 means the kill came too late
(the workers had started), and the run saw no lost creation. The trainer is queued on
its own, not in a raygang job, so no Ray job agent is needed (on the loaded CI machine
Ray's Job Submission API took minutes to accept a first job on a fresh cluster). Run in a
subprocess of its own: this cluster's processes need RAY_REDIS_ADDRESS
(test_train_gcs_outage.py).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time

from raygang.runtime.ports import free_port
from tests.integration.gcs_outage import HEAD, shut_down, start_on_head, start_redis

# After the workers are first seen waiting: a kill at that very moment may come before
# the GCS asks a raylet for their process (it then schedules them anew once back: 1 run of
# 2 here); 0.3 s and 0.8 s on, the creation was lost in 3 runs of 3
KILL_AFTER_S = 0.3
OUTAGE_S = 10.0
LOOKED_AFTER_S = 12.0  # after the GCS's return: a worker started normally has a process
CANCEL_AFTER_S = 8.0  # after the GCS's return: well before the watch's 30 s
STEPS = 4  # of training: what matters here is that the run starts, or says why not
FIT_TIMEOUT_S = 200.0


def train_func(config):
    import ray.train

    for step in range(config["steps"]):
        time.sleep(0.2)
        ray.train.report({"step": step})


def lost_workers() -> int:
    """Ray Train workers the GCS has waiting for their creation with no process."""
    from ray._private.state import state

    waiting = state.actor_table(None, actor_state_name="PENDING_CREATION")
    return sum(1 for a in waiting.values()
               if a["ActorClassName"] == "RayTrainWorker" and not a["Pid"])


def workers_being_created() -> bool:
    """Train's workers are registered with the GCS and wait for their creation (the GCS
    is scheduling them): the moment a GCS kill loses it."""
    return lost_workers() > 0


class Fit(threading.Thread):
    """`raygang.train(trainer)` in a thread: how it ended, and when."""

    def __init__(self, trainer):
        super().__init__(daemon=True)
        self.trainer = trainer
        self.outcome: str | None = None
        self.ended_at: float | None = None
        self.start()

    def run(self):
        import raygang

        try:
            raygang.train(self.trainer)
            self.outcome = "succeeded"
        except BaseException as error:  # noqa: BLE001 - reported
            self.outcome = f"{type(error).__name__}: {error}"[:600]
        self.ended_at = time.monotonic()


def lose_workers(cluster, storage: str, name: str, cancel_after_s: float | None) -> dict:
    """Run a trainer, kill the GCS while it schedules the workers, start it again; then
    wait (or cancel the run's gang `cancel_after_s` after the GCS's return) until `fit`
    ends. What happened, as a dict."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    import raygang

    trainer = DataParallelTrainer(
        train_func, train_loop_config={"steps": STEPS},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=True),
        run_config=RunConfig(name=name, storage_path=storage))
    fit = Fit(trainer)
    out: dict = {}
    deadline = time.monotonic() + 180
    while not workers_being_created():
        assert fit.is_alive() and time.monotonic() < deadline, fit.outcome
        time.sleep(0.02)
    seen = time.monotonic()  # the workers first seen waiting (within 20 ms)
    time.sleep(KILL_AFTER_S)
    out["pending_at_kill"] = lost_workers()
    cluster.head_node.kill_gcs_server()
    time.sleep(OUTAGE_S)
    cluster.head_node.start_gcs_server()
    returned = time.monotonic()
    [gang] = [g for g in raygang.list_gangs() if g.kind == "train" and g.name == name]
    if cancel_after_s is None:
        time.sleep(LOOKED_AFTER_S)
        out["lost_workers"] = lost_workers()
    else:
        time.sleep(cancel_after_s)
        out["lost_workers"] = lost_workers()
        raygang.GangRef(gang.gang_id).cancel()
        out["cancelled_after_return_s"] = round(time.monotonic() - returned, 1)
    fit.join(FIT_TIMEOUT_S)
    out["fit"] = fit.outcome  # None: still running (hung)
    out["fit_ended_after_return_s"] = (None if fit.ended_at is None
                                       else round(fit.ended_at - returned, 1))
    # The watch counts from its first look that saw them waiting: before the kill if a
    # look came in the 0.3 s before it (a look every second), else after the return.
    out["fit_ended_after_seen_s"] = (None if fit.ended_at is None
                                     else round(fit.ended_at - seen, 1))
    status = raygang.GangRef(gang.gang_id).status()
    out["gang"] = (status.state.value, status.restarts, status.reason)
    return out


def left(total: dict) -> dict:
    """What is left in Ray once the run's end is freed (waited for, up to 30 s)."""
    import ray

    from tests.integration.leaks import raygang_member_actors, raygang_placement_groups

    out: dict = {}
    deadline = time.monotonic() + 30
    while True:
        out["groups_left"] = sum(1 for pg in ray.util.placement_group_table().values()
                                 if pg["state"] != "REMOVED")
        out["leftovers"] = [pg["name"] for pg in raygang_placement_groups()] \
            + raygang_member_actors()
        free = ray.available_resources()
        out["gpus_free"] = [free.get("GPU", 0.0), total.get("GPU", 0.0)]
        if (not out["groups_left"] and out["gpus_free"][0] == out["gpus_free"][1]) \
                or time.monotonic() > deadline:
            return out
        time.sleep(0.5)


def main() -> dict:
    redis = start_redis("raygang-train-test")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    # Train's controller polls its workers every 0.5 s, not 2 (as on the suite's clusters:
    # tests/conftest.py): each report waits for a poll
    os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = "0.5"
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args=HEAD | {
        "gcs_server_port": free_port()})
    out: dict = {}
    try:
        cluster.add_node(num_cpus=4, num_gpus=4)
        ray.init(address=cluster.address)
        cluster.wait_for_nodes()
        start_on_head()
        total = ray.cluster_resources()
        storage = tempfile.mkdtemp(prefix="rg-train-outage-")
        # Left to the watch: 30 s on, it removes the waiting workers' group
        out["watched"] = lose_workers(cluster, storage, "watched", cancel_after_s=None)
        out["watched"].update(left(total))
        # Cancelled while they wait, before the watch acts: their group goes at once
        out["cancelled"] = lose_workers(cluster, storage, "cancelled", CANCEL_AFTER_S)
        out["cancelled"].update(left(total))
        return out
    finally:
        shut_down(cluster, redis)


if __name__ == "__main__":
    print(json.dumps(main(), default=str), flush=True)
