"""A Ray Tune sweep under raygang against the same Tuner with `max_concurrent_trials`.

    python bench/tune_sweep.py                 # 8 trials x 2 GPUs on 4 GPUs, both arms
    python bench/tune_sweep.py --repeat 3      # arms alternated 3 times
    python bench/tune_sweep.py --train         # each trial a Ray Train V2 run instead

A local cluster of 4 logical GPUs; 8 trials of {CPU 1, GPU 2} (a `PlacementGroupFactory`),
each reporting `--steps` times, `--step-s` apart; the trials of x == 0 (2 of 8) are stopped
early by Tune after their first report, as an early-stopping scheduler would. Two arms,
side by side in the same run, alternated:
- **plain**: `tuner.fit()` with `TuneConfig(max_concurrent_trials=2)`, sized by hand;
- **raygang**: `raygang.tune(tuner)`, no `max_concurrent_trials`: every trial a gang in
  the default queue, admitted as the 4 GPUs allow.
Per arm: the wall time of the sweep, the most trials holding GPUs at once (placement
groups' GPUs sampled every 0.05 s, over 2), trials completed and errored, and the
placement groups left once it returned. The ratio raygang / plain of the wall time, and
the overhead per trial (the difference over 8), are what raygang's admission costs here.

With `--train`, each trial is a Train V2 trainable instead: the trial asks Tune for a CPU
(the trainer's controller) and runs a `DataParallelTrainer` of 2 workers x 1 GPU, reporting
through Tune's `TuneReportCallback`; its worker group is the placement group that holds the
GPUs. Under raygang the worker groups wait in raygang's queue (the Train callback the
trials' env names), so no trial's worker group waits on Ray for its placement group, which
Train gives up on after `RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S` (60 s). Counted too: the
trials that failed on that time-out. The cluster has 16 logical CPUs, so that 8 trials'
controllers and the running workers' CPUs never decide how many run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout

GPUS = 4
TRIAL_GPUS = 2


def trial(config):
    from ray import tune

    for step in range(config["steps"]):
        time.sleep(config["step_s"])
        tune.report({"step": step, "x": config["x"]})


def train_worker(config):
    import ray.train

    for step in range(config["steps"]):
        time.sleep(config["step_s"])
        ray.train.report({"step": step, "x": config["x"]})


def train_trial(config):
    """A Train V2 trainable: 2 workers x 1 GPU, reporting to Tune through the trainer."""
    from ray.train import RunConfig as TrainRunConfig
    from ray.train import ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    DataParallelTrainer(
        train_worker, train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=TRIAL_GPUS, use_gpu=True),
        run_config=TrainRunConfig(name=f"run-{config['x']}-{time.monotonic_ns()}",
                                  storage_path=config["storage"],
                                  callbacks=[TuneReportCallback()])).fit()


def timed_out(error: BaseException | None) -> bool:
    """Whether a trial failed on Train's worker-group start time-out."""
    text = f"{type(error).__name__}: {error}" if error is not None else ""
    return "StartupTimeout" in text or "start timeout" in text.lower()


def stop_early(trial_id: str, result: dict) -> bool:
    return result["x"] == 0 and result["training_iteration"] >= 1


class Watch(threading.Thread):
    """The most GPUs held by placement groups at once, sampled."""

    def __init__(self):
        super().__init__(daemon=True)
        self.most = 0.0
        self.done = threading.Event()
        self.start()

    def run(self):
        while not self.done.is_set():
            self.most = max(self.most, gpus_in_groups())
            time.sleep(0.05)

    def stop(self) -> float:
        self.done.set()
        self.join()
        return self.most


def gpus_in_groups() -> float:
    from ray.util import placement_group_table

    return sum(b.get("GPU", 0) for g in placement_group_table().values()
               if g["state"] == "CREATED" for b in g["bundles"].values())


def live_groups() -> int:
    from ray.util import placement_group_table

    return sum(1 for g in placement_group_table().values() if g["state"] != "REMOVED")


