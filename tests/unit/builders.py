"""Declarative builders for core tests, in the spirit of KAI Scheduler's topology tests.

    cluster("w-1: GPU=4 CPU=8", "w-2: GPU=4 CPU=8 free GPU=2", "w-3: CPU=8 dead")
    gang("g1", "4xGPU=1", strategy="STRICT_PACK", priority="training")
    gang("svc", "1xCPU=1 + 4xGPU=1,CPU=2")      # two roles: r0 and r1

Amounts: `name=value` separated by spaces or commas; `memory=8Gi` means 8 GiB. After
`free`, the named resources are overridden (others stay at the node's total). `dead`
marks a node that is not alive; `@rack=r1` gives it a label.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence

from raygang.core import (
    Capacity,
    ClusterSnapshot,
    GangSpec,
    NodeState,
    PendingGang,
    PlacedGang,
    QueueSpec,
    Resources,
    PolicyConfig,
    Strategy,
    gang_spec,
)

_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_seq = itertools.count()


def amounts(text: str) -> dict[str, float]:
    """`"GPU=1, CPU=2 memory=8Gi"` -> `{"GPU": 1, "CPU": 2, "memory": 8 * 2**30}`."""
    out: dict[str, float] = {}
    for token in filter(None, re.split(r"[,\s]+", text.strip())):
        name, _, value = token.partition("=")
        if not value:
            raise ValueError(f"bad amount {token!r}: expected name=value")
        scale = 1
        if value[-2:] in _SUFFIX:
            value, scale = value[:-2], _SUFFIX[value[-2:]]
        number = float(value) * scale
        out[name] = int(number) if number.is_integer() else number
    return out


def res(text: str = "", **kwargs: float) -> Resources:
    return Resources({**amounts(text), **kwargs})


def node(line: str) -> NodeState:
    """`"w-1: GPU=4 CPU=8 free GPU=2 dead"` -> NodeState (name = id, so messages show it)."""
    node_id, sep, rest = line.partition(":")
    if not sep:
        raise ValueError(f"bad node {line!r}: expected 'id: amounts'")
    words = rest.split()
    alive = "dead" not in words
    labels = dict(w[1:].split("=", 1) for w in words if w.startswith("@"))
    words = [w for w in words if w != "dead" and not w.startswith("@")]
    if "free" in words:
        at = words.index("free")
        total, free_part = amounts(" ".join(words[:at])), amounts(" ".join(words[at + 1:]))
    else:
        total, free_part = amounts(" ".join(words)), {}
    node_id = node_id.strip()
    return NodeState(
        node_id=node_id,
        total=Resources(total),
        free=Resources({**total, **free_part}),
        labels=labels,
        alive=alive,
        name=node_id,
    )


def cluster(*lines: str, placed: Sequence[PlacedGang] = ()) -> ClusterSnapshot:
    return ClusterSnapshot(tuple(node(line) for line in lines), tuple(placed))


def uniform(count: int, text: str, prefix: str = "w-") -> list[str]:
    """`count` identical node lines, ids zero-padded so that string order is numeric order."""
    width = len(str(count))
    return [f"{prefix}{i:0{width}d}: {text}" for i in range(1, count + 1)]


def capacity(*lines: str) -> Capacity:
    return Capacity(cluster(*lines).alive_nodes)


def roles(shape: str) -> list[dict]:
    """`"1xCPU=1 + 4xGPU=1,CPU=2"` -> role dicts r0, r1 (a bare `GPU=1` means one replica)."""
    out = []
    for i, part in enumerate(shape.split("+")):
        match = re.fullmatch(r"\s*(?:(\d+)x)?(.*?)\s*", part)
        assert match, part
        count, text = match.groups()
        out.append({"name": f"r{i}", "replicas": int(count or 1), "resources": amounts(text)})
    return out


def bundles(shape: str) -> list[Resources]:
    """All bundles of a shape, in rank order: `bundles("2xGPU=1 + CPU=1")`."""
    return [Resources(r["resources"]) for r in roles(shape) for _ in range(r["replicas"])]


def spec(name: str, shape: str, strategy: str | Strategy = "PACK", **fields: object) -> GangSpec:
    return gang_spec(f"gang {name!r}", name=name, roles=roles(shape), strategy=strategy, **fields)


def gang(
    gang_id: str,
    shape: str,
    strategy: str | Strategy = "PACK",
    priority: int | str = 0,
    seq: int | None = None,
    config: PolicyConfig | None = None,
    queue: str = "default",
    since: float | None = None,
    **fields: object,
) -> PendingGang:
    """A pending gang; `seq` defaults to creation order (submission order); `since`: when
    it became pending; `fields`: more of its spec (`topology=...`)."""
    s = spec(gang_id, shape, strategy, priority=priority, queue=queue, **fields)
    cls = (config or PolicyConfig()).priority_class(s)
    return PendingGang(gang_id, s, cls.value, next(_seq) if seq is None else seq,
                       preemptible=cls.preemptible, pending_since=since)


def running(
    gang_id: str,
    where: str,
    priority: int = 100,
    queue: str = "default",
    since: float | None = 0.0,
    **fields: object,
) -> PlacedGang:
    """A gang holding resources: `running("t1", "w-1: 2xGPU=1; w-2: GPU=1", queue="a")`."""
    placed: list[tuple[str, Resources]] = []
    for part in where.split(";"):
        node_id, _, shape = part.partition(":")
        placed.extend((node_id.strip(), b) for b in bundles(shape))
    return PlacedGang(gang_id, priority, tuple(placed), queue=queue, running_since=since,
                      **fields)  # type: ignore[arg-type]


def busy(*lines: str, placed: Sequence[PlacedGang] = ()) -> ClusterSnapshot:
    """A cluster whose free resources are its totals minus what `placed` gangs hold."""
    snapshot = cluster(*lines)
    held: dict[str, Resources] = {}
    for g in placed:
        for node_id, bundle in g.bundles:
            held[node_id] = held.get(node_id, Resources()) + bundle
    nodes = tuple(
        NodeState(n.node_id, n.total, n.free - held.get(n.node_id, Resources()), n.labels,
                  n.alive, n.name)
        for n in snapshot.nodes
    )
    return ClusterSnapshot(nodes, tuple(placed))


def queue(name: str, parent: str | None = None, quota: str = "", limit: str | None = None,
          weight: float = 1.0) -> QueueSpec:
    """`queue("a", "org", quota="GPU=4", limit="GPU=8", weight=2)`."""
    return QueueSpec(name=name, parent=parent, quota=res(quota),
                     limit=None if limit is None else res(limit), weight=weight)


def gangs(*rows: tuple) -> list[PendingGang]:
    """Gangs from `(id, shape, strategy[, priority])` rows, seq in row order."""
    return [gang(*row[:3], *row[3:4], seq=i) for i, row in enumerate(rows)]


def per_node(nodes: Iterable[str], bundle_list: Sequence[Resources]) -> dict[str, Resources]:
    """Sum of bundles per node for one admission."""
    out: dict[str, Resources] = {}
    for node_id, bundle in zip(nodes, bundle_list, strict=True):
        out[node_id] = out.get(node_id, Resources()) + bundle
    return out


def free_map(cap: Capacity) -> dict[str, Resources]:
    return {n: cap.free(n) for n in cap.node_ids}


def class_map(cap: Capacity) -> dict[Resources, list[str]]:
    return {free: list(ids) for free, ids in cap.classes()}


def assignment(text: str) -> tuple[str, ...]:
    """`"w-1 w-1 w-2"` -> ("w-1", "w-1", "w-2"); `"3*w-1 w-2"` repeats."""
    out: list[str] = []
    for token in text.split():
        count, star, node_id = token.partition("*")
        out.extend([node_id] * int(count) if star else [token])
    return tuple(out)


def scattered(rng, free: dict[str, int], gangs: int,
              sizes: Sequence[int]) -> Iterable[tuple[int, tuple[tuple[str, Resources], ...]]]:
    """Running gangs for property tests: for each of `gangs`, `rng.choice(sizes)` bundles
    of {GPU: 1, CPU: 1} on random nodes with a GPU left in `free` (taken from it). Yields
    (index, bundles) of each gang that got any; lazily, so a caller's own draws for a gang
    come before the next gang's."""
    for g in range(gangs):
        where = []
        for _ in range(rng.choice(sizes)):
            options = [n for n, f in free.items() if f > 0]
            if not options:
                break
            node = rng.choice(options)
            free[node] -= 1
            where.append((node, Resources(GPU=1, CPU=1)))
        if where:
            yield g, tuple(where)
