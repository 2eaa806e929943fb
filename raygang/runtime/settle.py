"""How raygang waits on a placement group it is about to remove or hand over.

Ray 2.60 leaks the bundles of a placement group removed while they are being prepared
(ray-project/ray #64693; see `GangLaunch.close`): a group not yet confirmed gets up to
SETTLE_S to become ready before it is removed. Used by the launcher (gangs) and by the
hand-off to Ray Train (hold groups, on the client side).
"""

from __future__ import annotations

from ray.util.placement_group import PlacementGroup

from raygang.control.tasks import wait_within

SETTLE_S = 10.0


async def wait_ready(pg: PlacementGroup, timeout: float) -> None:
    """Until `pg` is ready, removed, or `timeout` seconds passed; never raises for it."""
    done, _ = await wait_within([pg.ready()], timeout)
    for ready in done:
        if not ready.cancelled():
            ready.exception()  # retrieved: a removed group's error is expected here
