"""A Serve application of several deployments under contention: raygang against plain Serve.

    python bench/compound.py                       # 50 runs with raygang, 10 with plain Serve
    python bench/compound.py --runs 5 --serve-runs 2

The application is examples/disaggregated_serve_app.py's: a router (no GPU), 2 prefill
replicas of 1 GPU and a decode replica of 2 GPUs (tensor parallel 2, one placement group
of 2 bundles, STRICT_PACK): 4 GPUs in all, on a local cluster of 4 logical GPUs. In each
run a training gang of 2 x 1 GPU runs for T seconds (3 to 10, seeded); a second after it
started, the application is deployed, either with `raygang.deploy` at the training
gang's priority or with plain `serve.run`. The 2 free GPUs have room for one role only
(both prefill replicas, or the decode replica). Every 0.2 s until the application is
RUNNING and has answered a request through its router, the bench reads the GPUs free, the
GPUs the training gang's placement group holds, and Serve's status; the application holds
what is neither. Per run:
- **half admitted**: a sample where the application holds some of its 4 GPUs, not all,
  while the training gang holds the rest of the cluster (it took the room left, and
  waits for more);
- **half-held seconds**: how long it held GPUs that way (they serve nothing);
- **held before serving**: seconds the application holds GPUs before it serves, its
  replicas' start included; how many runs are over 5 s;
- **serving after the room freed**: from the training gang's end to the application's
  first answer.
After each run the application and the gang are removed and the cluster must be back as it
was: no `raygang-` placement group, every GPU free (else the run counts a leak).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout
sys.path.insert(0, str(ROOT / "examples"))

GPUS = 4
APP_GPUS = 4  # prefill 2 x 1 + decode 1 x 2
TRAINING_GPUS = 2
SAMPLE_S = 0.2
HELD_TOO_LONG_S = 5.0


@dataclass
class Sample:
    at: float  # seconds since the application was deployed
    app_gpus: float  # GPUs the application holds
    serving: bool  # Serve says the application is RUNNING
    training_gpus: float  # GPUs the training gang's placement group holds


@dataclass
class Run:
    arm: str
    training_s: float
    samples: list[Sample] = field(default_factory=list)
    training_ended_at: float | None = None  # since deployed
    answered_at: float | None = None  # since deployed: the first request through the router
    leaked: str = ""


def tally(run: Run) -> dict:
    """What one run's samples show (see the module's docstring)."""
    half_admitted = False
    half_held = held_before_serving = 0.0
    for before, sample in zip(run.samples, run.samples[1:]):
        dt = sample.at - before.at
        if before.training_gpus > 0 and 0 < before.app_gpus < APP_GPUS - 1e-9:
            half_admitted = True
            half_held += dt
        if before.app_gpus > 0 and not before.serving:
            held_before_serving += dt
    after_room = None
    if run.answered_at is not None and run.training_ended_at is not None:
        after_room = run.answered_at - run.training_ended_at
    return {"arm": run.arm, "training_s": round(run.training_s, 1),
            "half_admitted": half_admitted, "half_held_s": round(half_held, 1),
            "held_before_serving_s": round(held_before_serving, 1),
            "serving_after_room_s": None if after_room is None else round(after_room, 1),
            "answered": run.answered_at is not None, "leaked": run.leaked}


def summary(rows: list[dict]) -> dict:
    def spread(values: list[float]) -> str:
        if not values:
            return "-"
        return (f"{statistics.mean(values):.1f} / {statistics.median(values):.1f} / "
                f"{max(values):.1f}")

    return {
        "runs": len(rows),
        "answered": sum(r["answered"] for r in rows),
        "half admitted (runs)": sum(r["half_admitted"] for r in rows),
        "half-held s (mean / p50 / max)": spread([r["half_held_s"] for r in rows]),
        f"runs half-held > {HELD_TOO_LONG_S:g} s": sum(
            r["half_held_s"] > HELD_TOO_LONG_S for r in rows),
        "held before serving s (mean / p50 / max)": spread(
            [r["held_before_serving_s"] for r in rows]),
        f"runs held before serving > {HELD_TOO_LONG_S:g} s": sum(
            r["held_before_serving_s"] > HELD_TOO_LONG_S for r in rows),
        "serving after the room freed s (mean / p50 / max)": spread(
            [r["serving_after_room_s"] for r in rows if r["serving_after_room_s"] is not None]),
        "leaks": sum(bool(r["leaked"]) for r in rows),
    }


def one_run(arm: str, training_s: float, app, training) -> Run:
    import ray
    from ray import serve

    import raygang

    run = Run(arm=arm, training_s=training_s)
    gang = training.remote(training_s)
    wait_state(gang, ("RUNNING",), 120)
    time.sleep(1.0)
    deployed_at = time.monotonic()
    if arm == "raygang":
        raygang.deploy("pd", app, priority="training")
    else:  # serve.run returns once the application is RUNNING: sampled meanwhile
        deploying = threading.Thread(target=serve.run, args=(app,), daemon=True,
                                     kwargs={"name": "pd", "route_prefix": "/pd"})
        deploying.start()
    deadline = deployed_at + 240
    while time.monotonic() < deadline:
        at = time.monotonic() - deployed_at
        training_gpus = gpus_of(f"raygang-{gang.gang_id}")
        if not training_gpus and run.training_ended_at is None:
            run.training_ended_at = at
        free = ray.available_resources().get("GPU", 0.0)
        app_status = serve.status().applications.get("pd")
        serving = app_status is not None and app_status.status.value == "RUNNING"
        held = GPUS - free - training_gpus
        run.samples.append(Sample(at, max(held, 0.0), serving, training_gpus))
        if serving and answers():
            run.answered_at = time.monotonic() - deployed_at
            break
        time.sleep(SAMPLE_S)
    if arm == "raygang":
        raygang.undeploy("pd")
    else:
        deploying.join(timeout=60)  # its wait for RUNNING ends before the app goes
        serve.delete("pd")
    gang.cancel()
    run.leaked = leftovers()
    return run


def gpus_of(name: str) -> float:
    """GPUs in the CREATED placement groups named `name`."""
    from ray.util import placement_group_table

    return sum(b.get("GPU", 0) for g in placement_group_table().values()
               if g["name"] == name and g["state"] == "CREATED"
               for b in g["bundles"].values())


def answers() -> bool:
    try:
        with urllib.request.urlopen("http://127.0.0.1:8000/pd?prompt=gang", timeout=10) as r:
            return json.loads(r.read())["text"] == "gnag"
    except Exception:  # noqa: BLE001 - not serving yet
        return False


def wait_state(gang, states: tuple[str, ...], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (state := gang.status().state.value) not in states:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{gang.gang_id} still {state}")
        time.sleep(0.1)


def leftovers(timeout: float = 60.0) -> str:
    """'' once no raygang- placement group is left and every GPU is free; else what is."""
    import ray

    deadline = time.monotonic() + timeout
    while True:
        groups = [pg["name"] for pg in ray.util.placement_group_table().values()
                  if pg["name"].startswith("raygang-") and pg["state"] != "REMOVED"]
        free = ray.available_resources().get("GPU", 0.0)
        if not groups and free == GPUS:
            return ""
        if time.monotonic() > deadline:
            return f"groups {groups}, {free:g} of {GPUS} GPUs free"
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="runs with raygang")
    parser.add_argument("--serve-runs", type=int, default=10, help="runs with plain Serve")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write every run's row here")
    args = parser.parse_args(argv)

    import ray
    from ray import serve

    import disaggregated_serve_app as example
    import raygang

    # The example's deployments are pickled by value (this process imports it by name,
    # Serve's replicas and the scheduler actor cannot)
    ray.cloudpickle.register_pickle_by_value(example)
    ray.init(address="local", num_cpus=4, num_gpus=GPUS, include_dashboard=False)
    raygang.start()

    @raygang.gang_task(replicas=TRAINING_GPUS, num_gpus=1, num_cpus=0, name="training")
    def training(seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    rng = random.Random(args.seed)
    arms = ["raygang"] * args.runs + ["serve"] * args.serve_runs
    rows = []
    started = time.monotonic()
    for i, arm in enumerate(arms):
        row = tally(one_run(arm, rng.uniform(3.0, 10.0), example.app, training))
        rows.append(row)
        print(f"[compound {time.monotonic() - started:6.0f}s] run {i + 1}/{len(arms)}: "
              f"{json.dumps(row)}", file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    table = {arm: summary([r for r in rows if r["arm"] == arm]) for arm in ("raygang", "serve")}
    print(f"\n{'':48} | {'raygang':>18} | {'plain Serve':>18}")
    for key in table["raygang"]:
        print(f"{key:48} | {table['raygang'][key]!s:>18} | {table['serve'][key]!s:>18}")
    print(f"\n{len(arms)} runs in {time.monotonic() - started:.0f} s")
    raygang.shutdown()
    serve.shutdown()


if __name__ == "__main__":
    main()
