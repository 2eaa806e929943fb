"""How fast raygang asks for nodes, and how fast the gang then runs.

    python bench/autoscale.py            # the core decision, then both modes on real Ray
    python bench/autoscale.py --core     # the core decision only (no Ray)
    python bench/autoscale.py --quick    # smaller: the core, then kuberay mode only, one
                                         # run, a gang of one member (one new node): for
                                         # tests (~15 s; the autoscaler mode's clusters and
                                         # idle waits took ~1 min, and raygang's side of it
                                         # is tests/e2e/test_scaling.py's autoscaler
                                         # scenario)

1. Core: `plan_scale` for 1,000 pending gangs (1-16 GPUs, CPU-only and TPU gangs, every
   strategy, a few no group could ever host) over 10 worker groups next to a busy
   200-node cluster, median of a few runs; side by side, `schedule()` on the same
   snapshot and gangs (the cycle the decision follows): the ratio says what scaling adds
   to a cycle.
2. `autoscaler` mode on Ray's fake multi-node provider (tests/fake_autoscaler.py): from
   submitting a gang of 2 x {GPU: 2} that needs two new nodes to (a) raygang's
   `request_resources` (seen in the GCS key-value store where Ray's autoscaler reads it),
   the first new node, and (b) the gang RUNNING (both members up, past the barrier).
   Baseline in the same run, on the same cluster: the same gang by hand, a raw placement
   group of the same bundles (which Ray's autoscaler sees as demand on its own loop) and
   one actor in each bundle; time to the first new node and to both actors answering.
3. `kuberay` mode through the loopback Kubernetes API stand-in and the test-side operator
   (tests/kuberay_operator.py): submit -> the replicas patch, submit -> RUNNING.
Target: the request within one scheduling cycle of submission (well under 1 s), against
the Ray autoscaler's 5 s update loop.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from raygang.core import (  # noqa: E402
    ClusterSnapshot,
    NodeState,
    PendingGang,
    Resources,
    PolicyConfig,
    gang_spec,
    schedule,
)
from raygang.core.scale import NodeGroup, ScalePolicy, plan_scale, scale_candidates  # noqa: E402

TARGET_REQUEST_S = 1.0
AUTOSCALER_LOOP_S = 5.0
GROUPS = [  # name, shape, max nodes
    ("cpu-8", {"CPU": 8, "memory": 32 * 2**30}, 200),
    ("cpu-32", {"CPU": 32, "memory": 128 * 2**30}, 100),
    ("cpu-96", {"CPU": 96, "memory": 384 * 2**30}, 50),
    ("gpu-1", {"CPU": 8, "GPU": 1, "memory": 64 * 2**30}, 200),
    ("gpu-2", {"CPU": 16, "GPU": 2, "memory": 128 * 2**30}, 100),
    ("gpu-4", {"CPU": 32, "GPU": 4, "memory": 256 * 2**30}, 100),
    ("gpu-8", {"CPU": 64, "GPU": 8, "memory": 512 * 2**30}, 300),
    ("gpu-8-big", {"CPU": 96, "GPU": 8, "memory": 1024 * 2**30}, 50),
    ("tpu-4", {"CPU": 24, "TPU": 4, "memory": 96 * 2**30}, 64),
    ("tpu-8", {"CPU": 48, "TPU": 8, "memory": 192 * 2**30}, 32),
]


def workload(nodes: int, pending: int, seed: int = 7):
    """A busy cluster of gpu-8 nodes and `pending` gangs of every kind."""
    rng = random.Random(seed)
    shape = Resources(GROUPS[6][1])
    cluster = []
    for i in range(nodes):
        used = Resources(CPU=rng.choice([48, 56, 64]), GPU=rng.choice([6, 7, 8]))
        cluster.append(NodeState(f"n{i:05d}", shape, shape - used,
                                 labels={"ray.io/node-group": "gpu-8"}))
    snapshot = ClusterSnapshot(tuple(cluster))
    gangs = []
    for i in range(pending):
        kind = rng.random()
        if kind < 0.15:
            roles = [{"name": "w", "replicas": rng.choice([1, 2, 4]),
                      "resources": {"CPU": rng.choice([2, 8, 30])}}]
        elif kind < 0.22:
            roles = [{"name": "w", "replicas": rng.choice([1, 2]),
                      "resources": {"CPU": 8, "TPU": rng.choice([4, 8])}}]
        elif kind < 0.23:  # no group has 16 GPUs on one node: infeasible
            roles = [{"name": "w", "replicas": 2, "resources": {"GPU": 8, "CPU": 8}}]
        else:
            per = rng.choice([1, 1, 2, 4, 8])
            roles = [{"name": "w", "replicas": rng.choice([1, 2, 4]) if per < 8 else
                      rng.choice([1, 2]), "resources": {"GPU": per, "CPU": 4 * per}}]
        strategy = rng.choice(["PACK", "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"])
        if kind >= 0.22 and kind < 0.23:
            strategy = "STRICT_PACK"
        spec = gang_spec(f"gang {i}", name=f"g{i}", roles=roles, strategy=strategy)
        gangs.append(PendingGang(f"g{i:05d}", spec, 100, i))
    groups = [NodeGroup(name, Resources(s), 0, top, nodes if name == "gpu-8" else 0)
              for name, s, top in GROUPS]
    node_groups = {n.node_id: "gpu-8" for n in cluster}
    return snapshot, gangs, groups, node_groups


def median_time(fn, runs: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def core(quick: bool) -> None:
    nodes, pending, runs = (50, 200, 1) if quick else (200, 1000, 5)
    snapshot, gangs, groups, node_groups = workload(nodes, pending)
    config = PolicyConfig()
    t_schedule, plan = median_time(lambda: schedule(snapshot, gangs, config, 0.0), runs)
    by_id = {g.gang_id: g for g in gangs}
    waiting = scale_candidates(plan, by_id.get, config)
    scale_config = ScalePolicy(idle_timeout_s=300)
    t_scale, scale = median_time(
        lambda: plan_scale(snapshot, waiting, groups, node_groups, {}, (), scale_config, 0.0),
        runs)
    added = {g.name: scale.desired[g.name] - g.nodes for g in groups
             if scale.desired[g.name] > g.nodes}
    print(f"core: {nodes} busy gpu-8 nodes, {pending} pending gangs, {len(groups)} worker "
          f"groups; {len(waiting)} gangs waiting for nodes after the cycle")
    print(f"  plan_scale   {t_scale * 1e3:8.1f} ms  (median of {runs}); nodes added: "
          + ", ".join(f"{n}×{g}" for g, n in sorted(added.items())))
    print(f"  schedule     {t_schedule * 1e3:8.1f} ms  (the cycle before it, same gangs)")
    print(f"  scale / schedule: {t_scale / t_schedule:.2f}x; gangs given nodes "
          f"{len(scale.waiting_for)}, at max {len(scale.at_max)}, infeasible "
          f"{len(scale.infeasible)}")
    print(f"target decision < {TARGET_REQUEST_S:g} s: "
          f"{'met' if t_scale < TARGET_REQUEST_S else 'NOT met'} ({t_scale:.3f} s)")


def gpu_gang(name: str, members: int):
    """The gang every run submits: `members` x {GPU: 2, CPU: 1}, one per node (a node of
    the `gpu` group has 2 GPUs), each sleeping 0.5 s (tests.e2e.scaling_scenarios.gpu_gang
    with `members`)."""
    import raygang
    from raygang import demo

    task = raygang.gang_task(demo.sleep, name=name, replicas=members, num_gpus=2, num_cpus=1,
                             strategy="SPREAD")
    return task.remote(seconds=0.5)


def autoscaler_mode(runs: int, interval_s: int, members: int) -> dict:
    """raygang (autoscaler mode) and a raw placement group, alternately, on one cluster
    scaled by Ray's autoscaler. Each run starts with no worker node up."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    import raygang
    from tests.e2e import scaling_scenarios as sc
    from tests.fake_autoscaler import FakeAutoscalingCluster

    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    @ray.remote(num_gpus=2, num_cpus=1)
    class Member:  # what a raw gang member is: an actor in its bundle, up and answering
        def ready(self) -> bool:
            return True

    types = {"gpu": {"resources": {"CPU": 2, "GPU": 2}, "min_workers": 0, "max_workers": 4}}
    rows: dict[str, list[tuple[float, ...]]] = {"raygang": [], "raw": []}
    with FakeAutoscalingCluster(head_resources={"CPU": 2}, worker_node_types=types,
                                idle_timeout_minutes=sc.IDLE_TIMEOUT_S / 60,
                                update_interval_s=interval_s) as cluster:
        ray.init(address=cluster.address)
        try:
            raygang.start(raygang.SchedulerConfig.model_validate({"scaling": {
                "mode": "autoscaler", "idle_timeout_s": sc.IDLE_TIMEOUT_S,
                "scale_down_delay_s": sc.AUTOSCALER_HOLD_S,
                "node_types": [{"name": "gpu", "resources": {"CPU": 2, "GPU": 2},
                                "max_nodes": 4}]}}))
            sc.scaler_ready()  # timed: a submission to a running scaler, not its start
            for i in range(runs):
                t0 = time.monotonic()
                ref = gpu_gang(f"bench-{i}", members)
                sc.wait_until(sc.resource_request, 30, "the request", step=0.005)
                t_request = time.monotonic() - t0
                sc.wait_until(lambda: sc.alive_in_group("gpu"), 120, "a node", step=0.02)
                t_node = time.monotonic() - t0
                ref.ready(timeout=120)
                rows["raygang"].append((t_request, t_node, time.monotonic() - t0))
                ref.wait(timeout=60)
                sc.wait_until(lambda: sc.alive_in_group("gpu") == 0, 120, "nodes gone", 0.2)

                t0 = time.monotonic()
                pg = placement_group([{"GPU": 2, "CPU": 1}] * members, strategy="SPREAD")
                sc.wait_until(lambda: sc.alive_in_group("gpu"), 120, "a node", step=0.02)
                t_node = time.monotonic() - t0
                ray.get(pg.ready(), timeout=120)
                members = [Member.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
                    pg, placement_group_bundle_index=b)).remote() for b in range(members)]
                ray.get([m.ready.remote() for m in members], timeout=120)
                rows["raw"].append((float("nan"), t_node, time.monotonic() - t0))
                for member in members:
                    ray.kill(member)
                remove_placement_group(pg)
                if i < runs - 1:  # the next run starts with no worker node up
                    sc.wait_until(lambda: sc.alive_in_group("gpu") == 0, 120, "nodes gone",
                                  0.2)
        finally:
            raygang.shutdown()
            ray.shutdown()
    return rows


