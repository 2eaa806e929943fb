"""Benchmark the full policy of `raygang.core.schedule` at cluster scale.

    python bench/core_scale.py            # 5,000 nodes x 8 GPUs, 20,000 running, 10,000 pending
    python bench/core_scale.py --quick    # small and fast, for tests

One cycle with every action (allocate, reclaim, preempt) on a busy cluster: 20 leaf queues
in a two-level tree (4 departments x 5 teams; quotas that add up to the cluster, some
limits, different weights), running gangs of every priority class (some teams far over
their quota, some under it; some gangs protected by a minimum runtime, some draining),
and pending gangs of 1-8 GPUs (PACK, STRICT_PACK, SPREAD) including non-preemptible
inference gangs, so that reclaim and preempt really search for victims. Lines are the
default's (best-effort; `--lookahead N` bounds them). One row per set of actions, adding
one at a time (median of a few runs); the first row, allocate only, is the baseline of
the policy cost ratio. Decisions/s counts every pending gang the cycle decides (admitted,
or waiting with its reason: a gang behind a blocked one in its queue is decided without a
search); admitted/s only the admissions.

Every plan is checked: no node oversubscribed once admissions are applied and victims
removed, and no gang taking what a victim (or a gang already stopping) frees without
waiting for it; every victim preemptible, not draining, not protected and, for preempt,
of strictly lower priority than its preemptor (for reclaim, of another queue, and
together no more of a queue than it runs beyond its quota and fair share); every pending
gang decided exactly once. Side by side, on a smaller cluster of the same kind, the plain
victim search (free every candidate on the capacity, place after each step, as raygang
first did it) must reach the very same plan; the ratio is reported.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from raygang.core import (  # noqa: E402
    ClusterSnapshot,
    NodeState,
    PendingGang,
    PlacedGang,
    Plan,
    PriorityClass,
    QueueSpec,
    Resources,
    PolicyConfig,
    Strategy,
    gang_spec,
    schedule,
)
from raygang.core.preemption.plain import searching_plainly  # noqa: E402
from raygang.core.preemption.check import check  # noqa: E402

TARGET_CYCLE_S = 2.0
TARGET_DECISIONS_PER_S = 5_000
REFERENCES = "YuniKorn 833 pods/s, kube-scheduler ~700 pods/s at 5,000 nodes"
NODE = {"GPU": 8, "CPU": 64}
CPU_PER_GPU = 6
NOW = 100_000.0
CLASSES = (
    PriorityClass(name="inference", value=1000, preemptible=False),
    PriorityClass(name="training", value=100, preemptible=True, min_runtime_s=300.0),
    PriorityClass(name="batch", value=10, preemptible=True),
)
BY_NAME = {c.name: c for c in CLASSES}
STRATEGIES = {Strategy.PACK: 45, Strategy.STRICT_PACK: 35, Strategy.SPREAD: 20}
RUNNING_GPUS = {1: 60, 2: 25, 4: 10, 8: 5}  # about 1.9 GPUs a gang: the cluster ~95% full
PENDING_GPUS = {1: 35, 2: 25, 4: 20, 8: 20}
RUNNING_CLASSES = {"inference": 5, "training": 50, "batch": 45}
PENDING_CLASSES = {"inference": 3, "training": 50, "batch": 47}
# (name, quota as a share of the cluster, weight); teams split their department's quota.
DEPARTMENTS = [("research", 0.4, 1.0), ("product", 0.3, 2.0), ("platform", 0.2, 1.0),
               ("labs", 0.1, 3.0)]
TEAMS = [(0.3, 1.0), (0.25, 1.0), (0.2, 2.0), (0.15, 1.0), (0.1, 3.0)]
LOAD = [1.8, 0.4, 1.2, 0.2, 1.0]  # what teams run, times their quota: over, under, ...
ACTION_ROWS = [("allocate",), ("allocate", "reclaim"), ("allocate", "reclaim", "preempt")]


# Workload ---------------------------------------------------------------------------------

def queue_tree(n_nodes: int) -> tuple[list[QueueSpec], dict[str, float]]:
    """4 departments x 5 teams; quotas add up to the cluster, one department and a third
    of the teams are capped. Also returns each team's share of the running load."""
    cluster = {k: v * n_nodes for k, v in NODE.items()}
    specs, load = [], {}
    for d, (dept, share, weight) in enumerate(DEPARTMENTS):
        limit = {"GPU": cluster["GPU"] * 0.25} if dept == "labs" else None
        specs.append(QueueSpec(name=dept, quota=_part(cluster, share), weight=weight,
                               limit=limit))
        for t, (team_share, team_weight) in enumerate(TEAMS):
            quota = _part(cluster, share * team_share)
            limit = {k: 2 * v for k, v in quota.items()} if (d + t) % 3 == 0 else None
            name = f"{dept}-t{t}"
            specs.append(QueueSpec(name=name, parent=dept, quota=quota, limit=limit,
                                   weight=team_weight))
            load[name] = share * team_share * LOAD[(d + t) % len(LOAD)]
    return specs, load


