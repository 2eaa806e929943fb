"""Workloads whose intent is more than a gang: a Ray Serve application (`DeploymentSpec`)
and a Ray Job (`JobSpec`). Each is validated at the edge as a gang is, and becomes the
`GangSpec` that reserves its capacity (`gang_spec()`)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from raygang.core.ratio import ratio_problem
from raygang.core.resources import Resources
from raygang.core.serve_app import (
    AppDeployment,
    DeploymentOptions,
    app_roles,
    role_name,
    role_problems,
)
from raygang.core.spec import (
    MAX_MEMBERS,
    NAME_PATTERN,
    Bundle,
    GangSpec,
    Priority,
    RoleSpec,
    Strategy,
    min_within,
    replicas_range,
    validated,
)


class DeploymentSpec(BaseModel):
    """A Ray Serve application run as a gang: `replicas` replicas of its ingress deployment,
    each reserving `resources`, admitted whole (preempting lower priorities if it must).

    Elastic: `replicas=(min, max)` (or `min_replicas`) is admitted at `min` and grows
    toward `max`, on the nodes of its minimum only (Serve's node selector cannot change
    without restarting every replica); its surplus replicas are the first taken back, so
    it shrinks toward `min` before anyone is preempted.

    An application of several deployments (or one given `deployments`) is one gang of a
    role per deployment that asks for resources (`core.serve_app`): `deployments` maps a
    deployment's name to its options; what is not given there is read from the
    deployment's own options when it is deployed (`with_app`). `replicas` and `resources`
    are then the per-deployment ones, not these."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="Serve application name; unique")
    import_path: str | None = Field(
        None, pattern=r"^[\w.]+:[\w.]+$",
        description='"package.module:app" naming a bound Serve application (for REST/CLI)',
    )
    replicas: int = Field(1, ge=1, le=MAX_MEMBERS, description="replicas (the most, if elastic)")
    min_replicas: int | None = Field(
        None, ge=1, le=MAX_MEMBERS, description="elastic: the fewest replicas it serves with "
        "(none: exactly `replicas`); `replicas=(min, max)` sets both")
    resources: Bundle = Field(default_factory=lambda: Resources(CPU=1))
    queue: str = Field("default", pattern=NAME_PATTERN)
    priority: Priority = "inference"
    strategy: Strategy = Strategy.PACK
    route_prefix: str | None = Field(
        None, pattern=r"^/", description='HTTP route; default "/<name>"'
    )
    reservation_timeout_s: float = Field(60.0, gt=0)
    startup_timeout_s: float = Field(300.0, gt=0)
    deployments: dict[str, DeploymentOptions] | None = Field(
        None, description="an application of several deployments: options per deployment "
        "name (replicas, resources or bundles, strategy); the rest is read from each "
        "deployment's own options")
    ratio: dict[str, Annotated[int, Field(ge=1, le=MAX_MEMBERS)]] | None = Field(
        None, description="an application of several deployments: elastic deployments that "
        'grow and shrink together in whole steps, replicas per step by deployment name, e.g. '
        '{"Prefill": 2, "Decode": 1} (core/ratio.py); checked once its deployments are known')

    @model_validator(mode="before")
    @classmethod
    def _range(cls, data: object) -> object:
        return replicas_range(data)

    @model_validator(mode="after")
    def _min_ok(self) -> DeploymentSpec:
        min_within(self)
        if self.deployments is None:  # a ratio is checked once the app's graph is read
            return self
        given = [name for name, default in _ONE_DEPLOYMENT.items()
                 if getattr(self, name) != default]
        if given:
            raise ValueError(
                f"{', '.join(given)}: the application's replicas and resources are given "
                f"per deployment, e.g. deployments={{'Decode': {{'replicas': 2}}}}")
        problems = role_problems(self.deployments)
        if self.ratio is not None and (problem := ratio_problem(
                {name: None if o.replicas is None else (o.min_replicas or o.replicas, o.replicas)
                 for name, o in self.deployments.items()}, self.ratio, "deployment")):
            problems.append(problem)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def route(self) -> str:
        return self.route_prefix or f"/{self.name}"

    @property
    def roles(self) -> dict[str, str]:
        """Each deployment that is a role -> its role's name (none: one role, "replica",
        the ingress's replicas)."""
        return {name: role_name(name) for name in self.deployments or {}}

    def with_app(self, graph: Sequence[AppDeployment]) -> DeploymentSpec:
        """This deployment, its application's graph read: each deployment that asks for
        resources a role, with its options (given ones first, then its own). An app of
        one deployment, given no `deployments`, is left as it is: its ingress is the one
        role, with `replicas` and `resources` given here."""
        if self.deployments is None and len(graph) <= 1 and self.ratio is None:
            return self
        what = f"deployment {self.name!r}"
        roles = app_roles(self.deployments, graph, what)
        return validated(DeploymentSpec, what, {**dict(self), "deployments": roles})

    def gang_spec(self) -> GangSpec:
        """The gang that reserves this deployment's replicas (one bundle each: a replica's
        bundles, summed, in an application of several deployments)."""
        if self.deployments is not None:
            roles = tuple(
                RoleSpec(name=role_name(name), replicas=options.replicas or 1,
                         min_replicas=options.min_replicas, resources=options.replica_total)
                for name, options in self.deployments.items())
        else:
            roles = (RoleSpec(name="replica", replicas=self.replicas,
                              min_replicas=self.min_replicas, resources=self.resources),)
        ratio = None if self.ratio is None or self.deployments is None else {
            role_name(name): count for name, count in self.ratio.items()}
        return GangSpec(
            name=self.name, queue=self.queue, priority=self.priority, strategy=self.strategy,
            roles=roles, ratio=ratio,
            reservation_timeout_s=self.reservation_timeout_s,
            startup_timeout_s=self.startup_timeout_s, preemption_grace_s=0,
        )


