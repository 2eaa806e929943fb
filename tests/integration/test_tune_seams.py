"""The seams of a Tune trial's hand-off, driven one call at a time: raygang's resource
manager for Tune (`RaygangTuneResources`) on the shared real cluster (2 workers x 4 virtual
GPUs) and the real scheduler, with no Tuner around it, so that each window is reached for
certain rather than by timing. The calls are the ones Tune's controller makes
(`request_resources`, `update_state`, `has_resources_ready`, `acquire_resources`,
`free_resources`, `cancel_resource_request`, `clear`); a whole sweep is tested in
test_tune.py.

Windows: a trial's gang preempted once placed but before Tune took it (handed back, queued
again, placed again: twice over), and cancelled while waiting in the queue, while its
group is being placed, once placed and not taken, and once taken (`clear`, as Tune does
when a sweep ends or fails). Each ends with nothing of the trial's left in Ray. And, with a
real Tuner: a trial preempted while its actor starts, then again while it runs; and
trials that reuse their actors (`reuse_actors`), whose gang is held from trial to trial."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import ray
from ray import tune
from ray.air.execution.resources.request import ResourceRequest
from ray.tune import PlacementGroupFactory
from ray.util import placement_group_table

import raygang
from raygang.runtime.client.tune import RaygangTuneResources
from tests.integration.helpers import wait_until

TRIAL = ResourceRequest([{"CPU": 1, "GPU": 2}])


def hold(finish: str) -> None:
    while not Path(finish).exists():
        time.sleep(0.2)


# Together they hold 6 of the 8 GPUs until told to finish (inference, which a training
# trial cannot preempt; a queue runs such gangs beyond its quota only on capacity no quota
# guarantees, 4 GPUs here: hence two queues)
holder = raygang.gang_task(hold, replicas=2, num_gpus=2, priority="inference")
keeper = raygang.gang_task(hold, num_gpus=2, priority="inference", queue="team-b")


@raygang.gang_task(num_gpus=2, priority="inference", queue="team-a")
def urgent(seconds: float) -> None:
    time.sleep(seconds)


def pump(manager: RaygangTuneResources, until: Callable[[], bool], timeout: float) -> None:
    """Tune's event loop, reduced to what matters here: wait on the manager's futures and
    let it take in what came back, until `until` holds."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "timed out"
        futures = manager.get_resource_futures()
        if futures:
            ray.wait(futures, num_returns=1, timeout=0.2)
        else:
            time.sleep(0.2)
        manager.update_state()


def gang(name: str) -> raygang.GangStatus:
    found = [g for g in raygang.list_gangs() if g.name == name]
    assert len(found) == 1, found
    return found[0]


def placed(manager: RaygangTuneResources) -> int:
    """Trials whose group the manager made (being placed, or placed)."""
    trials = [*manager._waiting[TRIAL], *manager._ready[TRIAL], *manager._acquired.values()]
    return sum(t.group is not None for t in trials)


def groups_holding_gpus() -> list[dict]:
    return [g for g in placement_group_table().values()
            if g["state"] != "REMOVED" and any(b.get("GPU") for b in g["bundles"].values())]


def test_a_placed_trial_preempted_before_tune_takes_it_is_handed_back_each_time(
        ray_cluster, tmp_path: Path):
    """The trial's gang is placed (its group ready, raygang told) but Tune has not taken it
    yet: an urgent gang preempts it. The manager removes the group and hands the gang back
    (no pause: Tune has no trial on it); raygang requeues it, and once there is room again
    it is placed again, the same gang. Twice; then Tune takes it and frees it: the gang
    succeeds with 2 preemptions, and no other gang was opened."""
    finish = tmp_path / "finish"
    held = [holder.remote(str(finish)), keeper.remote(str(finish))]
    for gang_ref in held:
        gang_ref.ready(timeout=60)
    manager = RaygangTuneResources(queue="sweep", name="seam-back")
    try:
        manager.request_resources(TRIAL)
        for preemptions in (1, 2):
            pump(manager, lambda: manager.has_resources_ready(TRIAL), timeout=60)
            assert gang("seam-back-1").state.value == "RUNNING"
            quick = urgent.remote(1.0)
            # Handed back: not ready any more, its group gone, its gang queued again
            pump(manager, lambda: not manager.has_resources_ready(TRIAL)
                 and gang("seam-back-1").preemptions == preemptions, timeout=60)
            assert quick.wait(timeout=60).state.value == "SUCCEEDED"
        pump(manager, lambda: manager.has_resources_ready(TRIAL), timeout=60)
        taken = manager.acquire_resources(TRIAL)
        assert taken is not None
        manager.free_resources(taken)  # the trial ended
        wait_until(lambda: gang("seam-back-1").state.value == "SUCCEEDED", timeout=15)
        assert gang("seam-back-1").preemptions == 2
        assert [g.name for g in raygang.list_gangs() if g.name.startswith("seam-back")] \
            == ["seam-back-1"]
    finally:
        manager.clear()
        finish.touch()
    assert [g.wait(timeout=30).state.value for g in held] == ["SUCCEEDED"] * 2
    wait_until(lambda: not groups_holding_gpus(), timeout=15)


