"""Ray Tune sweeps under raygang (`raygang.tune`), on the shared real cluster (2 workers x 4
virtual GPUs): each trial is a gang in a queue, admitted as the queue allows, released the
moment Tune stops it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import ray
import ray.train
from ray import tune
from ray.tune import Checkpoint, PlacementGroupFactory, RunConfig, TuneConfig, Tuner
from ray.util import placement_group_table

import raygang
from tests.integration.helpers import restart_scheduler, wait_until

ROOT = Path(__file__).resolve().parents[2]
GATE_STEP = 3  # a gated trial (`resumable`) takes steps 0-3, then waits for its gate


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

    def sweep_gangs() -> list:
        return [g for g in raygang.list_gangs() if g.queue == "sweep"
                and g.name.startswith("sweep-")]  # not other modules' sweeps

    gangs = settled(sweep_gangs)
    assert len(gangs) == 4 and all(g.state.value == "SUCCEEDED" for g in gangs), gangs
    wait_until(lambda: _live_groups() == [], timeout=15)
    # A removed group's GPUs show as free once its node reports them (a moment later)
    wait_until(lambda: ray.available_resources().get("GPU", 0) == 8, timeout=15)
    print(f"4 trials under raygang: {took:.1f}s, at most {most:g} GPUs in groups")


def gang_stories(gangs) -> list:
    return [(g.name, g.state.value, [(e.to_state.value, e.reason) for e in g.events])
            for g in gangs]


def settled(gangs: Callable[[], list]) -> list:
    """`gangs()` once every one has SUCCEEDED, or as they are 30 s on. A trial's gang ends
    a moment after the scheduler hears that Tune freed it (`train_finished`): a loaded CI
    run (2026-12-04) listed one of two trials' gangs not yet SUCCEEDED right after `fit`
    returned. The call now answers once the gang has ended (up to 10 s,
    `train_desk.FINISH_WAIT_S`); this waits longer, for a slower teardown."""
    deadline = time.monotonic() + 30
    while True:
        found = gangs()
        if all(g.state.value == "SUCCEEDED" for g in found) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def resumable(config):
    """Steps of 0.5 s on 2 (virtual) GPUs, a checkpoint at each; resumes from the last.
    With a `gate` (a path), no step past GATE_STEP is taken until that file exists: the
    trial reports its last step again every 0.5 s meanwhile, so Tune can still pause it."""
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as kept:
            start = json.loads((Path(kept) / "state.json").read_text())["step"] + 1
    step = start
    while step < config["steps"]:
        time.sleep(0.5)
        gated = step > GATE_STEP and config.get("gate") and not Path(config["gate"]).exists()
        done = step - 1 if gated else step
        if not gated:
            with open(config["steps_file"], "a") as steps:
                steps.write(f"{config['x']} {step}\n")
            step += 1
        with tempfile.TemporaryDirectory() as here:
            (Path(here) / "state.json").write_text(json.dumps({"step": done}))
            tune.report({"step": done, "resumed_at": start},
                        checkpoint=Checkpoint.from_directory(here))


def resumable_sweep(tmp_path: Path, name: str, steps: int, trials: int,
                    gate: Path | None = None) -> tuple[threading.Thread, dict, Path]:
    """`raygang.tune` of `trials` resumable trials (2 GPUs each) in queue `sweep`, started
    in a thread: the thread, a box that holds its "results" once it ends, and the file
    each trial's steps are written to."""
    trainable = tune.with_resources(resumable, PlacementGroupFactory([{"CPU": 1, "GPU": 2}]))
    steps_file = tmp_path / "steps"
    steps_file.touch()
    tuner = Tuner(trainable, param_space={"steps": steps,
                                          "x": tune.grid_search(list(range(trials))),
                                          "steps_file": str(steps_file),
                                          "gate": str(gate) if gate else None},
                  run_config=RunConfig(name=name, storage_path=str(tmp_path), verbose=0))
    box: dict = {}
    sweep = threading.Thread(target=lambda: box.update(
        results=raygang.tune(tuner, queue="sweep", name=name)), daemon=True)
    sweep.start()
    return sweep, box, steps_file


