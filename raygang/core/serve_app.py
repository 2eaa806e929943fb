"""A Serve application of several deployments as one gang (pure).

Each deployment that asks for resources is a role of the gang; its replicas are the role's
members. A replica reserves its placement group's bundles (`bundles`; Serve's
`placement_group_bundles`) or, without them, what its actor asks for (one bundle): raygang
books a replica's bundles on one node, summed, and Serve places them there (within the
deployment's nodes) with the replica's own `strategy`.

What a deployment needs comes from two places, deploy-time options first: the options
given for it at deploy time (`DeploymentOptions`, field by field), then its own options as
the runtime read them from the application's graph (`AppDeployment`). `merged` joins the
two; a deployment that then asks for nothing (no CPU, GPU or other resource) is no role:
Serve places it as it would without raygang.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from raygang.core.resources import Resources
from raygang.core.spec import (
    MAX_MEMBERS,
    NAME_PATTERN,
    Bundle,
    SpecError,
    Strategy,
    describe_errors,
    replicas_range,
)

_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_ROLE_NAME = re.compile(NAME_PATTERN)


def role_name(deployment: str) -> str:
    """The role of deployment `deployment` (Serve's names may hold any character, e.g.
    Serve LLM's "Prefill:my-model"; a role's name is part of Ray names): other characters
    become "-"."""
    return _NOT_A_NAME.sub("-", deployment).strip("-_.")[:63].strip("-_.")


class DeploymentOptions(BaseModel):
    """What one deployment of an application needs, given at deploy time. Every field is
    optional: what is not given is read from the deployment's own options (`num_replicas`
    or `autoscaling_config`, `placement_group_bundles`, `placement_group_strategy`,
    `ray_actor_options`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replicas: int | None = Field(
        None, ge=1, le=MAX_MEMBERS, description="replicas (the most, if elastic)")
    min_replicas: int | None = Field(
        None, ge=1, le=MAX_MEMBERS, description="elastic: the fewest replicas; "
        "`replicas=(min, max)` sets both")
    resources: Bundle | None = Field(
        None, description="one bundle per replica, all of it for the replica's actor")
    bundles: tuple[Bundle, ...] | None = Field(
        None, min_length=1, description="a replica's placement group bundles (Serve's "
        "placement_group_bundles; its actor runs in the first): e.g. TP=2 as two 1-GPU bundles")
    strategy: Strategy | None = Field(
        None, description="how a replica's bundles are placed (Serve's "
        "placement_group_strategy; PACK if not given)")

    @model_validator(mode="before")
    @classmethod
    def _range(cls, data: object) -> object:
        return replicas_range(data)

    @model_validator(mode="after")
    def _consistent(self) -> DeploymentOptions:
        if self.min_replicas is not None and self.replicas is not None \
                and self.min_replicas > self.replicas:
            raise ValueError(f"min_replicas: must be at most replicas ({self.replicas}), "
                             f"got {self.min_replicas}")
        if self.resources is not None and self.bundles is not None:
            raise ValueError("resources, bundles: give one (resources is one bundle)")
        if self.strategy is Strategy.STRICT_SPREAD and self.bundles is not None \
                and len(self.bundles) > 1:
            raise ValueError("strategy: a replica's bundles are reserved on one node; "
                             "STRICT_SPREAD cannot place several there")
        return self

    @property
    def replica_bundles(self) -> tuple[Resources, ...]:
        """A replica's bundles (one CPU if nothing is known)."""
        if self.bundles is not None:
            return self.bundles
        return (self.resources if self.resources is not None else Resources(CPU=1),)

    @property
    def replica_total(self) -> Resources:
        """What one replica reserves on its node: its bundles, summed."""
        return Resources.sum(self.replica_bundles)

    @property
    def elastic(self) -> bool:
        return self.min_replicas is not None and self.min_replicas < (self.replicas or 1)