def test_a_trial_cancelled_at_each_point_of_its_hand_off_leaves_nothing(ray_cluster):
    """Four trials of 2 GPUs in the sweep's queue (limit 4 GPUs): two are admitted, two
    wait. Cancelled in turn (as Tune does): one waiting in the queue, one whose group is
    being placed or placed and not taken, and, by `clear`, one Tune took. Every gang ends
    CANCELLED in raygang, and no group of theirs is left."""
    manager = RaygangTuneResources(queue="sweep", name="seam-cancel")
    names = [f"seam-cancel-{i}" for i in range(1, 5)]
    try:
        for _ in names:
            manager.request_resources(TRIAL)
        # Two admitted: their claims came back with nodes, and their groups are made
        pump(manager, lambda: placed(manager) == 2, timeout=60)
        # Tune cancels the newest request first: a waiting one (its gang still queued)
        manager.cancel_resource_request(TRIAL)
        wait_until(lambda: gang("seam-cancel-4").state.value == "CANCELLED", timeout=15)
        # Its place in the queue: the one still waiting, never admitted
        assert gang("seam-cancel-3").state.value == "PENDING"
        manager.cancel_resource_request(TRIAL)
        wait_until(lambda: gang("seam-cancel-3").state.value == "CANCELLED", timeout=15)
        # Now one whose group may still be placing: cancelled before it was ready
        manager.cancel_resource_request(TRIAL)
        pump(manager, lambda: manager.has_resources_ready(TRIAL), timeout=60)
        taken = manager.acquire_resources(TRIAL)
        assert taken is not None
        manager.clear()  # the sweep ends with a trial Tune still holds
        for name in names:
            wait_until(lambda n=name: gang(n).state.value == "CANCELLED", timeout=15)
    finally:
        manager.clear()
    wait_until(lambda: not groups_holding_gpus(), timeout=15)
    wait_until(lambda: ray.available_resources().get("GPU", 0) == 8, timeout=15)


class SlowStart(tune.Trainable):
    """A trial whose actor takes SETUP_S to start (Tune's trial is not RUNNING until its
    actor's constructor, and so `setup`, returns): steps of 0.5 s, a checkpoint on request,
    each step written to `steps_file` with the step it resumed from."""

    def setup(self, config):
        time.sleep(SETUP_S)
        self.done = 0
        self.resumed_at = 0

    def step(self):
        time.sleep(0.5)
        self.done += 1
        with open(self.config["steps_file"], "a") as steps:
            steps.write(f"{self.done} {self.resumed_at}\n")
        return {"step": self.done, "resumed_at": self.resumed_at}

    def save_checkpoint(self, checkpoint_dir):
        (Path(checkpoint_dir) / "state.json").write_text(json.dumps({"done": self.done}))

    def load_checkpoint(self, checkpoint_dir):
        self.done = json.loads((Path(checkpoint_dir) / "state.json").read_text())["done"]
        self.resumed_at = self.done


SETUP_S = 6.0


