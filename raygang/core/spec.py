"""Frozen user intent: `GangSpec` and its `RoleSpec`s, validated with specific messages."""

from __future__ import annotations

import enum
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from functools import cached_property
from typing import Annotated, NamedTuple, Protocol, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from raygang.core.hashed import HashedTuple, one_of
from raygang.core.ratio import growth_units, ratio_problem
from raygang.core.resources import Resources
from raygang.core.startup_order import find_cycle
from raygang.core.topology import Layout, Topology, check_segments, layout_of

# Names become parts of Ray actor and placement group names (`raygang-<gang>-<role>-<i>`).
NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$"
MAX_MEMBERS = 4096


_M = TypeVar("_M", bound=BaseModel)


class Strategy(str, enum.Enum):
    """Ray placement group strategies, with Ray's meaning."""

    STRICT_PACK = "STRICT_PACK"  # every bundle on one node
    PACK = "PACK"  # as few nodes as possible
    SPREAD = "SPREAD"  # as many distinct nodes as possible, sharing when it must
    STRICT_SPREAD = "STRICT_SPREAD"  # every bundle on a distinct node


def _bundle_not_empty(value: Resources) -> Resources:
    # Ray rejects placement group bundles whose amounts are all zero.
    if not value:
        raise ValueError('needs at least one positive amount, e.g. {"CPU": 1}')
    return value


def _priority_name(value: int | str) -> int | str:
    if isinstance(value, str) and not value.isidentifier():
        raise ValueError(
            f"must be an integer or a priority class name such as 'training', got {value!r}"
        )
    return value


# What a role's replica reserves (one bundle), and a priority: shared by gangs and
# deployments, validated the same way.
Bundle = Annotated[Resources, AfterValidator(_bundle_not_empty)]
Priority = Annotated[StrictInt | str, AfterValidator(_priority_name)]


def replicas_range(data: object) -> object:
    """`replicas=(min, max)` as `min_replicas` and `replicas` (roles and deployments)."""
    if isinstance(data, dict) and isinstance(data.get("replicas"), (tuple, list)):
        pair = data["replicas"]
        if len(pair) != 2:
            raise ValueError(f"replicas: a count or (min, max), got {tuple(pair)!r}")
        if "min_replicas" in data:
            raise ValueError("replicas: (min, max) and min_replicas both given; use one")
        data = {**data, "min_replicas": pair[0], "replicas": pair[1]}
    return data


class _Counted(Protocol):
    """A role, or a deployment: `replicas` members, at least `min_replicas` if elastic."""

    @property
    def replicas(self) -> int: ...

    @property
    def min_replicas(self) -> int | None: ...


_Replicated = TypeVar("_Replicated", bound=_Counted)


def min_within(model: _Replicated) -> _Replicated:
    if model.min_replicas is not None and model.min_replicas > model.replicas:
        raise ValueError(f"min_replicas: must be at most replicas ({model.replicas}), "
                         f"got {model.min_replicas}")
    return model


class RoleSpec(BaseModel):
    """One kind of member: `replicas` actors, each reserving `resources` (one bundle each).

    Elastic: `replicas=(min, max)` (or `min_replicas`) runs between `min` and `max`
    members. The minimum is all or nothing, like a rigid role; the rest, the surplus, grows
    as capacity frees and is the first taken back (KAI's "semi-preemptible", Volcano's
    minAvailable)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="role name, unique in its gang")
    replicas: int = Field(1, ge=1, le=MAX_MEMBERS, description="members (the most, if elastic)")
    min_replicas: int | None = Field(
        None, ge=1, le=MAX_MEMBERS, description="elastic: the fewest members it runs with "
        "(none: exactly `replicas`); `replicas=(min, max)` sets both")
    resources: Bundle = Field(default_factory=lambda: Resources(CPU=1))
    after: tuple[str, ...] = Field(
        (), description="roles whose members must all be ready before this role starts"
    )
    topology: Topology | None = Field(
        None, description="where this role's members may sit, by node labels (one rack, "
        "segments of consecutive ranks on one NVLink domain): core/topology.py")

    @model_validator(mode="before")
    @classmethod
    def _range(cls, data: object) -> object:
        return replicas_range(data)

    @model_validator(mode="after")
    def _min_ok(self) -> RoleSpec:
        return min_within(self)

    @property
    def minimum(self) -> int:
        return self.replicas if self.min_replicas is None else self.min_replicas

    @property
    def elastic(self) -> bool:
        return self.minimum < self.replicas


class Resize(str, enum.Enum):
    """How an elastic gang's members live through a change of its size."""

    LIVE = "live"
    RESTART = "restart"


