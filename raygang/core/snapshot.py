"""What the scheduler sees at the start of a cycle: nodes and the gangs placed on them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from raygang.core.resources import Resources
from raygang.core.spec import Strategy
from raygang.core.usage import UsageView


@dataclass(frozen=True, slots=True)
class NodeState:
    """One Ray node. `free` already excludes everything reserved or used on it."""

    node_id: str
    total: Resources
    free: Resources
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    alive: bool = True
    name: str = ""  # how messages show the node; defaults to a short id

    @property
    def display(self) -> str:
        return self.name or self.node_id[:8]


@dataclass(frozen=True, slots=True)
class Elastic:
    """What an elastic gang may still change. Its `bundles` are its minimum's, then one per
    member of `surplus` (held beyond the minimum, in that order), then one per member of
    `leaving` (being removed); `missing` are the members it may add, (name, bundle), in the
    order it grows. Member names are `<role>-<index>`. `within`: the only nodes it may
    grow on (a Serve deployment's: its node selector is fixed while it runs), or None.
    `steps`: the members of each ratio step (core/ratio.py), which grow and are taken back
    only together; a member of no step moves alone. `roles_within`: per role, the only
    nodes its members may grow on, in place of `within` (a Serve application's deployment:
    its node selector is its own role's nodes)."""

    strategy: Strategy
    surplus: tuple[str, ...] = ()
    leaving: tuple[str, ...] = ()
    missing: tuple[tuple[str, Resources], ...] = ()
    within: tuple[str, ...] | None = None
    steps: tuple[tuple[str, ...], ...] = ()
    roles_within: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def nodes_for(self, member: str | None) -> tuple[str, ...] | None:
        """The only nodes `member` (`<role>-<index>`) may grow on; None: any."""
        if member is not None and self.roles_within:
            role = member.rpartition("-")[0]
            for name, nodes in self.roles_within:
                if name == role:
                    return nodes
        return self.within


@dataclass(frozen=True, slots=True)
class PlacedGang:
    """A gang holding resources: which node each of its bundles sits on, and the facts
    preemption needs (its queue, whether its class may be preempted, how long it ran)."""

    gang_id: str
    priority: int
    bundles: tuple[tuple[str, Resources], ...]  # (node id, bundle), in rank order
    queue: str = "default"
    preemptible: bool = True
    running_since: float | None = None  # None: admitted, not yet past the launch barrier
    min_runtime_s: float = 0.0  # protected from preemption until it has run this long
    # Leaving: being preempted, or ended and being torn down. Its resources are not free
    # yet; a gang may take them and wait for it (core.draining); never a victim again.
    draining: bool = False
    checkpoint_s: float | None = None  # it saves its progress this often while it runs
    elastic: Elastic | None = None  # an elastic gang: what it may gain or lose
    of: str | None = None  # one surplus member of gang `of`, as a cycle's victim (elastic.py)
    # What it books may not show in the cluster's own view yet: just admitted (its group
    # not placed yet), or handed to a library whose own group is not placed yet (a Serve
    # application deploying). The runtime's view counts it as used on both sides
    # (runtime/observe.py); a cycle reads only the free that view gives.
    unseen: bool = False
    total: Resources = field(init=False, repr=False, compare=False)
    # What victim searches work out from it alone, kept with it: the control plane hands
    # a cycle the same object while nothing it reads changed, so each is worked out once
    # per gang, not once per cycle (`core.preemption.pool.held_per_node`).
    memo: dict[object, Any] = field(init=False, repr=False, compare=False,
                                    default_factory=dict)

    def __post_init__(self) -> None:
        total = Resources()
        for _, bundle in self.bundles:
            total = total + bundle
        object.__setattr__(self, "total", total)

    def unsaved_s(self, now: float) -> float:
        """Seconds of work a stop now would lose: since its last checkpoint (every
        `checkpoint_s` of running), or since its start; none if not yet running."""
        if self.running_since is None:
            return 0.0
        ran = max(0.0, now - self.running_since)
        return ran % self.checkpoint_s if self.checkpoint_s else ran

    def protected(self, now: float) -> bool:
        """Too young to preempt: it has not yet run its class's `min_runtime_s`."""
        if self.min_runtime_s <= 0:
            return False
        return self.running_since is None or now - self.running_since < self.min_runtime_s


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    nodes: tuple[NodeState, ...]
    placed: tuple[PlacedGang, ...] = ()
    # What each queue used over time (`core.usage`), kept by the control loop; None: not
    # kept (time-based fair share off, or a cycle built by hand).
    usage: UsageView | None = None
    _alive: tuple[NodeState, ...] | None = field(default=None, init=False, repr=False,
                                                 compare=False)

    @property
    def alive_nodes(self) -> tuple[NodeState, ...]:
        alive = self._alive  # worked out once: a cycle asks several times
        if alive is None:
            alive = tuple(n for n in self.nodes if n.alive)
            object.__setattr__(self, "_alive", alive)
        return alive

    def node(self, node_id: str) -> NodeState:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(node_id)


# A sort key over placed gangs (victim orders, `core.preemption.victims`): compared as tuples.
GangKey = Callable[[PlacedGang], tuple[Any, ...]]