@dataclass(frozen=True)
class AppDeployment:
    """One deployment of an application's graph, with its own options, as the runtime
    read them (plain data: no Serve object)."""

    name: str  # as Serve names it in the application (unique there)
    replicas: int | None = 1  # num_replicas; None with autoscaling
    min_replicas: int | None = None  # autoscaling_config's
    max_replicas: int | None = None
    actor: Mapping[str, float] = field(default_factory=lambda: {"CPU": 1.0})  # its actor's
    bundles: Sequence[Mapping[str, float]] | None = None  # placement_group_bundles
    strategy: str | None = None  # placement_group_strategy
    ingress: bool = False


def merged(given: DeploymentOptions | None, found: AppDeployment) -> DeploymentOptions | None:
    """The deployment's options, deploy-time ones first, then its own; None when it asks
    for no resources (it is then no role). Raises ValueError naming the field."""
    given = given or DeploymentOptions()
    fields: dict[str, object] = {}
    if given.replicas is not None:
        fields["replicas"], fields["min_replicas"] = given.replicas, given.min_replicas
    elif found.replicas is not None:
        fields["replicas"] = found.replicas
        fields["min_replicas"] = given.min_replicas
    else:  # Serve autoscales it: raygang keeps it between its bounds (at least one)
        top = max(found.max_replicas or 1, 1)
        fields["replicas"] = top
        fields["min_replicas"] = given.min_replicas or min(max(found.min_replicas or 1, 1), top)
    if given.resources is not None or given.bundles is not None:
        fields["resources"], fields["bundles"] = given.resources, given.bundles
    else:
        own = [Resources(b) for b in found.bundles or ()]
        if any(own):
            fields["bundles"] = tuple(own)
        elif Resources(found.actor):
            fields["resources"] = Resources(found.actor)
        else:
            return None  # asks for nothing
    fields["strategy"] = given.strategy or found.strategy or Strategy.PACK
    if fields.get("min_replicas") == fields["replicas"]:
        fields["min_replicas"] = None
    return DeploymentOptions.model_validate(fields)


def app_roles(given: Mapping[str, DeploymentOptions] | None,
              graph: Sequence[AppDeployment], what: str) -> dict[str, DeploymentOptions]:
    """Each deployment of `graph` that asks for resources, with its options: the roles of
    the application's gang, in the graph's order. Raises SpecError naming each deployment
    and field that is wrong (a deploy-time option for a deployment the app does not have,
    one its own options make invalid)."""
    given = dict(given or {})
    names = [d.name for d in graph]
    problems = [(f"deployments.{name}", f"the application has no deployment {name!r} "
                 f"(its deployments: {', '.join(names)})") for name in given if name not in names]
    roles: dict[str, DeploymentOptions] = {}
    for found in graph:
        try:
            options = merged(given.get(found.name), found)
        except ValidationError as error:
            problems += [(f"deployments.{found.name}.{path}" if path
                          else f"deployments.{found.name}", message)
                         for path, message in describe_errors(error)]
            continue
        if options is not None:
            roles[found.name] = options
        elif found.name in given:
            problems.append((f"deployments.{found.name}", "asks for no resources, so raygang "
                             "reserves nothing for it: give it resources to make it a role, "
                             "or leave it out"))
    if not roles and not problems:
        problems.append(("deployments", "no deployment of the application asks for resources: "
                         "nothing to reserve"))
    if problems:
        raise SpecError(what, problems)
    return roles


def role_problems(deployments: Mapping[str, DeploymentOptions]) -> list[str]:
    """Why these deployments cannot be the roles of one gang (names that make no role
    name, or the same one)."""
    problems: list[str] = []
    seen: dict[str, str] = {}
    for name in deployments:
        role = role_name(name)
        if not _ROLE_NAME.match(role):
            problems.append(f"deployments.{name}: makes no role name (letters, digits, "
                            "'_', '.', '-')")
        elif role in seen:
            problems.append(f"deployments.{name}: its role name {role!r} is also "
                            f"{seen[role]!r}'s")
        seen.setdefault(role, name)
    return problems
