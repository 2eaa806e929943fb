"""Placement groups as every kind uses them: the actor options that take a whole bundle, and
how raygang waits on a group it is about to remove or hand over.

Ray 2.60 leaks the bundles of a placement group removed while they are being prepared
(ray-project/ray #64693; see `GangLaunch.close`): a group not yet confirmed gets up to
SETTLE_S to become ready before it is removed. Used by a gang's launch (its group and its
members' actor options), by the hand-off budgets (hold groups) and by Serve deployments
(their replicas' actor options).
"""

from __future__ import annotations

from typing import Any

from ray.util.placement_group import PlacementGroup

from raygang.control.tasks import wait_within
from raygang.core.resources import Resources

SETTLE_S = 10.0


async def wait_ready(pg: PlacementGroup, timeout: float) -> None:
    """Until `pg` is ready, removed, or `timeout` seconds passed; never raises for it."""
    done, _ = await wait_within([pg.ready()], timeout)
    for ready in done:
        if not ready.cancelled():
            ready.exception()  # retrieved: a removed group's error is expected here


def actor_resource_options(bundle: Resources) -> dict[str, Any]:
    """Ask, inside the bundle, for all of it (so the member sees its GPUs)."""
    amounts = bundle.to_dict()
    options: dict[str, Any] = {
        "num_cpus": amounts.pop("CPU", 0),
        "num_gpus": amounts.pop("GPU", 0),
    }
    memory = amounts.pop("memory", 0)
    if memory:
        options["memory"] = memory
    amounts.pop("object_store_memory", None)  # reserved by the bundle; actors cannot ask
    if amounts:
        options["resources"] = amounts
    return options
