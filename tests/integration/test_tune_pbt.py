"""Population-based training under raygang: PBT pauses a trial to let it carry on from a
better one's checkpoint with a mutated config. Each pause frees the trial's gang at once
(Tune frees its resources), and the resumed trial queues again: the queue's limit holds
throughout, every trial finishes, and nothing is left. And a sweep that ends while one of
its trials is paused leaves nothing either."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import ray
from ray import tune
from ray.tune import Checkpoint, PlacementGroupFactory, RunConfig, TuneConfig, Tuner
from ray.tune.schedulers import FIFOScheduler, PopulationBasedTraining, TrialScheduler
from ray.tune.stopper import Stopper

import raygang
from tests.integration.helpers import wait_until
from tests.integration.test_tune import GroupWatch, _live_groups, gang_stories, settled

STEPS = 4  # 8 made 16 starts (158 s of a CI run); 4 make about 10, with the same pauses


def pbt_trial(config):
    """Steps of 0.3 s on 2 (virtual) GPUs, a checkpoint at each; resumes from the one it
    is given (its own, or the better trial's PBT cloned). Writes where each start began."""
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as kept:
            start = json.loads((Path(kept) / "state.json").read_text())["step"] + 1
    with open(config["starts"], "a") as starts:
        starts.write(f"{tune.get_context().get_trial_id()} {start}\n")
    for step in range(start, STEPS):
        time.sleep(0.3)
        with tempfile.TemporaryDirectory() as here:
            (Path(here) / "state.json").write_text(json.dumps({"step": step}))
            tune.report({"score": config["lr"] * (step + 1), "step": step},
                        checkpoint=Checkpoint.from_directory(here))


def test_pbt_pauses_release_the_trials_gangs_and_the_limit_holds(ray_cluster, tmp_path: Path):
    """3 trials x 2 GPUs in a queue limited to 4 GPUs. PBT (every 2 iterations, the worse
    half exploits the better) pauses the worst trial; it resumes from the better one's
    checkpoint in a gang of its own."""
    starts = tmp_path / "starts"
    starts.touch()
    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2,
                                  quantile_fraction=0.5, metric="score", mode="max",
                                  hyperparam_mutations={"lr": [0.5, 1.0, 2.0, 4.0]})
    tuner = Tuner(tune.with_resources(pbt_trial, PlacementGroupFactory([{"CPU": 1, "GPU": 2}])),
                  param_space={"lr": tune.grid_search([0.1, 1.0, 2.0]), "starts": str(starts)},
                  tune_config=TuneConfig(scheduler=pbt),
                  run_config=RunConfig(name="pbt", storage_path=str(tmp_path), verbose=0))
    watch = GroupWatch()
    results = raygang.tune(tuner, queue="sweep", name="pbt")
    most = watch.stop()

    gangs = settled(lambda: [g for g in raygang.list_gangs() if g.name.startswith("pbt-")])
    assert not results.errors, gang_stories(gangs)
    assert sorted(r.metrics["step"] for r in results) == [STEPS - 1] * 3
    lines = [line.split() for line in starts.read_text().splitlines()]
    resumed = [(trial, int(at)) for trial, at in lines if int(at) > 0]
    assert resumed, lines  # PBT paused at least one trial, which resumed from a checkpoint
    assert 0 < most <= 4, most  # never more than the queue's limit, pauses included
    # A gang per start: a paused trial's gang ended when Tune freed it
    assert len(gangs) >= len(lines), (lines, gang_stories(gangs))
    assert all(g.state.value == "SUCCEEDED" for g in gangs), gang_stories(gangs)
    assert _live_groups() == []
    wait_until(lambda: ray.available_resources().get("GPU", 0) == 8, timeout=15)
    print(f"PBT: {len(lines)} starts of 3 trials ({len(resumed)} from a checkpoint), "
          f"{len(gangs)} gangs, at most {most:g} GPUs in groups")


class PauseOnce(FIFOScheduler):
    """Pauses the first trial that reaches iteration 2 (as PBT does to exploit), once."""

    def __init__(self):
        super().__init__()
        self.paused: str | None = None

    def on_trial_result(self, tune_controller, trial, result):
        if self.paused is None and result["training_iteration"] == 2:
            self.paused = trial.trial_id
            return TrialScheduler.PAUSE
        return super().on_trial_result(tune_controller, trial, result)


class EndOncePaused(Stopper):
    """Ends the whole sweep as soon as the scheduler has paused a trial."""

    def __init__(self, scheduler: PauseOnce):
        self.scheduler = scheduler

    def __call__(self, trial_id, result):
        return False

    def stop_all(self):
        return self.scheduler.paused is not None


def test_a_sweep_that_ends_while_a_trial_is_paused_leaves_nothing(ray_cluster, tmp_path: Path):
    """2 trials x 2 GPUs (within the queue's limit). One is paused at iteration 2 (its gang
    ends as Tune frees it) and the sweep ends right then (a stopper, as a time budget or a
    target metric would): the paused trial ends paused, the other is stopped; every gang of
    the sweep ends, and no placement group, GPU or queued gang is left."""
    starts = tmp_path / "starts"
    starts.touch()
    scheduler = PauseOnce()
    tuner = Tuner(tune.with_resources(pbt_trial, PlacementGroupFactory([{"CPU": 1, "GPU": 2}])),
                  param_space={"lr": tune.grid_search([0.1, 1.0]), "starts": str(starts)},
                  tune_config=TuneConfig(scheduler=scheduler),
                  run_config=RunConfig(name="paused-end", storage_path=str(tmp_path),
                                       stop=EndOncePaused(scheduler), verbose=0))
    results = raygang.tune(tuner, queue="sweep", name="paused-end")

    gangs = [g for g in raygang.list_gangs() if g.name.startswith("paused-end-")]
    assert scheduler.paused is not None
    assert not results.errors, gang_stories(gangs)
    paused = [r for r in results if r.metrics["trial_id"] == scheduler.paused]
    assert [r.metrics["training_iteration"] for r in paused] == [2]  # never resumed
    # The sweep ended before any trial's last step (the other trial may not have reported,
    # or even started, on a loaded machine), and no trial started twice
    assert all(r.metrics.get("step", -1) < STEPS - 1 for r in results), \
        [r.metrics for r in results]
    started = [line.split()[0] for line in starts.read_text().splitlines()]
    assert scheduler.paused in started and len(started) == len(set(started)), started
    assert gangs and all(g.state.finished for g in gangs), gang_stories(gangs)
    assert not [g for g in raygang.list_gangs() if g.queue == "sweep" and not g.state.finished]
    assert _live_groups() == []
    wait_until(lambda: ray.available_resources().get("GPU", 0) == 8, timeout=15)
