"""Benchmark one scheduling cycle of `raygang.core.schedule` on a large synthetic cluster.

    python bench/core_cycle.py            # 1,000 nodes x 8 GPUs, 10,000 pending gangs
    python bench/core_cycle.py --quick    # small and fast, for tests

Prints the cycle time and gang decisions per second with backfill off (strict FIFO per
queue), bounded (`backfill_lookahead` 4) and on (best-effort lines: the default), best of
a few repeats, and, side by side, a naive reference on a bounded subset of the same queue:
the same greedy placement, but every search scans every node (no equivalence classes of
identical free vectors) and every gang is searched again (no per-cycle cache of shapes
that did not fit). The reference must reach the same decisions; the ratio is reported
per decision.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from raygang.core import (  # noqa: E402
    Admission,
    Capacity,
    ClusterSnapshot,
    NodeState,
    PendingGang,
    Resources,
    PolicyConfig,
    Strategy,
    gang_spec,
    place,
    schedule,
    why_not,
)

TARGET_DECISIONS_PER_S = 5_000
GIB = 2**30
NODE = {"GPU": 8, "CPU": 96, "memory": 1024 * GIB}
# Workers take CPU and memory in proportion to their GPUs; CPU-only roles take a little.
STRATEGY_WEIGHTS = {
    Strategy.PACK: 40, Strategy.STRICT_PACK: 25, Strategy.SPREAD: 15, Strategy.STRICT_SPREAD: 20
}
PRIORITY_WEIGHTS = {1000: 10, 100: 60, 10: 30}


# Workload ---------------------------------------------------------------------------------

def synthetic_cluster(n_nodes: int, rng: random.Random) -> ClusterSnapshot:
    """Identical 8-GPU nodes; a third of them already partly used by other work."""
    nodes = []
    width = len(str(n_nodes))
    for i in range(n_nodes):
        used_gpus = rng.choice([2, 4, 6, 8]) if rng.random() < 1 / 3 else 0
        share = (NODE["GPU"] - used_gpus) / NODE["GPU"]
        total = Resources(NODE)
        free = Resources({k: v * share for k, v in NODE.items()})
        node_id = f"node-{i:0{width}d}"
        nodes.append(NodeState(node_id, total, free, name=node_id))
    return ClusterSnapshot(tuple(nodes))


def synthetic_queue(n_gangs: int, rng: random.Random) -> list[PendingGang]:
    """Gangs of 1-16 members, all four strategies, mixed priorities; specs are validated."""
    strategies, s_weights = zip(*STRATEGY_WEIGHTS.items())
    priorities, p_weights = zip(*PRIORITY_WEIGHTS.items())
    out = []
    for i in range(n_gangs):
        strategy = rng.choices(strategies, s_weights)[0]
        if strategy is Strategy.STRICT_PACK:
            members = rng.choice([1, 2, 4, 8])
            gpus = rng.choice([g for g in (1, 2, 4, 8) if g * members <= 8] or [1])
        else:
            members = rng.randint(1, 16)
            gpus = rng.choice([1, 1, 2, 4])
        worker = {"GPU": gpus, "CPU": 8 * gpus, "memory": 96 * GIB * gpus}
        roles = [{"name": "worker", "replicas": members, "resources": worker}]
        if members > 1 and rng.random() < 0.3:  # a driver / router beside the workers
            roles[0]["replicas"] = members - 1
            roles.insert(0, {"name": "driver", "resources": {"CPU": 2, "memory": 8 * GIB}})
            roles[1]["after"] = ["driver"]
        name = f"gang-{i:05d}"
        spec = gang_spec(name, name=name, roles=roles, strategy=strategy)
        out.append(PendingGang(name, spec, rng.choices(priorities, p_weights)[0], seq=i))
    return out


# Naive reference ----------------------------------------------------------------------------

class NodeScanCapacity(Capacity):
    """Capacity without equivalence classes: every search looks at every node."""

    def classes(self):
        return ((self.free(n), [n]) for n in self.node_ids)

    def best_node(self, demand, *, exclude=frozenset(), among=None):
        best = None
        for node_id in self.node_ids if among is None else among:
            free = self.free(node_id)
            if node_id in exclude or not demand.fits_in(free):
                continue
            key = (self.leftover_key(free, demand), node_id)
            if best is None or key < best:
                best = key
        return None if best is None else best[1]


def naive_schedule(
    snapshot: ClusterSnapshot, pending: Sequence[PendingGang], backfill: bool
) -> tuple[tuple[Admission, ...], Counter]:
    """The same cycle, straightforwardly: search each gang, explain each waiting gang."""
    capacity = NodeScanCapacity(snapshot.alive_nodes)
    empty = NodeScanCapacity(snapshot.alive_nodes, use_totals=True)
    admissions, codes, blocked = [], Counter(), False
    for gang in sorted(pending, key=PendingGang.order_key):
        if blocked and not backfill:
            codes["BEHIND"] += 1
            continue
        nodes = place(gang.bundles, gang.strategy, capacity)
        if nodes is None:
            ever = place(gang.bundles, gang.strategy, empty) is not None
            blocked = blocked or ever
            why_not(gang.bundles, gang.strategy, capacity if ever else empty)
            codes["NO_FIT" if ever else "UNSCHEDULABLE"] += 1
            continue
        capacity.reserve(zip(nodes, gang.bundles))
        admissions.append(Admission(gang.gang_id, nodes))
    return tuple(admissions), codes


# Measurement --------------------------------------------------------------------------------

def best_of(repeats: int, run) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return best, result


def summary(codes: Iterable[str]) -> str:
    counts = Counter(codes)
    return ", ".join(f"{code} {counts[code]}" for code in ("NO_FIT", "BEHIND", "UNSCHEDULABLE"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat (tests)")
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--gangs", type=int, default=10_000)
    parser.add_argument("--naive-gangs", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.quick:
        args.nodes, args.gangs, args.naive_gangs, args.repeats = 100, 1_000, 100, 1

    rng = random.Random(args.seed)
    snapshot = synthetic_cluster(args.nodes, rng)
    pending = synthetic_queue(args.gangs, rng)
    members = sum(g.spec.world_size for g in pending)
    print(
        f"core_cycle: {args.nodes} nodes x {NODE['GPU']} GPU, {args.gangs} pending gangs "
        f"({members} members, 1-16 per gang, {len({g.shape for g in pending})} shapes, "
        f"4 strategies), best of {args.repeats}"
    )

    slowest = float("inf")
    modes = {"off": PolicyConfig(backfill_lookahead=0),  # strict FIFO per queue
             "ahead 4": PolicyConfig(backfill_lookahead=4),  # bounded best-effort FIFO
             "on ": PolicyConfig()}  # the default: best-effort lines
    for mode, config in modes.items():
        seconds, plan = best_of(args.repeats, lambda: schedule(snapshot, pending, config, 0.0))
        rate = len(pending) / seconds
        slowest = min(slowest, rate)
        print(
            f"backfill {mode}: cycle {seconds * 1e3:8.1f} ms, "
            f"{rate:10,.0f} decisions/s, admitted {len(plan.admissions)}, waiting: "
            f"{summary(w.code.value for w in plan.waiting.values())}"
        )

    # Naive reference on a bounded subset: the earliest gangs in the queue, backfill on
    # (every gang is searched, the expensive case).
    subset = pending[: args.naive_gangs]
    config = PolicyConfig(backfill=True)
    fast_s, fast_plan = best_of(args.repeats, lambda: schedule(snapshot, subset, config, 0.0))
    naive_s, (naive_admissions, _) = best_of(1, lambda: naive_schedule(snapshot, subset, True))
    same = naive_admissions == fast_plan.admissions
    fast_us, naive_us = fast_s / len(subset) * 1e6, naive_s / len(subset) * 1e6
    print(
        f"naive reference (per-node scan, no shape cache), {len(subset)} gangs, backfill on: "
        f"{naive_us:,.0f} us/decision vs raygang {fast_us:,.0f} us/decision on the same "
        f"gangs: ratio {naive_us / fast_us:.1f}x, same decisions: {'yes' if same else 'NO'}"
    )
    verdict = "met" if slowest >= TARGET_DECISIONS_PER_S else "NOT met"
    print(f"target >= {TARGET_DECISIONS_PER_S:,} decisions/s: {verdict} (slowest {slowest:,.0f})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
