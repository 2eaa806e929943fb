"""The scale decision as a pure function: `plan_scale(...) -> ScalePlan`.

Scale-up simulates, gang by gang in cycle order, what adding nodes of one worker group
would do, using the scheduler's own `place` on a scratch snapshot that holds the real
nodes' free capacity, the nodes already requested and not yet up, and the virtual nodes
added for earlier gangs. So STRICT_PACK / STRICT_SPREAD / PACK / SPREAD mean exactly what
they mean to the scheduler. Scale-down releases nodes idle for `idle_timeout_s`.

A gang with a topology (core/topology.py) counts the nodes to be added to one group as one
domain of every level it names: the labels a new node will carry are not known before it
is up, so this assumes a group's nodes come up together (one rack, one placement block),
as a cloud's compact placement or a worker group per rack gives. Where they do not, the
gang waits for room in one domain as it would without scaling.

Hysteresis: the desired count of a group never drops below the pods it has now because
a gang left; it drops only by releasing named idle nodes, and a group that scaled up in
the last `scale_down_delay_s` releases nothing. A gang that arrives and leaves therefore
costs at most one node for `idle_timeout_s`, never an up-down-up flap.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from raygang.core.capacity import Capacity
from raygang.core.config import NodeType, PolicyConfig, ScalePolicy
from raygang.core.explain import describe_bundles
from raygang.core.gang import PendingGang
from raygang.core.placement import Assignment, place
from raygang.core.plan import Plan, WaitCode, Waiting, Waitings
from raygang.core.resources import Resources, scarcity_key
from raygang.core.snapshot import ClusterSnapshot, NodeState
from raygang.core.spec import GangSpec, Strategy
from raygang.core.topology import Layout

# Default price of one node, in CPU-equivalents: a datacenter GPU (or other accelerator /
# custom resource) costs roughly what 64 vCPUs do, and 4 GiB of memory about one vCPU.
# Price alone does not keep CPU work off GPU nodes (a big CPU node can cost more than a
# small GPU one): `_idle_accelerators` does, before any price is compared.
_CPU_COST = 1.0
_GIB_COST = 0.25
_ACCELERATOR_COST = 64.0
_FREE = ("object_store_memory",)  # carved out of memory: not paid twice
_GENERAL = ("CPU", "memory", *_FREE)  # what every node has; the rest are accelerators
_NO_MAX = 2**31 - 1  # KubeRay's default maxReplicas

__all__ = ["NodeGroup", "ScalePolicy", "ScalePlan", "default_cost", "infeasible_reason",
           "never_hosted", "plan_scale", "scale_candidates"]


def _idle_accelerators(gang: PendingGang, shape: Resources) -> bool:
    """Whether nodes of `shape` have an accelerator (GPU, TPU, any custom resource) the gang
    does not ask for. Such a group is chosen only when no group without one can host the
    gang, whatever the prices: those devices would sit idle under CPU work, and Kubernetes
    clusters keep CPU pods off GPU nodes (taints) for the same reason."""
    return any(name not in _GENERAL and not gang.total.units(name) for name in shape)


def default_cost(shape: Resources) -> float:
    """Price of one node of `shape` when its group names none."""
    cost = 0.0
    for name, amount in shape.items():
        if name == "CPU":
            cost += _CPU_COST * amount
        elif name == "memory":
            cost += _GIB_COST * amount / 2**30
        elif name not in _FREE:
            cost += _ACCELERATOR_COST * amount
    return cost


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """A worker group: nodes of one `shape`, `nodes` pods now (up or not)."""

    name: str
    shape: Resources
    min_nodes: int = 0
    max_nodes: int = _NO_MAX
    nodes: int = 0
    cost: float | None = None  # per node; None: `default_cost(shape)`

    @property
    def node_cost(self) -> float:
        return default_cost(self.shape) if self.cost is None else self.cost

    @classmethod
    def of_type(cls, node_type: NodeType, nodes: int) -> NodeGroup:
        return cls(node_type.name, node_type.resources, node_type.min_nodes,
                   node_type.max_nodes, nodes, node_type.cost)


@dataclass(frozen=True, slots=True)
class ScalePlan:
    desired: dict[str, int] = field(default_factory=dict)  # group -> pods wanted
    waiting_for: dict[str, tuple[str, int]] = field(default_factory=dict)  # gang -> (group, new)
    at_max: dict[str, str] = field(default_factory=dict)  # gang -> why it gets no nodes now
    infeasible: dict[str, str] = field(default_factory=dict)  # gang -> why never
    release: tuple[str, ...] = ()  # Ray node ids to remove, oldest idle first
    scaled_up: tuple[str, ...] = ()  # groups whose desired count grew (for the cooldown)


def scale_candidates(
    plan: Plan, find: Callable[[str], PendingGang | None], config: PolicyConfig
) -> list[PendingGang]:
    """The gangs more nodes could help, in admission order: those `plan` left waiting
    that are still pending (`find`: a pending gang by id, None if it is not one any more),
    not held by a quota or limit, nor waiting behind a queue head that is (it waits for
    the limit too), and not rejected for a queue problem no node can fix. A line behind a
    head that a limit holds, or a run set aside behind such a gang, is skipped whole: its
    gangs are not walked."""
    waiting = plan.waiting

    def wanted(gang: PendingGang, w: Waiting) -> bool:
        head = waiting.get(w.behind) if w.behind is not None else None
        if w.code is WaitCode.LIMIT or (head is not None and head.code is WaitCode.LIMIT):
            return False
        return w.code is not WaitCode.UNSCHEDULABLE or not config.queue_tree.problem(gang.spec)

    out = [gang for gang_id, w in plan.looked_at.items()
           if (gang := find(gang_id)) is not None and wanted(gang, w)]
    for _, line in waiting.groups() if isinstance(waiting, Waitings) else ():
        head = waiting.get(line.blocker)
        if head is not None and head.code is WaitCode.LIMIT:
            continue
        for i in range(line.start, len(line.line)):
            gang = find(line.line[i].gang_id)
            if gang is not None and wanted(gang, line.reason(gang)):
                out.append(gang)
    return sorted(out, key=PendingGang.order_key)


def plan_scale(
    snapshot: ClusterSnapshot,
    waiting: Sequence[PendingGang],
    groups: Sequence[NodeGroup],
    node_groups: Mapping[str, str],
    idle_since: Mapping[str, float],
    busy_nodes: Iterable[str],
    config: ScalePolicy,
    now: float,
    last_scale_up: Mapping[str, float] | None = None,
) -> ScalePlan:
    """Nodes to add per group for `waiting` (in cycle order), and idle nodes to release.

    `snapshot` free capacity should already exclude this cycle's admissions;
    `node_groups` maps Ray node id -> group (the head is absent, so never released);
    `busy_nodes` are nodes this cycle's plan is about to use; `last_scale_up` is when each
    group last grew (the runtime records it from `scaled_up`)."""
    by_name = {g.name: g for g in sorted(groups, key=lambda g: g.name)}
    sim = _Scratch(snapshot, by_name, node_groups)
    plan = ScalePlan()
    for gang in waiting:
        _scale_up_one(gang, sim, by_name, plan)
    added = sim.added
    desired = {
        name: max(g.nodes + added.get(name, 0), g.min_nodes) for name, g in by_name.items()
    }
    cooling = {
        name for name, at in (last_scale_up or {}).items()
        if now - at < config.scale_down_delay_s
    } | {name for name, n in added.items() if n}
    release = _idle_nodes(snapshot, by_name, node_groups, idle_since,
                          set(busy_nodes) | sim.used_real, cooling, desired, config, now)
    for node_id in release:
        desired[node_groups[node_id]] -= 1
    return ScalePlan(desired, plan.waiting_for, plan.at_max, plan.infeasible, release,
                     tuple(sorted(n for n, k in added.items() if k)))


class _Scratch:
    """The simulation's free capacity: real nodes, requested-not-up nodes and the new
    virtual ones added for earlier gangs, in one `Capacity`. A trial with k more nodes
    adds them, places, and takes them out again; identical new nodes form one class of
    the capacity, so a trial costs about what a placement on the real nodes does."""

    def __init__(self, snapshot: ClusterSnapshot, groups: Mapping[str, NodeGroup],
                 node_groups: Mapping[str, str]):
        self.capacity = Capacity(snapshot.alive_nodes)
        self.group_of: dict[str, str] = {}  # virtual node -> group
        self.real: set[str] = {n.node_id for n in snapshot.alive_nodes}
        self.used_real: set[str] = set()  # real nodes a waiting gang will use: not idle
        self.added: dict[str, int] = {}
        up: dict[str, int] = {}
        for node in snapshot.alive_nodes:
            if node.node_id in node_groups:
                up[node_groups[node.node_id]] = up.get(node_groups[node.node_id], 0) + 1
        for name, group in groups.items():
            for i in range(max(0, group.nodes - up.get(name, 0))):
                self._add(f"~{name}/requested-{i:05d}", group)

    def _add(self, node_id: str, group: NodeGroup) -> None:
        self.capacity.add_node(_new_node(node_id, group))
        self.group_of[node_id] = group.name

    def headroom(self, group: NodeGroup) -> int:
        return max(0, group.max_nodes - group.nodes - self.added.get(group.name, 0))

    def try_place(self, gang: PendingGang, group: NodeGroup | None, k: int
                  ) -> Assignment | None:
        """Placement with `k` more nodes of `group`, or None; changes nothing."""
        new: list[str] = []
        if group is not None:
            base = self.added.get(group.name, 0)
            new = [self._new_id(group, base + i) for i in range(k)]
            for node_id in new:
                self.capacity.add_node(_new_node(node_id, group))
        try:
            return place(gang.bundles, gang.strategy, self.capacity, gang.layout)
        finally:
            for node_id in new:
                self.capacity.remove_node(node_id)

    def commit(self, gang: PendingGang, group: NodeGroup | None, k: int,
               assignment: Sequence[str]) -> None:
        if group is not None:
            base = self.added.get(group.name, 0)
            for i in range(k):
                self._add(self._new_id(group, base + i), group)
            self.added[group.name] = base + k
        self.capacity.reserve(zip(assignment, gang.bundles, strict=True))
        self.used_real.update(n for n in assignment if n in self.real)

    @staticmethod
    def _new_id(group: NodeGroup, i: int) -> str:
        return f"~{group.name}/new-{i:05d}"


def _scale_up_one(gang: PendingGang, sim: _Scratch, groups: Mapping[str, NodeGroup],
                  plan: ScalePlan) -> None:
    here = sim.try_place(gang, None, 0)
    if here is not None:  # fits on free, requested or already added nodes: no new node
        sim.commit(gang, None, 0, here)
        owner = next((sim.group_of[n] for n in here if n in sim.group_of), None)
        if owner is not None:
            plan.waiting_for[gang.gang_id] = (owner, 0)
        return
    best: tuple[tuple[bool, float, int, str], NodeGroup, int, tuple[str, ...]] | None = None
    at_max: list[str] = []
    for group in groups.values():
        if not _ever_hosts(gang, group):
            continue
        found = _fewest_nodes(gang, sim, group)
        if found is None:
            at_max.append(group.name)
            continue
        k, assignment = found
        key = (_idle_accelerators(gang, group.shape), k * group.node_cost, k, group.name)
        if best is None or key < best[0]:
            best = (key, group, k, assignment)
    if best is not None:
        _, group, k, assignment = best
        sim.commit(gang, group, k, assignment)
        plan.waiting_for[gang.gang_id] = (group.name, k)
    elif at_max:
        plan.at_max[gang.gang_id] = "; ".join(
            f"group {name} is at its maximum of {groups[name].max_nodes} nodes" for name in at_max)
    else:
        plan.infeasible[gang.gang_id] = infeasible_reason(gang, list(groups.values()))


class _AnyLevel(Mapping[str, str]):
    """The labels of a node not up yet: for every level, its group's one domain."""

    def __init__(self, group: str):
        self._value = f"~{group}"

    def __getitem__(self, key: str) -> str:
        return self._value

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __contains__(self, key: object) -> bool:
        return True