def kuberay_mode(runs: int, members: int) -> list[tuple[float, ...]]:
    """raygang (kuberay mode) through the API stand-in and the test-side operator."""
    import tempfile

    import ray
    from ray.cluster_utils import Cluster

    import raygang
    from tests.e2e import scaling_scenarios as sc
    from tests.kube_standin import KubeStandIn
    from tests.kuberay_operator import FakeKubeRayOperator

    rows = []
    with tempfile.TemporaryDirectory() as tmp, KubeStandIn() as kube:
        kube.create(sc.NS, sc.raycluster(gpu_max=4))
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 2, "num_gpus": 0, "include_dashboard": False})
        operator = FakeKubeRayOperator(kube, cluster, sc.NS, sc.NAME, poll_s=0.05)
        try:
            ray.init(address=cluster.address)
            operator.start()
            raygang.start(raygang.SchedulerConfig.model_validate({"scaling": {
                "mode": "kuberay", "raycluster": sc.NAME, "namespace": sc.NS,
                "kubeconfig": sc.kubeconfig(kube.url, tmp),
                "idle_timeout_s": sc.IDLE_TIMEOUT_S, "scale_down_delay_s": 0}}))

            def replicas() -> int:
                return kube.get(sc.NS, sc.NAME)["spec"]["workerGroupSpecs"][1]["replicas"]

            sc.scaler_ready()  # timed: a submission to a running scaler, not its start
            for i in range(runs):
                t0 = time.monotonic()
                ref = gpu_gang(f"bench-{i}", members)
                sc.wait_until(lambda: replicas() == members, 30, "the patch", step=0.005)
                t_request = time.monotonic() - t0
                sc.wait_until(lambda: operator.pods("gpu"), 120, "a pod", step=0.02)
                t_node = time.monotonic() - t0
                ref.ready(timeout=120)
                rows.append((t_request, t_node, time.monotonic() - t0))
                ref.wait(timeout=60)
                if i < runs - 1:  # the next run starts with no worker pod up
                    sc.wait_until(lambda: not operator.pods("gpu"), 120, "pods gone", 0.2)
        finally:
            raygang.shutdown()
            operator.stop()
            ray.shutdown()
            cluster.shutdown()
    return rows


