"""How fast raygang asks for nodes, and how fast the gang then runs.

    python bench/autoscale.py            # the core decision, then both modes on real Ray
    python bench/autoscale.py --core     # the core decision only (no Ray)
    python bench/autoscale.py --quick    # smaller and fewer runs, for tests

1. Core: `plan_scale` for 1,000 pending gangs (1-16 GPUs, CPU-only and TPU gangs, every
   strategy, a few no group could ever host) over 10 worker groups next to a busy
   200-node cluster, median of a few runs; side by side, `schedule()` on the same
   snapshot and gangs (the cycle the decision follows): the ratio says what scaling adds
   to a cycle.
2. `autoscaler` mode on Ray's fake multi-node provider (tests/fake_autoscaler.py): from
   submitting a gang of 2 x {GPU: 2} that needs two new nodes to (a) raygang's
   `request_resources` (seen in the GCS key-value store where Ray's autoscaler reads it)
   and (b) the gang RUNNING. Baseline in the same run, on the same cluster: a raw placement
   group of the same bundles, which Ray's autoscaler sees as demand on its own loop; time
   to the autoscaler seeing it (its first launch) and to the placement group ready.
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
    SchedulerConfig,
    gang_spec,
    schedule,
)
from raygang.core.scale import NodeGroup, ScaleConfig, plan_scale, scale_candidates  # noqa: E402

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
    nodes, pending, runs = (50, 200, 3) if quick else (200, 1000, 5)
    snapshot, gangs, groups, node_groups = workload(nodes, pending)
    config = SchedulerConfig()
    t_schedule, plan = median_time(lambda: schedule(snapshot, gangs, config, 0.0), runs)
    waiting = scale_candidates(gangs, plan, config)
    scale_config = ScaleConfig(idle_timeout_s=300)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--core", action="store_true", help="the core decision only")
    parser.add_argument("--quick", action="store_true", help="small sizes, for tests")
    args = parser.parse_args(argv)
    core(args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