class MemberSlot(NamedTuple):
    """Where one member sits in its gang: its role, index in the role, and gang rank."""

    role: str
    index: int  # type: ignore[assignment]  # shadows tuple.index: the domain's word wins
    rank: int

    @property
    def name(self) -> str:
        """`<role>-<index>`: how plans, statuses and actor names call the member."""
        return f"{self.role}-{self.index}"


class GangSpec(BaseModel):
    """What a user asks for: a set of roles that start together or not at all."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    queue: str = Field("default", pattern=NAME_PATTERN)
    priority: Priority = Field(
        "training", description="an integer, or the name of a priority class"
    )
    strategy: Strategy = Strategy.PACK
    roles: tuple[RoleSpec, ...] = Field(min_length=1)
    reservation_timeout_s: float = Field(
        60.0, gt=0, description="how long the placement group may take to become ready"
    )
    startup_timeout_s: float = Field(
        600.0, gt=0, description="how long all members may take to become ready"
    )
    max_restarts: int = Field(0, ge=0, description="whole-gang restarts after a failure")
    preemption_grace_s: float = Field(
        30.0, ge=0, description="how long a preempted gang may take to checkpoint before it is "
        "stopped (like a pod's terminationGracePeriodSeconds); it ends earlier once every "
        "member's hooks, or else its run(), have returned",
    )
    fence_s: float | None = Field(
        None, gt=0, description="no two attempts of the gang ever run at once, even when a "
        "node is cut off from the network and keeps running: a member out of touch with "
        "the cluster (its GCS) for this long ends itself, and the gang is not started again "
        "within this long of a restart, preemption or requeue. Costs this much on each of "
        "those, and a GCS outage longer than it ends the gang's members (the gang then "
        "restarts). Unset: a member ends as soon as it hears that the cluster declared its "
        "node dead, which a cut-off node hears only when the network returns",
    )
    resize: Resize = Field(
        Resize.LIVE, description="elastic roles: how members live through a resize; 'live' "
        "adds or removes members and tells the others (world size, peers, on_resize), "
        "'restart' restarts the whole gang at its new size from its checkpoint (as Ray "
        "Train V2 does)")
    checkpoint_interval_s: float | None = Field(
        None, gt=0, description="how often the gang saves its progress while it runs; "
        "reclaim and preempt then stop, of gangs alike, the one with the least work since "
        "its last save (unset: since its last start)",
    )
    max_runtime_s: float | None = Field(
        None, gt=0, description="the longest a run of the gang may last: it is cancelled "
        "then (Slurm's time limit, Kueue's max-exec-time-seconds); at most PolicyConfig."
        "backfill_max_runtime_s, it may pass a blocked gang of its queue. Unset: no limit")
    topology: Topology | None = Field(
        None, description="where the gang's members may sit, by node labels: all in one "
        "domain of a level (`required`), in as few as possible (`preferred`), or in "
        "segments of consecutive ranks each in one domain (`segment`, `segment_level`)")
    ratio: dict[str, Annotated[int, Field(ge=1, le=MAX_MEMBERS)]] | None = Field(
        None, description="elastic roles that grow and shrink together in whole steps, "
        'members per step by role, e.g. {"prefill": 2, "decode": 1}: core/ratio.py')

    @model_validator(mode="after")
    def _roles_consistent(self) -> GangSpec:
        names = [role.name for role in self.roles]
        seen: set[str] = set()
        for i, name in enumerate(names):
            if name in seen:
                raise ValueError(f"roles[{i}].name: role {name!r} is declared twice")
            seen.add(name)
        for i, role in enumerate(self.roles):
            for dep in role.after:
                if dep == role.name:
                    raise ValueError(f"roles[{i}].after: role {role.name!r} cannot wait for itself")
                if dep not in seen:
                    raise ValueError(
                        f"roles[{i}].after: unknown role {dep!r} (roles are: {', '.join(names)})"
                    )
        cycle = find_cycle({r.name: r.after for r in self.roles})
        if cycle:
            raise ValueError(f"roles.after: startup order has a cycle: {' -> '.join(cycle)}")
        if self.strategy is Strategy.STRICT_SPREAD and self.world_size > MAX_MEMBERS:
            raise ValueError(f"strategy: STRICT_SPREAD over more than {MAX_MEMBERS} members")
        self._topology_consistent()
        if self.ratio is not None and (problem := ratio_problem(
                {r.name: (r.minimum, r.replicas) for r in self.roles}, self.ratio)):
            raise ValueError(problem)
        return self

    def _topology_consistent(self) -> None:
        ruled = [(f"roles[{i}].topology", r.replicas, r.topology)
                 for i, r in enumerate(self.roles) if r.topology is not None]
        if self.topology is not None:
            ruled.insert(0, ("topology", self.world_size, self.topology))
        if not ruled:
            return
        elastic = next((r for r in self.roles if r.elastic), None)
        if elastic is not None:
            raise ValueError(f"{ruled[0][0]}: not supported with elastic roles yet (role "
                             f"{elastic.name!r} runs between {elastic.minimum} and "
                             f"{elastic.replicas} members)")
        for where, members, rule in ruled:
            problem = check_segments(rule, members, where)
            if problem:
                raise ValueError(problem)
        if self.topology is not None and self.topology.segment is not None and len(ruled) > 1:
            raise ValueError(f"{ruled[1][0]}: a role cannot have a topology of its own when "
                             f"the gang's is cut in segments (segments run across roles, by "
                             f"rank)")

    # Derived views (cached: specs are frozen) ----------------------------------------------
    @cached_property
    def world_size(self) -> int:
        return sum(role.replicas for role in self.roles)

    @cached_property
    def slots(self) -> tuple[MemberSlot, ...]:
        """Every member, in rank order: roles in declaration order, replicas consecutive."""
        out: list[MemberSlot] = []
        for role in self.roles:
            for index in range(role.replicas):
                out.append(MemberSlot(role.name, index, len(out)))
        return tuple(out)

    @cached_property
    def bundles(self) -> tuple[Resources, ...]:
        """One bundle per member, in rank order (bundle i belongs to rank i)."""
        by_role = {role.name: role.resources for role in self.roles}
        return tuple(by_role[slot.role] for slot in self.slots)

    @cached_property
    def total(self) -> Resources:
        total = Resources()
        for role in self.roles:
            total = total + role.resources * role.replicas
        return total

    # Elastic views: the minimum is what admission reserves, all or nothing; the slots
    # beyond it are the surplus, added and taken back one member (or ratio step) at a time.
    @cached_property
    def elastic(self) -> bool:
        return any(role.elastic for role in self.roles)

    @cached_property
    def min_slots(self) -> tuple[MemberSlot, ...]:
        """The members of the minimum (each role's first `minimum`), in rank order."""
        minimum = {role.name: role.minimum for role in self.roles}
        return tuple(s for s in self.slots if s.index < minimum[s.role])

    @cached_property
    def surplus_units(self) -> tuple[tuple[str, ...], ...]:
        """The members beyond the minimum, in the order they grow, cut in what grows and
        shrinks together: a ratio step, or one member (core/ratio.py)."""
        return growth_units([(r.name, r.minimum, r.replicas) for r in self.roles], self.ratio)

    @cached_property
    def ratio_steps(self) -> tuple[tuple[str, ...], ...]:
        """The ratio's steps (their members), in the order they grow (none: no ratio)."""
        return tuple(u for u in self.surplus_units if self.ratio and
                     self.slots_by_name[u[0]].role in self.ratio)

    @cached_property
    def surplus_slots(self) -> tuple[MemberSlot, ...]:
        """The members beyond the minimum, in the order they grow in: rank order, but a
        ratio step's members together (`surplus_units`)."""
        return tuple(self.slots_by_name[m] for unit in self.surplus_units for m in unit)

    def surplus_running(self, running: Mapping[str, int]) -> tuple[MemberSlot, ...]:
        """The surplus members of a gang found running `running[role]` members per role (a
        restarted scheduler reads them back from what runs): whole units only, in growth
        order, while each role has members left beyond its minimum to fill them."""
        left = {r.name: running.get(r.name, 0) - r.minimum for r in self.roles}
        found: list[MemberSlot] = []
        for unit in self.surplus_units:
            needs = Counter(self.slots_by_name[m].role for m in unit)
            if all(left[role] >= n for role, n in needs.items()):
                found.extend(self.slots_by_name[m] for m in unit)
                for role, n in needs.items():
                    left[role] -= n
        return tuple(found)

    @cached_property
    def min_bundles(self) -> tuple[Resources, ...]:
        """One bundle per member of the minimum, in `min_slots` order."""
        by_role = {role.name: role.resources for role in self.roles}
        return tuple(by_role[slot.role] for slot in self.min_slots)

    @cached_property
    def shape(self) -> tuple[Strategy, tuple[Resources, ...], Layout | None]:
        """What placement reads of the minimum (`core.gang.Shape`): gangs of one shape fit
        or do not fit together. Hashed once (a cycle looks shapes up for every gang it
        offers), one object for equal shapes (`hashed.one_of`: lines compare them)."""
        return one_of(HashedTuple((self.strategy, self.min_bundles, self.layout)))

    @cached_property
    def min_total(self) -> Resources:
        total = Resources()
        for role in self.roles:
            total = total + role.resources * role.minimum
        return total

    @cached_property
    def layout(self) -> Layout | None:
        """What placement reads of the topologies asked for (None: none)."""
        return layout_of(self.topology, [(r.name, r.replicas, r.topology) for r in self.roles])

    @cached_property
    def slots_by_name(self) -> dict[str, MemberSlot]:
        return {slot.name: slot for slot in self.slots}

    def bundle_of(self, member: str) -> Resources:
        """The bundle of member `member` ("<role>-<index>")."""
        return self.bundles[self.slots_by_name[member].rank]

    def role(self, name: str) -> RoleSpec:
        for role in self.roles:
            if role.name == name:
                return role
        raise KeyError(name)

    def startup_waves(self) -> list[list[str]]:
        """Roles grouped by startup order: a role comes after every role in its `after`."""
        done: set[str] = set()
        waves: list[list[str]] = []
        remaining = [r for r in self.roles]
        while remaining:
            wave = [r.name for r in remaining if set(r.after) <= done]
            waves.append(wave)
            done.update(wave)
            remaining = [r for r in remaining if r.name not in done]
        return waves


class SpecError(ValueError):
    """A gang spec failed validation; `problems` lists (field path, message) pairs."""

    def __init__(self, what: str, problems: list[tuple[str, str]]):
        self.what, self.problems = what, problems
        lines = [f"  {field}: {message}" if field else f"  {message}" for field, message in problems]
        plural = "s" if len(problems) != 1 else ""
        super().__init__(f"invalid {what}: {len(problems)} problem{plural}\n" + "\n".join(lines))

    def __reduce__(self) -> tuple[type[SpecError], tuple[str, list[tuple[str, str]]]]:
        # Raised in the scheduler actor (a deployment's app read there), it comes back
        # pickled: its arguments, not its message, rebuild it.
        return (SpecError, (self.what, self.problems))


def describe_errors(
    error: ValidationError | Iterable[ErrorDetails],
) -> Iterator[tuple[str, str]]:
    """(field path, message) for each pydantic error, in `roles[0].replicas` notation
    (a ValidationError, or its `errors()` as FastAPI reports them)."""
    items = error.errors() if isinstance(error, ValidationError) else error
    for item in items:
        if _spurious_too_short(item):
            continue
        path = ""
        for part in item["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        message = item["msg"].removeprefix("Value error, ")
        # Checks across fields (`_roles_consistent`, a nested model's own) put their field
        # first in the message: it goes on the path.
        match = _LEADING_PATH.match(message)
        if match and item["type"] == "value_error":
            lead, message = match.groups()
            path = f"{path}.{lead}" if path else lead
        if item["type"] not in ("value_error", "missing") and "input" in item:
            message += f" (got {item['input']!r})"
        yield path, message


_LEADING_PATH = re.compile(r"^([A-Za-z_][\w.\[\]]*): (.*)$", re.DOTALL)


def _spurious_too_short(item: ErrorDetails) -> bool:
    # pydantic counts only the items that validated, so one bad role also reports
    # "roles: Tuple should have at least 1 item" although the input has one.
    if item["type"] != "too_short":
        return False
    given = item.get("input")
    return hasattr(given, "__len__") and len(given) >= item.get("ctx", {}).get("min_length", 0)


def validated(model: type[_M], what: str, fields: dict[str, object]) -> _M:
    """Build `model`, turning pydantic's error into a `SpecError` that names each field."""
    try:
        return model(**fields)
    except ValidationError as error:
        raise SpecError(what, list(describe_errors(error))) from None


def gang_spec(what: str, **fields: object) -> GangSpec:
    return validated(GangSpec, what, fields)


def role_spec(what: str, **fields: object) -> RoleSpec:
    return validated(RoleSpec, what, fields)
