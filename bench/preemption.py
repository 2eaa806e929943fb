"""Preemption latency: a Serve deployment takes GPUs from running training, end to end.

The cluster (one node, 8 virtual GPUs) is full of 8 low-priority training gangs of 1 GPU
each (`priority="batch"`, `preemption_grace_s=0`). Then an inference deployment is
submitted with `raygang.deploy`: first one needing 1 GPU, then one needing half the
cluster (4 GPUs). Measured from submission:

- reserve: until the deployment's capacity is reserved (its placement group is ready: the
  RESERVED event of the gang, scheduler clock) — the figure KAI Scheduler publishes as
  "reclaim time" (13.9 s average for one GPU); target under 1.4 s;
- answer: until the Serve application answers an HTTP request.

Baseline, same cluster, same run: the same preemption done by hand with raw Ray (kill the
victims' actors, remove their placement groups, create the preemptor's placement group,
wait until ready) — the floor raygang's bookkeeping adds to. After each run the
deployment is undeployed and the requeued training gangs run again before the next run.

Shrink vs preempt (elastic gangs): the 8 GPUs are held by one batch training gang, either
elastic (`replicas=(4, 8)`, grown to 8) or rigid (8 members), running 3 s; then a 4-GPU
inference deployment arrives. The elastic gang gives up its surplus and runs on at 4
(nothing restarts); the rigid one is stopped whole and requeued, and loses the work since
its last checkpoint (here it keeps none: 8 GPUs x the seconds it ran). Reported: time to
reserved as above, whether the training gang was stopped, the GPU-seconds lost.

    python bench/preemption.py           # 5 runs per size, ~3 minutes here
    python bench/preemption.py --quick   # 2 GPUs (size 1, elastic 1..2, rigid 2), 1 run
                                         # of each, the training gang works 1 s: every
                                         # kind of figure, for tests
    python bench/preemption.py --address HOST:PORT   # an existing cluster and its
                                         # scheduler (left running; no Serve running there):
                                         # a placement group holds its GPUs beyond 8 (2)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import urllib.request

import ray
from ray import serve
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

import raygang
from raygang import GangState
from raygang.runtime import serving

GPUS = 8
QUICK_GPUS = 2
KAI_RECLAIM_S = 13.9
TARGET_S = 1.4


@raygang.gang_task(num_gpus=1, num_cpus=0, priority="batch", preemption_grace_s=0)
def training() -> None:
    while True:
        time.sleep(1)


@serve.deployment(graceful_shutdown_timeout_s=1)
class Echo:
    async def __call__(self, request) -> str:
        return "ok"


@raygang.gang_task(role="worker", num_gpus=1, num_cpus=0, priority="batch",
                   preemption_grace_s=0)
def elastic_training() -> None:
    while True:
        time.sleep(1)


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise TimeoutError(what)
        time.sleep(0.02)


def _all_running(refs) -> bool:
    return all(r.status().state is GangState.RUNNING for r in refs)


def run_raygang(size: int, run: int, port: int, fillers) -> tuple[float, float]:
    _wait(lambda: _all_running(fillers), 120, "training gangs back to RUNNING")
    name = f"bench-{size}-{run}"
    started = time.time()
    ref = raygang.deploy(name, Echo.bind(), replicas=size, num_gpus=1)

    def reserved_at() -> float | None:
        for event in ref.status().events:
            if event.to_state is GangState.RESERVED:
                return event.at
        return None

    _wait(lambda: reserved_at() is not None, 60, f"{name} reserved")
    reserve = reserved_at() - ref.status().submitted_at

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/{name}", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    _wait(answers, 120, f"{name} answers HTTP")
    answer = time.time() - started
    raygang.undeploy(name)
    return reserve, answer


def run_resize(elastic: bool, run: int, gpus: int,
               works_s: float) -> tuple[float, bool, float, int]:
    """(reserve s, the training gang stopped, GPU-seconds lost, its members after)."""
    if elastic:
        gang = elastic_training.options(name=f"elastic-{run}",
                                        replicas=(gpus // 2, gpus)).remote()
    else:
        gang = training.options(name=f"rigid-{run}", replicas=gpus).remote()
    _wait(lambda: (s := gang.status()).state is GangState.RUNNING and s.world_size == gpus,
          120, f"training at {gpus} members")
    time.sleep(works_s)  # it works a while before the deployment arrives
    name = f"resize-{run}-{int(elastic)}"
    ref = raygang.deploy(name, Echo.bind(), replicas=gpus // 2, num_gpus=1)

    def reserved_at() -> float | None:
        return next((e.at for e in ref.status().events if e.to_state is GangState.RESERVED),
                    None)

    _wait(lambda: reserved_at() is not None, 60, f"{name} reserved")
    reserve = reserved_at() - ref.status().submitted_at
    status = gang.status()
    stopped = status.preemptions > 0
    # Stopped whole: every member's work since its start (no checkpoint); shrunk: the
    # members staying run on, and the ones removed leave no work behind (data-parallel).
    lost = gpus * (reserved_at() - status.started_at) if stopped and status.started_at else 0.0
    members = 0 if stopped else status.world_size
    raygang.undeploy(name)
    gang.cancel()
    return reserve, stopped, lost, members


@ray.remote(num_gpus=1, num_cpus=0)
class RawTraining:
    def ping(self) -> None:
        pass


def _raw_victim() -> tuple:
    pg = placement_group([{"GPU": 1}])
    actor = RawTraining.options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
    ).remote()
    return pg, actor


def run_raw(size: int, victims: list) -> float:
    """Stop `size` victims by hand and reserve their GPUs for the preemptor. Victims
    stopped by the run before (None) come back first: every GPU runs training."""
    victims[:] = [victim or _raw_victim() for victim in victims]
    ray.get([actor.ping.remote() for _, actor in victims])

    async def preempt() -> float:
        started = time.perf_counter()
        for pg, actor in victims[:size]:
            ray.kill(actor)
            remove_placement_group(pg)
        pg = placement_group([{"GPU": 1}] * size, strategy="PACK")
        await pg.ready()
        elapsed = time.perf_counter() - started
        remove_placement_group(pg)
        return elapsed

    elapsed = asyncio.run(preempt())
    victims[:size] = [None] * size
    return elapsed


def hold_the_rest(gpus: int):
    """A placement group holding a joined cluster's GPUs beyond `gpus` for the whole run
    (raygang counts what it did not start as used), so that the training gangs fill the
    rest; None if there are none."""
    extra = int(ray.cluster_resources().get("GPU", 0)) - gpus
    if extra < 0:
        raise SystemExit(f"the cluster has fewer than {gpus} GPUs")
    if not extra:
        return None
    pg = placement_group([{"GPU": 1}] * extra, strategy="PACK")
    ray.get(pg.ready(), timeout=60)
    return pg


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5, help="runs per preemptor size")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_GPUS} GPUs, 1 run per size, the training gang works 1 s")
    parser.add_argument("--address", help="an existing cluster instead of a new one")
    args = parser.parse_args()
    runs = 1 if args.quick else args.runs
    works_s = 1.0 if args.quick else 3.0
    gpus = QUICK_GPUS if args.quick else GPUS
    sizes = sorted({1, gpus // 2})  # one GPU, and half the cluster (the same at 2 GPUs)

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local cluster
    if args.address:
        ray.init(address=args.address, log_to_driver=False)
    else:  # address="local": always a new cluster, never one a stale /tmp/ray file points to
        ray.init(address="local", num_cpus=4, num_gpus=gpus, include_dashboard=False,
                 log_to_driver=False)
    held = hold_the_rest(gpus)
    raygang.start()
    fillers: list = []
    victims: list = [None] * gpus
    try:
        # The training gangs start while Serve does; each run waits until all of them run.
        fillers = [training.options(name=f"train-{i}").remote() for i in range(gpus)]
        port = serving.serve_on_a_free_port()
        measured = {size: [run_raygang(size, run, port, fillers) for run in range(runs)]
                    for size in sizes}
        for ref in fillers:
            ref.cancel()
        resized = {elastic: [run_resize(elastic, run, gpus, works_s) for run in range(runs)]
                   for elastic in (True, False)}
        raw = {size: [run_raw(size, victims) for _ in range(runs)] for size in sizes}
    finally:  # whatever happened, nothing of the bench is left in a cluster it joined
        for ref in fillers:
            ref.cancel()
        for pg, actor in filter(None, victims):
            ray.kill(actor)
            remove_placement_group(pg)
        if held is not None:
            remove_placement_group(held)

    print(f"preemption: {gpus} GPUs full of {gpus} batch training gangs (1 GPU each, grace 0);"
          f" an inference deployment preempts them; median of {runs} run(s)")
    print(f"{'preemptor':>12}  {'raygang reserve s':>17}  {'raw Ray s':>9}  {'ratio':>6}  "
          f"{'answers HTTP s':>14}")
    worst = 0.0
    for size in sizes:
        reserve = statistics.median(r for r, _ in measured[size])
        answer = statistics.median(a for _, a in measured[size])
        floor = statistics.median(raw[size])
        worst = max(worst, reserve)
        print(f"{f'{size} GPU':>12}  {reserve:>17.2f}  {floor:>9.2f}  {reserve / floor:>5.2f}x  "
              f"{answer:>14.2f}")
    verdict = "met" if worst < TARGET_S else "NOT met"
    print(f"target reserve < {TARGET_S} s (KAI Scheduler publishes {KAI_RECLAIM_S} s for one "
          f"GPU): {verdict} (worst median {worst:.2f} s, {KAI_RECLAIM_S / worst:.1f}x faster)")
    print(f"shrink vs preempt: {gpus} GPUs held by one batch training gang, elastic "
          f"({gpus // 2} to {gpus} members) or rigid ({gpus}); a {gpus // 2}-GPU inference "
          f"deployment takes half; median of {runs} run(s)")
    print(f"{'training gang':>16}  {'reserve s':>9}  {'stopped':>7}  {'GPU-s lost':>10}  "
          f"{'members after':>13}")
    for elastic in (True, False):
        rows = resized[elastic]
        label = f"elastic {gpus // 2}..{gpus}" if elastic else f"rigid {gpus}"
        print(f"{label:>16}  {statistics.median(r for r, *_ in rows):>9.2f}  "
              f"{sum(s for _, s, *_ in rows):>3}/{len(rows):<3}  "
              f"{statistics.median(x for *_, x, _ in rows):>10.1f}  "
              f"{statistics.median(m for *_, m in rows):>13g}")
    if not args.address:  # a joined cluster keeps its scheduler
        raygang.shutdown()
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