def _new_node(node_id: str, group: NodeGroup) -> NodeState:
    return NodeState(node_id, group.shape, group.shape, labels=_AnyLevel(group.name))


def _fewest_nodes(gang: PendingGang, sim: _Scratch, group: NodeGroup
                  ) -> tuple[int, Assignment] | None:
    """(k, assignment) for the fewest new nodes of `group` that place the gang, or None.
    Never more new nodes than bundles; more empty nodes never hurt, so binary search."""
    high = min(sim.headroom(group), len(gang.bundles))
    if high < 1:
        return None
    found = sim.try_place(gang, group, high)
    if found is None:
        return None
    low = 1
    while low < high:
        mid = (low + high) // 2
        trial = sim.try_place(gang, group, mid)
        if trial is None:
            low = mid + 1
        else:
            high, found = mid, trial
    return high, found


def _ever_hosts(gang: GangSpec | PendingGang, group: NodeGroup) -> bool:
    """Whether enough empty nodes of this group alone could host the gang."""
    return _shape_hosts(tuple(gang.bundles), gang.strategy, group.shape, gang.layout)


@functools.lru_cache(maxsize=4096)  # pending gangs come in few shapes; pure, so cacheable
def _shape_hosts(bundles: tuple[Resources, ...], strategy: Strategy, shape: Resources,
                 layout: Layout | None = None) -> bool:
    group = NodeGroup("new", shape)
    nodes = [_new_node(f"n{i:05d}", group) for i in range(len(bundles))]
    return place(bundles, strategy, Capacity(nodes), layout) is not None