@raygang.gang_task(replicas=2, num_gpus=2, priority="inference")
def filler(finish: str) -> None:
    """Non-preemptible: holds the GPUs the sweep does not, until told to finish."""
    while not Path(finish).exists():
        time.sleep(0.2)


def test_a_preempted_trial_pauses_with_a_checkpoint_and_resumes_from_it(
        ray_cluster, http_port, tmp_path: Path):
    """2 trials x 2 GPUs run; a non-preemptible gang holds the other 4 GPUs; a Serve
    deployment of 2 GPUs in a queue with a quota of 2 GPUs preempts one trial: Tune pauses
    it with its checkpoint, its gang waits in the queue (PREEMPTED, then PENDING) and is
    admitted again once the deployment is undeployed; the trial resumes from its
    checkpoint, not from the start. The trials wait at step GATE_STEP until the deployment
    is gone: a Serve start on a loaded machine may outlast a whole trial, and the
    deployment must find both still running (a CI run: both trials had ended, nothing was
    preempted)."""
    import httpx

    gate = tmp_path / "gate"
    sweep, box, steps_file = resumable_sweep(tmp_path, "pre", steps=16, trials=2, gate=gate)

    def trial_gangs():
        return [g for g in raygang.list_gangs() if g.name.startswith("pre-")]
    def stepped(x: int) -> int:
        return sum(line.split()[0] == str(x) for line in steps_file.read_text().splitlines())
    wait_until(lambda: stepped(0) >= 2 and stepped(1) >= 2, timeout=90)  # checkpoints, each
    finish = tmp_path / "finish"
    held = filler.remote(str(finish))
    held.ready(timeout=60)
    served = raygang.deploy("urgent", "raygang.demo:echo", replicas=1, num_gpus=2,
                            num_cpus=0, queue="team-a")  # priority: inference
    try:
        served.ready(timeout=120)
        assert sorted(g.preemptions for g in trial_gangs()) == [0, 1], \
            gang_stories(trial_gangs())
        answer = httpx.get(f"http://127.0.0.1:{http_port}/urgent", timeout=30)
        assert answer.status_code == 200, answer.text
    finally:
        raygang.undeploy("urgent")
        gate.touch()
    finish.touch()
    assert held.wait(timeout=30).state.value == "SUCCEEDED"
    sweep.join(timeout=120)
    assert not sweep.is_alive(), gang_stories(trial_gangs())

    results = box["results"]
    assert not results.errors
    assert sorted(r.metrics["step"] for r in results) == [15, 15]
    resumed = [r.metrics["resumed_at"] for r in results if r.metrics["resumed_at"] > 0]
    assert len(resumed) == 1, [r.metrics for r in results]  # from its checkpoint
    gangs = settled(trial_gangs)
    # The preempted trial's gang was requeued and admitted again: no other gang opened
    assert len(gangs) == 2 and all(g.state.value == "SUCCEEDED" for g in gangs), \
        "\n".join(map(str, gang_stories(gangs)))  # a str: pytest cuts a list's repr short
    assert sorted(g.preemptions for g in gangs) == [0, 1], gang_stories(gangs)
    assert _live_groups() == []
    wait_until(lambda: ray.available_resources().get("GPU", 0) == 8, timeout=15)