def live(quick: bool) -> None:
    import os

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # local test clusters: no token
    runs, interval, members = (1, 1, 1) if quick else (3, 5, 2)
    med = lambda rows, i: statistics.median(r[i] for r in rows)  # noqa: E731
    raw = None
    if quick:
        print("autoscaler mode: not run (--quick)")
        worst = 0.0
    else:
        auto = autoscaler_mode(runs, interval, members)
        mine, raw = auto["raygang"], auto["raw"]
        worst = max(r[0] for r in mine)
        nodes = "2 new nodes" if members == 2 else f"{members} new node(s)"
        print(f"autoscaler mode: Ray's autoscaler (v1, fake multi-node provider, update "
              f"loop {interval} s), gang {members} x {{GPU: 2, CPU: 1}} needing {nodes}, "
              f"median of {runs}")
        print("                        request   first node    running")
        print(f"  raygang gang          {med(mine, 0):6.2f} s     {med(mine, 1):6.2f} s   "
              f"{med(mine, 2):6.2f} s")
        label = f"raw PG + {members} actor{'s' if members > 1 else ''}"
        print(f"  {label:<17}          -      {med(raw, 1):6.2f} s   {med(raw, 2):6.2f} s")
        print(f"  raygang / raw, time to running: {med(mine, 2) / med(raw, 2):.2f}x")
    kube = kuberay_mode(runs, members)
    worst = max(worst, max(r[0] for r in kube))
    print(f"kuberay mode: API stand-in + test operator (nodes are local raylets), median of "
          f"{runs}")
    print("                        request   first node    running")
    print(f"  raygang gang          {med(kube, 0):6.2f} s     {med(kube, 1):6.2f} s   "
          f"{med(kube, 2):6.2f} s")
    if raw is not None:
        print(f"  kuberay-mode raygang / raw PG + actors under Ray's autoscaler, time to "
              f"running: {med(kube, 2) / med(raw, 2):.2f}x")
    print(f"target request < {TARGET_REQUEST_S:g} s after submission (one cycle), against "
          f"the autoscaler's {AUTOSCALER_LOOP_S:g} s loop: "
          f"{'met' if worst < TARGET_REQUEST_S else 'NOT met'} (worst {worst:.2f} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--core", action="store_true", help="the core decision only")
    parser.add_argument("--quick", action="store_true", help="small sizes, for tests")
    args = parser.parse_args(argv)
    core(args.quick)
    if not args.core:
        live(args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
