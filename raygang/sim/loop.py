"""The control plane's scheduling loop as the simulator runs it.

Two differences from `control.loop.SchedulingLoop`, both about the environment, not the
decisions:

- A gang's release wakes the loop once. On Ray, the GCS view of free resources lags a
  placement group's removal, so the loop looks again 0.1, 0.3 and 1 s later
  (`RELEASE_RECHECK_S`). The simulated cluster's view never lags: those cycles would
  decide on the very snapshot the first one saw, and they were three quarters of a
  replay's cycles. (tests/sim checks that a replay decides the same either way.)
- The decision runs on the event loop, not in a thread (`asyncio.to_thread` would run
  inline anyway: see clock.py), and may be another function than `core.schedule` — a
  baseline's, of the same signature `(snapshot, backlog, policy config, now) -> Plan`.
  Observing, applying the plan through the fleet and its drivers, and the lifecycle stay
  the product's.
"""

from __future__ import annotations

from collections.abc import Callable

from raygang.control.loop import SchedulingLoop
from raygang.control.plane import ControlPlane
from raygang.control.ports import Cluster, Metrics
from raygang.core.backlog import Backlog
from raygang.core.config import PolicyConfig
from raygang.core.plan import Plan
from raygang.core.schedule import schedule
from raygang.core.snapshot import ClusterSnapshot

Decide = Callable[[ClusterSnapshot, Backlog, PolicyConfig, float], Plan]


class SimLoop(SchedulingLoop):
    def __init__(self, decide: Decide, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._decide = decide

    def released(self) -> None:
        self.wake()

    def cycle(self) -> None:
        prepared = self._prepare()
        if prepared is not None:
            now, snapshot, backlog, policy = prepared
            self._apply(now, self._decide(snapshot, backlog, policy, now))

    async def cycle_off_loop(self) -> None:
        self.cycle()


def install(plane: ControlPlane, cluster: Cluster, metrics: Metrics,
            clock: Callable[[], float], decide: Decide = schedule) -> None:
    """Give `plane` a `SimLoop` deciding with `decide` (before the plane is started: the
    fleet and the plane reach their loop through `plane.loop` when they call it)."""
    plane.loop = SimLoop(decide, plane.registry, plane.fleet, cluster, metrics, None,
                         lambda: plane.config, clock)
