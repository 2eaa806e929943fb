"""A Serve application of several deployments as one gang: the Serve side.

`read` lists the deployments of an application's graph with their own options (what
`core.serve_app` merges with the deploy-time ones into the gang's roles); `complete`
gives a `DeploymentSpec` its roles when it is submitted; `placed` gives each role's
deployment exactly its replicas and nodes when the gang starts:

- a replica of one bundle: Serve's gang scheduling, as an application's ingress gets it
  (`serving.deployment_options`: one placement group for all the deployment's replicas,
  nothing held unless all fit);
- a replica of several bundles (tensor parallel workers beside it): a placement group per
  replica with the replica's own strategy (Serve allows no strategy with a gang, and a
  gang would flatten every replica's bundles into one group, splitting a replica's TP
  workers across nodes); the replica's actor keeps what it asks for when that fits in the
  first bundle (as Serve places it there), else takes the first bundle.

Each deployment's bundles carry a node-id label selector of its role's nodes; deployments
that ask for nothing are left to Serve. raygang's holds made the whole application all or
nothing; the holds then go and Serve creates its groups on those nodes.
Serve has no selector per replica: within a role's nodes it chooses where each replica goes
(the books then follow it). Two roles that share nodes could so be packed otherwise than
raygang planned, and one's group left waiting: the startup timeout then deletes the whole
application (`serving.start_app`), never leaving a part of it running.
Importing this module imports `ray.serve`: import it lazily.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ray.serve import Application

from raygang.core.resources import Resources
from raygang.core.serve_app import AppDeployment, DeploymentOptions
from raygang.core.spec import GangSpec, Strategy
from raygang.core.workload_specs import DeploymentSpec
from raygang.runtime import serving
from raygang.runtime.placement import actor_resource_options
from raygang.runtime.ray_private import serve_deployment_options, serve_rebuild


def read(app: Any) -> list[AppDeployment]:
    """The deployments of application `app` (or its import path), children first, the
    ingress last, each with its own options."""
    found: list[AppDeployment] = []

    def note(name: str, deployment: Any) -> Any:
        own = serve_deployment_options(deployment)
        found.append(AppDeployment(
            name=name, replicas=own["replicas"], min_replicas=own["min_replicas"],
            max_replicas=own["max_replicas"], actor=own["actor"], bundles=own["bundles"],
            strategy=own["strategy"]))
        return deployment

    serve_rebuild(serving.resolve_app(app), note)
    found[-1] = replace(found[-1], ingress=True)  # the root: visited last
    return found


def complete(deployment: DeploymentSpec, app: Any = None) -> DeploymentSpec:
    """`deployment` with its application's graph read (`DeploymentSpec.with_app`): its
    roles, when the app has several deployments or `deployments` were given. Raises
    SpecError naming the deployment and field that is wrong, ValueError/TypeError when the
    app cannot be read."""
    app = app if app is not None else deployment.import_path
    if app is None:
        return deployment  # the plane says what is missing
    with serving.BUILDING:
        return deployment.with_app(read(app))


def placed(app: Any, deployment: DeploymentSpec, spec: GangSpec,
           nodes: Sequence[str]) -> Application:
    """A copy of `app` in which each role's deployment runs its minimum's replicas on its
    nodes only (`nodes`: one per member of the minimum, in `spec.min_slots` order)."""
    roles = deployment.roles
    by_role: dict[str, list[str]] = {}
    for slot, node in zip(spec.min_slots, nodes):
        by_role.setdefault(slot.role, []).append(node)
    given = deployment.deployments or {}

    def change(name: str, d: Any) -> Any:
        options = given.get(name)
        if options is None:
            return d  # asks for nothing: Serve places it
        own = Resources(serve_deployment_options(d)["actor"])
        return d.options(**_role_options(options, by_role[roles[name]], own,
                                         deployment.strategy.value, d.ray_actor_options))

    return serve_rebuild(serving.resolve_app(app), change)


def _role_options(options: DeploymentOptions, nodes: Sequence[str], own: Resources,
                  strategy: str, actor_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Serve options of one role's deployment: `len(nodes)` replicas on `nodes`."""
    bundles = options.replica_bundles
    several = len(bundles) > 1
    # An elastic deployment's replicas each have a group of their own (its count changes)
    result = serving.deployment_options(len(nodes), bundles[0].to_dict(), nodes, strategy,
                                        gang=not several and not options.elastic)
    actor = bundles[0]
    if several:
        result["placement_group_bundles"] = [b.to_dict() for b in bundles]
        result["placement_group_strategy"] = (options.strategy or Strategy.PACK).value
        if own and own.fits_in(bundles[0]):
            actor = own
    kept = {k: v for k, v in (actor_options or {}).items() if k not in serving.RESOURCE_KEYS}
    result["ray_actor_options"] = {**kept, **actor_resource_options(actor)}
    return result
