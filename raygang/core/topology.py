"""Topology: which nodes a gang's members may share, by the labels of Ray nodes.

A label key is a *level* (`rack`, an NVLink domain, `topology.kubernetes.io/zone`); the
alive nodes carrying one value of it form a *domain* (rack `r1`). Ray gives every node
`ray.io/...` labels of its own; others come from `ray start --labels`,
`Cluster.add_node(labels=...)` or KubeRay's `rayStartParams`. A gang, or one of its
roles, may ask for:

- `required`: every member inside one domain of that level (KAI's required placement,
  Kueue's `podset-required-topology`): a node without the label is never used;
- `preferred`: as few domains of that level as it can (KAI's preferred placement,
  Kueue's `podset-preferred-topology`): one if some domain has room, else the fewest,
  filling the roomiest first in rank order; never a reason to wait;
- `segment` members of consecutive ranks at a time, each such segment inside one domain of
  `segment_level` (Kueue's slice size and `podset-slice-required-topology`; KAI's
  segments): tensor-parallel groups on one NVLink domain while the gang spans racks.

`Layout` is what placement reads of a spec (core/domains.py); `pins` what the runtime adds
to each bundle's label selector, so that Ray itself refuses a node outside the domain.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

# A Kubernetes-style label key, as Ray checks it: an optional DNS-subdomain prefix and '/',
# then a name of up to 63 characters.
_NAME = r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*"
_LABEL_KEY = re.compile(rf"^(({_PREFIX})/)?{_NAME}$")


def _label_key(value: str) -> str:
    prefix = value.rsplit("/", 1)[0] if "/" in value else ""
    if len(prefix) > 253 or not _LABEL_KEY.match(value):
        raise ValueError(
            f"must be a node label key such as 'rack' or 'example.com/rack' (an optional "
            f"DNS prefix and '/', then up to 63 letters, digits, '-', '_' or '.', starting "
            f"and ending with a letter or digit), got {value!r}")
    return value


LabelKey = Annotated[str, AfterValidator(_label_key)]


class Topology(BaseModel):
    """Where the members of a gang (or of one role) may sit, by node labels.

    `Topology(required="zone", preferred="rack")`: all in one zone, in as few racks as
    possible. `Topology(segment=4, segment_level="nvlink")`: ranks 0-3 on one NVLink
    domain, 4-7 on one (maybe another), and so on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    required: LabelKey | None = Field(
        None, description="label key: every member on nodes sharing one value of it (one "
        "rack, one zone); nodes without the label are not used")
    preferred: LabelKey | None = Field(
        None, description="label key: as few distinct values of it as possible (inside the "
        "required domain, if any); never a reason to wait")
    segment: int | None = Field(
        None, ge=1, description="members of consecutive ranks, this many at a time, each "
        "group inside one domain of `segment_level`; must divide the member count")
    segment_level: LabelKey | None = Field(
        None, description="label key whose domains hold each segment (with `segment`)")

    @model_validator(mode="after")
    def _consistent(self) -> Topology:
        if (self.segment is None) != (self.segment_level is None):
            if self.segment is None:
                raise ValueError("segment: needed with segment_level (how many members of "
                                 "consecutive ranks share one domain), e.g. 4")
            raise ValueError("segment_level: needed with segment (the label key whose "
                             "domains hold each segment), e.g. 'rack'")
        if self.required is None and self.preferred is None and self.segment is None:
            raise ValueError("set at least one of required, preferred, segment (an empty "
                             "topology asks for nothing)")
        if self.required is not None and self.preferred == self.required:
            raise ValueError(f"preferred: {self.preferred!r} is the required level already "
                             f"(every member is in one domain of it); prefer a finer one")
        if self.required is not None and self.segment_level == self.required:
            raise ValueError(f"segment_level: {self.segment_level!r} is the required level "
                             f"already (every segment is in its one domain); use a finer one")
        return self

    @property
    def pinned(self) -> tuple[str, ...]:
        """The levels a member's domain is fixed at: required, then the segments'."""
        return tuple(k for k in (self.required, self.segment_level) if k is not None)

    def describe(self) -> str:
        parts = []
        if self.required:
            parts.append(f"required {self.required!r}")
        if self.preferred:
            parts.append(f"preferred {self.preferred!r}")
        if self.segment:
            parts.append(f"segments of {self.segment} within one {self.segment_level!r}")
        return ", ".join(parts)