def _part(cluster: dict[str, float], share: float) -> dict[str, float]:
    return {k: round(v * share, 2) for k, v in cluster.items()}


def _pick(weights: dict, rng: random.Random):
    keys, w = zip(*weights.items())
    return rng.choices(keys, w)[0]


def random_roles(gpus: int, strategy: Strategy, rng: random.Random) -> list[dict]:
    """Workers of 1-8 GPUs adding up to `gpus`, sometimes behind a CPU-only driver."""
    per = rng.choice([m for m in (1, 2, 4, 8) if m <= gpus])
    worker = {"GPU": per, "CPU": CPU_PER_GPU * per}
    roles = [{"name": "worker", "replicas": gpus // per, "resources": worker}]
    if rng.random() < 0.2 and strategy is not Strategy.SPREAD:
        roles.insert(0, {"name": "driver", "resources": {"CPU": 2}})
    return roles


def synthetic_cluster(
    n_nodes: int, n_running: int, load: dict[str, float], rng: random.Random
) -> ClusterSnapshot:
    """Nodes and running gangs; a node's free resources are its total minus what the gangs
    on it hold. Big gangs are placed first (whole nodes), the rest on random nodes with
    room; then one in 21 finishes, leaving holes all over the cluster."""
    width = len(str(n_nodes))
    ids = [f"node-{i:0{width}d}" for i in range(n_nodes)]
    free = {n: dict(NODE) for n in ids}
    shapes = []
    for _ in range(n_running + n_running // 20):
        strategy = _pick(STRATEGIES, rng)
        shapes.append((_pick(RUNNING_GPUS, rng), strategy))
    shapes.sort(key=lambda s: -s[0])
    placed = []
    for gpus, strategy in shapes:
        bundles = [r["resources"] for r in random_roles(gpus, strategy, rng)
                   for _ in range(r.get("replicas", 1))]
        where = _place_randomly(bundles, strategy, ids, free, rng)
        if where is not None:
            placed.append(where)
    rng.shuffle(placed)
    for where in placed[n_running:]:  # these finished: what they held is free again
        for node_id, bundle in where:
            for k, v in bundle.items():
                free[node_id][k] += v
    teams, team_weights = zip(*load.items())
    gangs = []
    for i, where in enumerate(placed[:n_running]):
        cls = BY_NAME[_pick(RUNNING_CLASSES, rng)]
        since = None if rng.random() < 0.01 else NOW - rng.uniform(0, 7200)
        gangs.append(PlacedGang(
            f"run-{i:05d}", cls.value, tuple((n, Resources(b)) for n, b in where),
            queue=rng.choices(teams, team_weights)[0], preemptible=cls.preemptible,
            running_since=since, min_runtime_s=cls.min_runtime_s,
            draining=rng.random() < 0.005,
        ))
    nodes = tuple(NodeState(n, Resources(NODE), Resources(free[n]), name=n) for n in ids)
    return ClusterSnapshot(nodes, tuple(gangs))


def _place_randomly(
    bundles: list[dict], strategy: Strategy, ids: list[str], free: dict, rng: random.Random
) -> list[tuple[str, dict]] | None:
    """Random nodes with room: one for STRICT_PACK and PACK, a distinct one per bundle for
    SPREAD; None (and nothing taken) if there is no room."""
    groups = [bundles] if strategy is not Strategy.SPREAD else [[b] for b in bundles]
    where: list[tuple[str, dict]] = []
    for group in groups:
        need: Counter = Counter()
        for b in group:
            need.update(b)
        used = {n for n, _ in where}
        room = [n for n in (rng.choice(ids) for _ in range(64)) if n not in used
                and all(free[n][k] >= v for k, v in need.items())]
        room = room or [n for n in ids if n not in used
                        and all(free[n][k] >= v for k, v in need.items())]
        if not room:
            for n, b in where:
                for k, v in b.items():
                    free[n][k] += v
            return None
        for b in group:
            for k, v in b.items():
                free[room[0]][k] -= v
            where.append((room[0], b))
    return where


def synthetic_pending(n_gangs: int, teams: Sequence[str], rng: random.Random,
                      config: PolicyConfig) -> list[PendingGang]:
    out = []
    for i in range(n_gangs):
        strategy = _pick(STRATEGIES, rng)
        roles = random_roles(_pick(PENDING_GPUS, rng), strategy, rng)
        name = f"gang-{i:05d}"
        spec = gang_spec(name, name=name, roles=roles, strategy=strategy,
                         queue=rng.choice(teams), priority=_pick(PENDING_CLASSES, rng))
        cls = config.priority_class(spec)
        out.append(PendingGang(name, spec, cls.value, seq=i, preemptible=cls.preemptible))
    return out


def workload(nodes: int, running: int, pending: int, seed: int
             ) -> tuple[list[QueueSpec], dict[str, float], ClusterSnapshot, list[PendingGang]]:
    rng = random.Random(seed)
    queues, load = queue_tree(nodes)
    config = PolicyConfig(queues=tuple(queues), priority_classes=CLASSES)
    snapshot = synthetic_cluster(nodes, running, load, rng)
    return queues, load, snapshot, synthetic_pending(pending, sorted(load), rng, config)


# Measurement ------------------------------------------------------------------------------

def median_of(repeats: int, run: Callable[[], Plan]) -> tuple[float, Plan]:
    times, result = [], None
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    assert result is not None
    return statistics.median(times), result


def row(actions: tuple[str, ...], seconds: float, plan: Plan, n_pending: int) -> str:
    admitted = Counter(a.action for a in plan.admissions)
    victims = Counter(p.action for p in plan.preemptions)
    waiting = Counter(w.code.value for w in plan.waiting.values())
    return (
        f"{'+'.join(actions):<25} {seconds * 1e3:9.1f} ms {n_pending / seconds:10,.0f}/s  "
        f"admitted {len(plan.admissions)} = {len(plan.admissions) / seconds:,.0f}/s "
        f"(allocate {admitted['allocate']}, reclaim "
        f"{admitted['reclaim']}, preempt {admitted['preempt']}); victims reclaim "
        f"{victims['reclaim']}, preempt {victims['preempt']}; waiting "
        + ", ".join(f"{c} {waiting[c]}" for c in ("NO_FIT", "BEHIND", "LIMIT", "UNSCHEDULABLE"))
    )


def over_quota(queues: Sequence[QueueSpec], snapshot: ClusterSnapshot) -> int:
    """Teams whose running gangs use more GPUs than their quota."""
    used: Counter = Counter()
    for gang in snapshot.placed:
        used[gang.queue] += gang.total.get("GPU")
    return sum(1 for q in queues if q.parent and used[q.name] > q.quota.get("GPU"))


def reference(nodes: int, seed: int, repeats: int) -> str:
    """The full cycle with the plain victim search and with raygang's, on a smaller
    cluster of the same kind (4 running and 2 pending gangs per node)."""
    queues, _, snapshot, pending = workload(nodes, 4 * nodes, 2 * nodes, seed)
    config = PolicyConfig(queues=tuple(queues), priority_classes=CLASSES)
    fast_s, fast = median_of(repeats, lambda: schedule(snapshot, pending, config, NOW))
    with searching_plainly():
        plain_s, plain = median_of(1, lambda: schedule(snapshot, pending, config, NOW))
    same = (plain.admissions, plain.preemptions, dict(plain.waiting)) == (
        fast.admissions, fast.preemptions, dict(fast.waiting))
    return (
        f"plain victim search (frees every candidate on the capacity, places after each "
        f"step), {nodes} nodes, {len(snapshot.placed)} running, {len(pending)} pending: "
        f"{plain_s * 1e3:,.0f} ms vs raygang {fast_s * 1e3:,.0f} ms on the same cycle: ratio "
        f"{plain_s / fast_s:.1f}x, {len(fast.preemptions)} victims, same plan: "
        f"{'yes' if same else 'NO'}"
    )


def _line(lookahead: int | None) -> str:
    return "best-effort lines" if lookahead is None else f"lines bounded at {lookahead}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat (tests)")
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--running", type=int, default=20_000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--reference-nodes", type=int, default=400,
                        help="cluster size for the side-by-side run of the plain search")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lookahead", type=int, default=None,
                        help="bound each queue's line (backfill_lookahead); default: the "
                        "policy's (best-effort lines)")
    args = parser.parse_args(argv)
    if args.quick:
        args.nodes, args.running, args.pending, args.repeats = 200, 800, 400, 1
        args.reference_nodes = 100

    queues, load, snapshot, pending = workload(args.nodes, args.running, args.pending,
                                               args.seed)
    used = sum(g.total.get("GPU") for g in snapshot.placed)
    print(
        f"core_scale: {args.nodes} nodes x {NODE['GPU']} GPU {NODE['CPU']} CPU "
        f"({used / (args.nodes * NODE['GPU']):.0%} of GPUs in use), {len(load)} leaf queues "
        f"({len(DEPARTMENTS)} departments x {len(TEAMS)} teams, "
        f"{over_quota(queues, snapshot)} over quota), {len(snapshot.placed)} running and "
        f"{len(pending)} pending gangs, {_line(args.lookahead)}, median of {args.repeats}"
    )
    print(f"{'actions':<25} {'cycle':>12} {'decisions':>12}")
    times, plans = [], []
    for actions in ACTION_ROWS:
        config = PolicyConfig(queues=tuple(queues), priority_classes=CLASSES, actions=actions,
                              backfill_lookahead=args.lookahead)
        seconds, plan = median_of(args.repeats, lambda: schedule(snapshot, pending, config, NOW))
        check(plan, snapshot, pending, config)
        times.append(seconds)
        plans.append(plan)
        print(row(actions, seconds, plan, len(pending)))

    steps = ", ".join(
        f"{actions[-1]} {'+' if i else ''}{(t - (times[i - 1] if i else 0)) * 1e3:.0f} ms"
        for i, (actions, t) in enumerate(zip(ACTION_ROWS, times))
    )
    print(f"time per action (differences of the rows): {steps}")
    full, rate = times[-1], len(pending) / times[-1]
    print(f"policy cost ratio, full / allocate only: {full / times[0]:.1f}x")
    print(
        f"target full cycle < {TARGET_CYCLE_S:g} s: {'met' if full < TARGET_CYCLE_S else 'NOT met'}"
        f" ({full:.2f} s); target >= {TARGET_DECISIONS_PER_S:,} decisions/s: "
        f"{'met' if rate >= TARGET_DECISIONS_PER_S else 'NOT met'} ({rate:,.0f}); "
        f"for reference: {REFERENCES}"
    )
    sharing = sum(1 for a in plans[-1].admissions if a.waits_for_others)
    print(
        f"checks: every plan sound (no node oversubscribed; {len(plans[-1].preemptions)} "
        f"victims preemptible, unprotected, of lower priority or another queue; "
        f"{sharing} gangs admitted onto capacity other gangs' victims free, each waiting "
        f"for them; {len(pending)} pending gangs decided once each)"
    )
    line = reference(args.reference_nodes, args.seed, args.repeats)
    print(line)
    return 0 if line.endswith("same plan: yes") else 1


if __name__ == "__main__":
    sys.exit(main())
