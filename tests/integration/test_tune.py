"""Ray Tune sweeps under raygang (`raygang.tune`), on the shared real cluster (2 workers x 4
virtual GPUs): each trial is a gang in a queue, admitted as the queue allows, released the
moment Tune stops it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import ray
from ray import tune
from ray.tune import PlacementGroupFactory, RunConfig, TuneConfig, Tuner
from ray.util import placement_group_table

import raygang
from tests.integration.helpers import wait_until


def trial(config):
    """A few quick iterations on 2 (virtual) GPUs."""
    for step in range(config["steps"]):
        time.sleep(0.3)
        tune.report({"step": step, "x": config["x"]})


def stop_early(trial_id: str, result: dict) -> bool:
    """Tune stops the trials of x == 0 after their first report (as an early-stopping
    scheduler would)."""
    return result["x"] == 0 and result["training_iteration"] >= 1


class GroupWatch(threading.Thread):
    """The most GPUs ever held by placement groups (raygang's holds and the trials' own)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.most = 0.0
        self.done = threading.Event()
        self.start()

    def run(self):
        while not self.done.is_set():
            self.most = max(self.most, _gpus_in_groups())
            time.sleep(0.1)

    def stop(self) -> float:
        self.done.set()
        self.join()
        return self.most


def _gpus_in_groups(states=("CREATED",)) -> float:
    return sum(b.get("GPU", 0) for g in placement_group_table().values()
               if g["state"] in states for b in g["bundles"].values())


def _live_groups() -> list[dict]:
    return [g for g in placement_group_table().values() if g["state"] != "REMOVED"]


def test_trials_are_gangs_within_the_queue_limit(ray_cluster, tmp_path: Path):
    """4 trials x 2 GPUs in a queue limited to 4 GPUs, with no max_concurrent_trials: never
    more than 2 trials' GPUs held, every trial ends (2 stopped early by Tune), each trial
    was a raygang gang that succeeded, and no placement group is left."""
    trainable = tune.with_resources(trial, PlacementGroupFactory([{"CPU": 1, "GPU": 2}]))
    tuner = Tuner(trainable,
                  param_space={"x": tune.grid_search([0, 1, 0, 1]), "steps": 4},
                  tune_config=TuneConfig(),
                  run_config=RunConfig(name="sweep", storage_path=str(tmp_path),
                                       stop=stop_early, verbose=0))
    watch = GroupWatch()
    started = time.monotonic()
    results = raygang.tune(tuner, queue="sweep", name="sweep")
    took = time.monotonic() - started
    most = watch.stop()

    assert not results.errors
    steps = sorted(r.metrics["step"] for r in results)
    assert steps == [0, 0, 3, 3], steps  # x == 0 stopped after one report
    assert 0 < most <= 4, most
    gangs = [g for g in raygang.list_gangs() if g.queue == "sweep"]
    assert len(gangs) == 4 and all(g.state.value == "SUCCEEDED" for g in gangs), gangs
    assert _live_groups() == []
    # A removed group's GPUs show as free once its node reports them (a moment later)
    wait_until(lambda: ray.available_resources().get("GPU", 0) == 8, timeout=15)
    print(f"4 trials under raygang: {took:.1f}s, at most {most:g} GPUs in groups")