def sweep(arm: str, trials: int, steps: int, step_s: float, storage: str,
          train: bool = False) -> dict:
    from ray import tune
    from ray.tune import PlacementGroupFactory, RunConfig, TuneConfig, Tuner

    import raygang

    if train:  # the trial holds a CPU; its worker group, the GPUs
        trainable = tune.with_resources(train_trial, {"CPU": 1})
    else:
        trainable = tune.with_resources(trial, PlacementGroupFactory([{"CPU": 1,
                                                                        "GPU": TRIAL_GPUS}]))
    xs = [i % 4 for i in range(trials)]  # x == 0: 2 of 8 stopped early
    space = {"x": tune.grid_search(xs), "steps": steps, "step_s": step_s}
    if train:  # where each trial's Train run keeps its checkpoints and results
        space["storage"] = storage
    tuner = Tuner(
        trainable,
        param_space=space,
        tune_config=TuneConfig(max_concurrent_trials=GPUS // TRIAL_GPUS if arm == "plain"
                               else None),
        run_config=RunConfig(name=f"{arm}-{time.monotonic_ns()}", storage_path=storage,
                             stop=stop_early, verbose=0))
    watch = Watch()
    started = time.monotonic()
    results = raygang.tune(tuner, name="sweep") if arm == "raygang" else tuner.fit()
    took = time.monotonic() - started
    most = watch.stop()
    deadline = time.monotonic() + 30
    while live_groups() and time.monotonic() < deadline:
        time.sleep(0.1)
    return {"arm": arm, "wall_s": round(took, 2), "most_running": most / TRIAL_GPUS,
            "completed": sum(1 for r in results if r.error is None),
            "errored": len(results.errors), "groups_left": live_groups(),
            "start_timeouts": sum(1 for e in results.errors if timed_out(e))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--step-s", type=float, default=0.5)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--train", action="store_true",
                        help="each trial a Train V2 run of 2 workers x 1 GPU")
    parser.add_argument("--arms", default="plain,raygang", help="which arms, in turn")
    parser.add_argument("--no-dashboard", action="store_true",
                        help="with --train: no dashboard (no state API) on the cluster")
    args = parser.parse_args(argv)

    import ray

    import raygang

    # Train V2's PlacementGroupCleaner asks the state API (the dashboard) whether a
    # stopped trial's controller is gone; without it, its worker group is never removed
    ray.init(address="local", num_cpus=16 if args.train else 4, num_gpus=GPUS,
             include_dashboard=args.train and not args.no_dashboard)
    raygang.start()
    storage = tempfile.mkdtemp(prefix="raygang-tune-bench-")
    rows = []
    for _ in range(args.repeat):
        for arm in args.arms.split(","):
            row = sweep(arm, args.trials, args.steps, args.step_s, storage, args.train)
            rows.append(row)
            print(f"[tune_sweep] {row}", file=sys.stderr, flush=True)
    arms = [a for a in ("plain", "raygang") if any(r["arm"] == a for r in rows)]
    by_arm = {arm: [r for r in rows if r["arm"] == arm] for arm in arms}
    walls = {arm: statistics.median(r["wall_s"] for r in by_arm[arm]) for arm in by_arm}
    kind = (f"Train V2 runs of {TRIAL_GPUS} workers x 1 GPU" if args.train
            else f"{TRIAL_GPUS} GPUs")
    print(f"\n{args.trials} trials x {kind} on {GPUS} GPUs, {args.steps} reports "
          f"{args.step_s:g} s apart (x == 0 stopped after 1), {args.repeat} runs per arm")
    title = {"plain": "plain (max 2)", "raygang": "raygang"}
    print(f"{'':34} | " + " | ".join(f"{title[a]:>14}" for a in arms))

    def total(key: str) -> Callable[[str], str]:
        return lambda a: str(sum(r[key] for r in by_arm[a]))

    for key, agg in (("wall s (median)", lambda a: f"{walls[a]:.1f}"),
                     ("most trials holding GPUs",
                      lambda a: f"{max(r['most_running'] for r in by_arm[a]):g}"),
                     ("trials completed (all runs)", total("completed")),
                     ("trials errored", total("errored")),
                     ("of which start time-outs", total("start_timeouts")),
                     ("placement groups left", total("groups_left"))):
        print(f"{key:34} | " + " | ".join(f"{agg(a):>14}" for a in arms))
    if len(arms) == 2:
        ratio = walls["raygang"] / walls["plain"]
        print(f"\nraygang / plain wall time: {ratio:.2f}; overhead per trial "
              f"{(walls['raygang'] - walls['plain']) / args.trials:+.2f} s")
    raygang.shutdown()


if __name__ == "__main__":
    main()