def check_segments(topology: Topology, members: int, where: str) -> str | None:
    """Why `topology`'s segments do not cut `members` members in whole segments."""
    if topology.segment is not None and members % topology.segment:
        return (f"{where}.segment: {topology.segment} does not divide the {members} members "
                f"(segments are whole: use a divisor of {members})")
    return None


@dataclass(frozen=True, slots=True)
class Span:
    """Bundles `start` to `stop` (exclusive, rank order) of one role with a rule of its own."""

    role: str
    start: int
    stop: int
    rule: Topology


@dataclass(frozen=True, slots=True)
class Layout:
    """What placement reads of a gang's topology: the gang's rule over all its bundles,
    and the roles with a rule of their own, over their bundles."""

    gang: Topology | None
    roles: tuple[Span, ...] = ()

    @property
    def levels(self) -> tuple[str, ...]:
        """Every level whose domain a member is pinned to, without repeats."""
        keys = list(self.gang.pinned if self.gang else ())
        for span in self.roles:
            keys += span.rule.pinned
        return tuple(dict.fromkeys(keys))

    def pinned_at(self, index: int) -> tuple[str, ...]:
        keys = list(self.gang.pinned if self.gang else ())
        for span in self.roles:
            if span.start <= index < span.stop:
                keys += span.rule.pinned
        return tuple(dict.fromkeys(keys))


def layout_of(gang: Topology | None, roles: Sequence[tuple[str, int, Topology | None]]
              ) -> Layout | None:
    """The layout of a gang whose roles are (name, members, topology), in rank order;
    None when nobody asks for one (placement then never looks at labels)."""
    spans, start = [], 0
    for name, members, rule in roles:
        if rule is not None:
            spans.append(Span(name, start, start + members, rule))
        start += members
    if gang is None and not spans:
        return None
    return Layout(gang, tuple(spans))


def pins(layout: Layout | None, nodes: Sequence[str],
         labels: Mapping[str, Mapping[str, str]]) -> list[dict[str, str]]:
    """Per bundle, the labels its node must carry beyond its id: the value of each level
    its domain is fixed at (required, segments; not preferred) on the node chosen for it.
    Added to the node-id selector, Ray places the bundle nowhere else even if the node's
    labels are not what the scheduler saw. A node whose labels are unknown adds none."""
    out: list[dict[str, str]] = []
    for i, node in enumerate(nodes):
        have = labels.get(node, {})
        keys = layout.pinned_at(i) if layout is not None else ()
        out.append({k: have[k] for k in keys if k in have})
    return out


def broken(layout: Layout, nodes: Sequence[str],
           labels: Mapping[str, Mapping[str, str]]) -> str | None:
    """Why the assignment `nodes` (one per bundle, rank order) breaks a required or a
    segment rule of `layout`, or None if it keeps them all (preferred is never broken)."""

    def split(level: str, indices: Sequence[int], what: str) -> str | None:
        values = {labels.get(nodes[i], {}).get(level) for i in indices}
        if None in values:
            return f"{what}: a member is on a node without label {level!r}"
        if len(values) > 1:
            return f"{what}: members are in {len(values)} domains of {level!r} " \
                   f"({', '.join(sorted(v for v in values if v is not None))})"
        return None

    rules = [("topology", range(len(nodes)), layout.gang)] if layout.gang else []
    rules += [(f"role {s.role!r}", range(s.start, s.stop), s.rule) for s in layout.roles]
    for what, indices, rule in rules:
        if rule is None:
            continue
        if rule.required and (problem := split(rule.required, indices, what + " required")):
            return problem
        if rule.segment and rule.segment_level:
            for at in range(0, len(indices), rule.segment):
                chunk = indices[at:at + rule.segment]
                problem = split(rule.segment_level, chunk,
                                f"{what} segment of ranks {chunk[0]}-{chunk[-1]}")
                if problem:
                    return problem
    return None