# A single deployment's fields, at their defaults: with `deployments` they stay so.
_ONE_DEPLOYMENT: dict[str, object] = {"replicas": 1, "min_replicas": None,
                                      "resources": Resources(CPU=1)}


def deployment_spec(what: str, **fields: object) -> DeploymentSpec:
    return validated(DeploymentSpec, what, fields)


DEFAULT_JOB_BUNDLE = Resources(CPU=1, GPU=1)  # a Ray Train worker's default with use_gpu


class JobSpec(BaseModel):
    """A Ray Job queued by raygang: its entrypoint starts through Ray's Job Submission API
    once the capacity it declares is admitted and reserved.

    The capacity is a set of equal bundles (the job's budget): `gpus` bundles of `bundle`
    (default one GPU and one CPU each, a Train worker's shape), or `resources` in all, cut
    into bundles of `bundle` (or one bundle if no `bundle` is given), or one `bundle`.
    Framework groups the job's driver starts (a Ray Train worker group) are placed inside
    that budget, not admitted a second time against the queue.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    entrypoint: str = Field(min_length=1, description="shell command, e.g. python train.py")
    name: str = Field("job", pattern=NAME_PATTERN)
    queue: str = Field("default", pattern=NAME_PATTERN)
    priority: Priority = "training"
    gpus: int | None = Field(None, ge=1, le=MAX_MEMBERS, description="bundles of `bundle`")
    resources: Bundle | None = Field(None, description="the job's total, cut into bundles")
    bundle: Bundle | None = Field(None, description="one bundle of the budget")
    strategy: Strategy = Strategy.PACK
    working_dir: str | None = Field(None, min_length=1)
    runtime_env: dict[str, Any] | None = None
    env_vars: dict[str, str] = Field(default_factory=dict)
    metadata: dict[str, str] = Field(default_factory=dict)
    reservation_timeout_s: float = Field(60.0, gt=0)
    startup_timeout_s: float = Field(120.0, gt=0, description="until Ray runs the entrypoint")
    preemption_grace_s: float = Field(
        30.0, ge=0, description="SIGTERM (or Train's preemption) first, a hard stop after")
    max_restarts: int = Field(0, ge=0, description="new attempts after the entrypoint fails")

    @model_validator(mode="after")
    def _one_budget(self) -> JobSpec:
        if self.gpus is not None and self.resources is not None:
            raise ValueError("gpus, resources: give one of them (gpus N means N bundles)")
        if self.gpus is None and self.resources is None and self.bundle is None:
            raise ValueError("gpus, resources, bundle: say what the job needs, e.g. gpus=2")
        if self.resources is not None and self.bundle is not None:
            count = _whole_multiple(self.resources, self.bundle)
            if count is None:
                raise ValueError(f"resources: {self.resources} is not a whole number of "
                                 f"bundles {self.bundle}")
        if self.runtime_env is not None and "working_dir" in self.runtime_env \
                and self.working_dir is not None:
            raise ValueError("working_dir: also set in runtime_env; give it once")
        return self

    @cached_property
    def bundles(self) -> tuple[Resources, ...]:
        if self.gpus is not None:
            return (self.bundle or DEFAULT_JOB_BUNDLE,) * self.gpus
        if self.resources is not None:
            if self.bundle is None:
                return (self.resources,)
            return (self.bundle,) * (_whole_multiple(self.resources, self.bundle) or 1)
        assert self.bundle is not None
        return (self.bundle,)

    def gang_spec(self) -> GangSpec:
        """The gang that reserves the job's budget (one member slot per bundle)."""
        return GangSpec(
            name=self.name, queue=self.queue, priority=self.priority, strategy=self.strategy,
            roles=(RoleSpec(name="slot", replicas=len(self.bundles),
                            resources=self.bundles[0]),),
            reservation_timeout_s=self.reservation_timeout_s,
            startup_timeout_s=self.startup_timeout_s, max_restarts=self.max_restarts,
            preemption_grace_s=self.preemption_grace_s,
        )


def _whole_multiple(total: Resources, bundle: Resources) -> int | None:
    """n if `total` is exactly n bundles, else None."""
    names = set(total) | set(bundle)
    counts = {total.units(n) / bundle.units(n) if bundle.units(n) else -1 for n in names}
    if len(counts) != 1:
        return None
    (count,) = counts
    return int(count) if count >= 1 and count == int(count) else None


def job_spec(what: str, **fields: object) -> JobSpec:
    return validated(JobSpec, what, fields)