def never_hosted(gang: GangSpec | PendingGang, groups: Sequence[NodeGroup]) -> str | None:
    """Why nodes of no group could ever host `gang` (None: some group could)."""
    if any(_ever_hosts(gang, g) for g in groups):
        return None
    return infeasible_reason(gang, groups)


def infeasible_reason(gang: GangSpec | PendingGang, groups: Sequence[NodeGroup]) -> str:
    """Why no worker group could ever host `gang`, with numbers."""
    if not groups:
        return "no worker group can be scaled up (the cluster has none)"
    shape = f"{gang.strategy.value}, {describe_bundles(gang.bundles)}"
    if gang.strategy is Strategy.STRICT_PACK:
        need = Resources.sum(gang.bundles)
        closest = _closest(need, groups)
        return (f"needs {need} on one node ({shape}); the closest node shape is "
                f"{closest.shape} (group {closest.name}), short of {need.shortfall(closest.shape)}")
    for bundle in sorted(set(gang.bundles), key=_size_key):
        if not any(bundle.fits_in(g.shape) for g in groups):
            closest = _closest(bundle, groups)
            return (f"bundle {bundle} fits on no worker group's node ({shape}); the closest "
                    f"node shape is {closest.shape} (group {closest.name}), short of "
                    f"{bundle.shortfall(closest.shape)}")
    return (f"no single worker group's node shape hosts every bundle ({shape}); "
            f"shapes: " + ", ".join(f"{g.name} {g.shape}" for g in groups))