def test_a_restarted_scheduler_adopts_the_running_trials_and_keeps_the_waiting(
        ray_cluster, tmp_path: Path):
    """4 trials x 2 GPUs in a queue limited to 4 GPUs: 2 run, 2 wait. The scheduler's
    process dies: the restarted one adopts the running trials' gangs (their groups stay),
    keeps the waiting ones queued, and the sweep ends with every trial done, the same 4
    gangs, none restarted."""
    sweep, box, steps_file = resumable_sweep(tmp_path, "kept", steps=10, trials=4)
    wait_until(lambda: len(steps_file.read_text().splitlines()) >= 2, timeout=90)

    restart_scheduler()

    sweep.join(timeout=180)
    gangs = settled(lambda: [g for g in raygang.list_gangs() if g.name.startswith("kept-")])
    assert not sweep.is_alive(), gang_stories(gangs)
    results = box["results"]
    assert not results.errors
    assert sorted(r.metrics["step"] for r in results) == [9, 9, 9, 9]
    assert len(gangs) == 4 and all(g.state.value == "SUCCEEDED" for g in gangs), \
        gang_stories(gangs)
    assert all(g.restarts == 0 for g in gangs), gang_stories(gangs)
    adopted = [g for g in gangs
               if any("adopted by the restarted scheduler" in e.reason for e in g.events)]
    assert adopted, gang_stories(gangs)
    assert _live_groups() == []
    wait_until(lambda: ray.available_resources().get("GPU", 0) == 8, timeout=15)


def test_two_sweeps_in_two_queues_share_the_gpus(ray_cluster, tmp_path: Path):
    """Two Tuners at once, each in a thread of its own and a queue of its own (team-a and
    team-b, a GPU quota of 2 each), each wanting all 8 GPUs (4 trials x 2): they run side by
    side, neither waits for the other to end, and both end whole."""
    trainable = tune.with_resources(resumable, PlacementGroupFactory([{"CPU": 1, "GPU": 2}]))
    box: dict = {}
    threads = []
    for team in ("team-a", "team-b"):
        steps_file = tmp_path / f"{team}-steps"
        steps_file.touch()
        tuner = Tuner(trainable, param_space={"steps": 6, "x": tune.grid_search([0, 1, 2, 3]),
                                              "steps_file": str(steps_file)},
                      run_config=RunConfig(name=team, storage_path=str(tmp_path), verbose=0))
        threads.append(threading.Thread(target=lambda t=tuner, q=team: box.update(
            {q: raygang.tune(t, queue=q, name=q)}), daemon=True))
    held: dict[str, float] = {"team-a": 0.0, "team-b": 0.0}
    both = 0.0  # the most GPUs the two queues' trials held at one moment, while both ran
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        running = {q: sum(2 for g in raygang.list_gangs(state=raygang.GangState.RUNNING)
                          if g.queue == q) for q in held}
        if all(running.values()):
            both = max(both, sum(running.values()))
        held = {q: max(held[q], running[q]) for q in held}
        time.sleep(0.2)

    for team in ("team-a", "team-b"):
        assert not box[team].errors
        assert sorted(r.metrics["step"] for r in box[team]) == [5, 5, 5, 5]
        gangs = settled(lambda team=team: [g for g in raygang.list_gangs()
                                           if g.name.startswith(f"{team}-")])
        assert {g.queue for g in gangs} == {team}, gang_stories(gangs)
        assert all(g.state.value == "SUCCEEDED" for g in gangs), gang_stories(gangs)
    print(f"two sweeps: at most {both:g} GPUs held by both at once; each at most {held}")
    assert both >= 4, (both, held)  # side by side, each with a trial or more
    assert all(0 < gpus <= 8 for gpus in held.values()), held
    assert _live_groups() == []
    wait_until(lambda: ray.available_resources().get("GPU", 0) == 8, timeout=15)


def train_worker(config):
    for step in range(config["steps"]):
        time.sleep(0.2)
        ray.train.report({"step": step})


def train_trial(config):
    """A Train V2 trainable: the trial runs a trainer whose worker group (1 worker, 1 GPU)
    raygang queues in the sweep's queue, and reports through Tune. Trial 0 is a plain Train
    script (`trainer.fit()`: the trial's env names raygang's callback); trial 1 calls
    `raygang.train` itself, whose callback then decides alone."""
    from ray.train import RunConfig as TrainRunConfig
    from ray.train import ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    trainer = DataParallelTrainer(
        train_worker, train_loop_config={"steps": config["steps"]},
        scaling_config=ScalingConfig(num_workers=1, use_gpu=True),
        run_config=TrainRunConfig(name=f"run-{config['x']}", storage_path=config["storage"],
                                  callbacks=[TuneReportCallback()]))
    if config["x"] == 0:
        trainer.fit()
    else:
        raygang.train(trainer, queue=config["queue"])