def test_a_trial_preempted_while_its_actor_starts_then_again_while_it_runs(
        ray_cluster, tmp_path: Path):
    """One trial of 2 GPUs; 6 of the 8 GPUs held by inference gangs. An urgent gang
    preempts the trial once its group is placed and its actor is still starting (Tune would
    never run a trial paused in that window again): raygang's manager waits until it runs,
    then Tune pauses it (nothing reported, nothing to save). It is resumed once the urgent
    gang ends, from the start, and preempted a second time while it runs, after steps it
    reported: paused with a checkpoint, it resumes from it. One gang throughout, preempted
    twice; the sweep ends, and nothing is left."""
    finish = tmp_path / "finish"
    held = [holder.remote(str(finish)), keeper.remote(str(finish))]
    for gang_ref in held:
        gang_ref.ready(timeout=60)
    steps_file = tmp_path / "steps"
    steps_file.touch()
    tuner = tune.Tuner(
        tune.with_resources(SlowStart, PlacementGroupFactory([{"CPU": 1, "GPU": 2}])),
        param_space={"steps_file": str(steps_file)},
        run_config=tune.RunConfig(name="slow", storage_path=str(tmp_path), verbose=0,
                                  stop={"training_iteration": 16}))
    box: dict = {}
    sweep = threading.Thread(target=lambda: box.update(
        results=raygang.tune(tuner, queue="sweep", name="slow")), daemon=True)
    sweep.start()
    try:
        def steps() -> list[list[int]]:
            return [[int(n) for n in line.split()] for line in
                    steps_file.read_text().splitlines()]
        # Placed and handed over; its actor is in `setup` for SETUP_S: no step yet
        wait_until(lambda: [g.state.value for g in raygang.list_gangs()
                            if g.name == "slow-1"] == ["RUNNING"], timeout=60)
        assert steps() == []
        assert urgent.remote(1.0).wait(timeout=90).state.value == "SUCCEEDED"
        assert gang("slow-1").preemptions == 1
        # Resumed once the urgent gang ended: from the start (nothing was saved)
        wait_until(lambda: len(steps()) >= 2, timeout=90)
        assert steps()[0] == [1, 0], steps()
        assert urgent.remote(1.0).wait(timeout=90).state.value == "SUCCEEDED"
        sweep.join(timeout=120)
        assert not sweep.is_alive()
    finally:
        finish.touch()
    results = box["results"]
    assert not results.errors
    [result] = list(results)
    assert result.metrics["step"] == 16 and result.metrics["resumed_at"] >= 2, result.metrics
    assert gang("slow-1").preemptions == 2 and gang("slow-1").state.value == "SUCCEEDED"
    assert [g.name for g in raygang.list_gangs() if g.name.startswith("slow-")] == ["slow-1"]
    assert [g.wait(timeout=30).state.value for g in held] == ["SUCCEEDED"] * 2
    wait_until(lambda: not groups_holding_gpus(), timeout=15)


def quick(config):
    for step in range(4):
        time.sleep(0.3)
        tune.report({"step": step, "x": config["x"]})


def test_reused_actors_keep_their_gang_from_trial_to_trial(ray_cluster, tmp_path: Path):
    """`reuse_actors`: Tune hands a finished trial's actor, and the group it holds, to the
    next trial of the same request, and drops the request it had made for that one. The
    gang then simply stays held from trial to trial: 4 trials x 2 GPUs in the sweep's queue
    (limit 4 GPUs) all end, never more than 4 GPUs held, each gang that ran succeeded and
    each request Tune dropped was cancelled; nothing is left."""
    tuner = tune.Tuner(
        tune.with_resources(quick, PlacementGroupFactory([{"CPU": 1, "GPU": 2}])),
        param_space={"x": tune.grid_search([0, 1, 2, 3])},
        tune_config=tune.TuneConfig(reuse_actors=True),
        run_config=tune.RunConfig(name="reuse", storage_path=str(tmp_path), verbose=0))
    most, done = [0.0], threading.Event()

    def watch():
        while not done.is_set():
            most[0] = max(most[0], sum(b.get("GPU", 0) for g in groups_holding_gpus()
                                       for b in g["bundles"].values()))
            time.sleep(0.1)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        results = raygang.tune(tuner, queue="sweep", name="reuse")
    finally:
        done.set()
        watcher.join()
    assert not results.errors
    assert sorted(r.metrics["step"] for r in results) == [3, 3, 3, 3]
    gangs = [g for g in raygang.list_gangs() if g.name.startswith("reuse-")]
    ran = [g for g in gangs if g.state.value == "SUCCEEDED"]
    assert {g.state.value for g in gangs} <= {"SUCCEEDED", "CANCELLED"}, gangs
    assert 1 <= len(ran) <= 4 and 0 < most[0] <= 4, (gangs, most)
    print(f"reuse_actors: {len(ran)} gangs ran 4 trials, "
          f"{len(gangs) - len(ran)} requests dropped")
    wait_until(lambda: not groups_holding_gpus(), timeout=15)