def _size_key(bundle: Resources) -> tuple[tuple[tuple[tuple[int, str], int], ...], str]:
    names = sorted(bundle, key=scarcity_key)
    return (tuple((scarcity_key(n), -bundle.units(n)) for n in names), repr(bundle))


def _closest(need: Resources, groups: Sequence[NodeGroup]) -> NodeGroup:
    """The group whose shape misses least of `need`, scarcest resource first."""
    def key(g: NodeGroup) -> tuple[tuple[int, ...], str]:
        missing = need.shortfall(g.shape)
        names = sorted(need, key=scarcity_key)
        return (tuple(missing.units(n) for n in names), g.name)
    return min(groups, key=key)


def _idle_nodes(snapshot: ClusterSnapshot, groups: Mapping[str, NodeGroup],
                node_groups: Mapping[str, str], idle_since: Mapping[str, float],
                busy: set[str], cooling: set[str], desired: Mapping[str, int],
                config: ScalePolicy, now: float) -> tuple[str, ...]:
    """Idle nodes to release: oldest idle first, then node id; never the head (absent from
    `node_groups`), never a node holding a bundle, never below a group's min_nodes."""
    holding = {node_id for g in snapshot.placed for node_id, _ in g.bundles}
    candidates: list[tuple[float, str, str]] = []
    for node in snapshot.alive_nodes:
        group = node_groups.get(node.node_id)
        since = idle_since.get(node.node_id)
        if (group is None or group not in groups or since is None or group in cooling
                or node.node_id in busy or node.node_id in holding
                or now - since < config.idle_timeout_s):
            continue
        candidates.append((since, node.node_id, group))
    left = dict(desired)
    release = []
    for _, node_id, group in sorted(candidates):
        if left[group] - 1 < groups[group].min_nodes:
            continue
        left[group] -= 1
        release.append(node_id)
    return tuple(release)