def test_train_v2_trainables_queue_their_worker_groups(ray_cluster, tmp_path: Path):
    """Two trials, each a Train V2 run of 1 GPU, in a queue limited to 1 GPU: each trial is
    a gang (its CPU), each Train run's worker group a gang of its own in the same queue
    (one only, whether the trainable calls `raygang.train` or not); the worker groups run
    one at a time, both trials end, and nothing is left."""
    tuner = Tuner(tune.with_resources(train_trial, {"CPU": 1}),
                  param_space={"steps": 4, "x": tune.grid_search([0, 1]), "queue": "load",
                               "storage": str(tmp_path / "train")},
                  run_config=RunConfig(name="nested", storage_path=str(tmp_path), verbose=0))
    watch = GroupWatch()
    results = raygang.tune(tuner, queue="load", name="nested")
    most = watch.stop()

    assert not results.errors
    assert sorted(r.metrics["step"] for r in results) == [3, 3]
    runs = settled(lambda: [g for g in raygang.list_gangs() if g.name in ("run-0", "run-1")])
    trials = settled(lambda: [g for g in raygang.list_gangs() if g.name.startswith("nested-")])
    assert len(runs) == 2 and len(trials) == 2, gang_stories(runs + trials)
    assert all(g.state.value == "SUCCEEDED" for g in runs + trials), gang_stories(runs + trials)
    assert {g.queue for g in runs + trials} == {"load"}
    assert 0 < most <= 1, most  # the queue's limit: one worker group at a time
    assert _live_groups() == []
    wait_until(lambda: ray.available_resources().get("GPU", 0) == 8, timeout=15)


ORPHAN_DRIVER = """
import time, ray, raygang
from ray import tune
from ray.tune import PlacementGroupFactory, RunConfig, Tuner
ray.init(address={address!r})
def forever(config):
    time.sleep(3600)
tuner = Tuner(tune.with_resources(forever, PlacementGroupFactory([{{"CPU": 1, "GPU": 2}}])),
              param_space={{"x": tune.grid_search([0, 1, 2])}},
              run_config=RunConfig(name="orphan", storage_path={path!r}, verbose=0))
raygang.tune(tuner, queue="sweep", name="orphan")
"""


def test_a_dead_drivers_trials_end_in_raygang(ray_cluster, tmp_path: Path):
    """A sweep's driver killed (as a stopped Ray job's is), with 2 trials running and one
    waiting in the queue (limit 4 GPUs): none of its 3 gangs waits or holds on for a driver
    that will never claim or free them; each ends saying the Tune driver died, and nothing
    is left (the fixture checks)."""
    script = ORPHAN_DRIVER.format(address=ray_cluster.address, path=str(tmp_path))
    driver = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT,
                              env={**os.environ, "RAY_AUTH_MODE": "disabled"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def orphans():
        return [g for g in raygang.list_gangs() if g.name.startswith("orphan-")]

    try:
        wait_until(lambda: sorted(g.state.value for g in orphans())
                   == ["PENDING", "RUNNING", "RUNNING"] or driver.poll() is not None,
                   timeout=180, poll_s=0.5)
        assert driver.poll() is None, driver.stderr.read()[-3000:] if driver.stderr else ""
    finally:
        driver.kill()
        driver.wait()
    killed = time.monotonic()
    wait_until(lambda: all(g.state.finished for g in orphans()), timeout=60, poll_s=0.5)
    print(f"the dead driver's 3 trial gangs ended {time.monotonic() - killed:.1f}s after")
    gangs = orphans()
    assert all(g.state.value in ("CANCELLED", "FAILED") and "Ray Tune driver died"
               in (g.reason or "") for g in gangs), gang_stories(gangs)
    wait_until(lambda: _live_groups() == [], timeout=30)
