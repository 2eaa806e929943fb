"""The control plane's scheduling loop as the simulator runs it: the product's own
`control.loop.SchedulingLoop`, given two options about the environment, not the decisions:

- No re-checks after a release (`release_recheck_s=()`). On Ray, the GCS view of free
  resources lags a placement group's removal, so the loop looks again 0.1, 0.3 and 1 s
  later. The simulated cluster's view never lags: those cycles would decide on the very
  snapshot the first one saw, and they were three quarters of a replay's cycles.
  (tests/sim checks that a replay decides the same either way: `product_loop`.)
- The decision may be another function than `core.schedule`: a baseline's, of the same
  signature `(snapshot, backlog, policy config, now) -> Plan`. Observing, applying the
  plan through the fleet and its drivers, and the lifecycle stay the product's. (The
  decision's thread runs inline here: see clock.py.)
"""

from __future__ import annotations

from collections.abc import Callable

from raygang.control.loop import RELEASE_RECHECK_S, Decide, SchedulingLoop
from raygang.control.plane import ControlPlane
from raygang.control.ports import Cluster, Metrics
from raygang.core.schedule import schedule

__all__ = ["Decide", "install"]


def install(plane: ControlPlane, cluster: Cluster, metrics: Metrics,
            clock: Callable[[], float], decide: Decide = schedule,
            recheck: bool = False) -> None:
    """Give `plane` a loop deciding with `decide` (before the plane is started: the fleet
    and the plane reach their loop through `plane.loop` when they call it); `recheck`:
    with the product's re-checks after a release."""
    plane.loop = SchedulingLoop(plane.registry, plane.fleet, cluster, metrics, None,
                                lambda: plane.config, clock, decide,
                                RELEASE_RECHECK_S if recheck else ())
    plane.fleet.settle_s = 0.0  # the simulated view never lags a release (fleet.SETTLE_S)
