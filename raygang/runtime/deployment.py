"""A Ray Serve application driven as a gang ("deployment").

A hand-off gang (`handoff.py`): the core chooses a node per replica (preempting training
if it must) and raygang holds those bundles — so admission is all-or-nothing and waits
until preempted victims are really gone. Then the budget is handed to Serve whole: the
holds go and the app is deployed with Serve's gang scheduling pinned to exactly those
nodes (`serving.deployment_options`).
The scheduler keeps counting the replicas' bundles on those nodes while the app runs, so
nothing raygang admits can take them in between; work started outside raygang could, in
which case Serve's own gang placement group waits and the startup timeout fails the gang.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from raygang.control.ports import MemberFailure
from raygang.control.status import GangError
from raygang.control.tasks import run_to_completion
from raygang.core.spec import DeploymentSpec, GangSpec
from raygang.runtime.handoff import Budget

WATCH_INTERVAL_S = 2.0


class ServeLaunch:
    """The run of a deployment gang (the `GangRun` port): the steps of `GangLaunch`, Serve
    underneath."""

    def __init__(
        self,
        gang_id: str,
        spec: GangSpec,
        deployment: DeploymentSpec,
        app: Any,
        nodes: Sequence[str],
        http_port: int | None,
    ):
        self.gang_id = gang_id
        self.spec = spec
        self.deployment = deployment
        self.app = app
        self.nodes = tuple(nodes)
        self.http_port = http_port
        self._budget = Budget(gang_id, spec.bundles, nodes, spec.reservation_timeout_s)
        self._deployed = False

    @classmethod
    def adopted(cls, gang_id: str, spec: GangSpec, deployment: DeploymentSpec,
                nodes: Sequence[str], http_port: int | None) -> ServeLaunch:
        """The launch of a deployment a previous scheduler process deployed: the Serve app
        lives on (Serve's controller is detached), so it is watched, not deployed again."""
        launch = cls(gang_id, spec, deployment, None, nodes, http_port)
        launch._deployed = True
        return launch

    async def reserve(self) -> None:
        await self._budget.hold()

    # `serving` imports ray.serve (~0.7 s): only the scheduler pays for it, when it first
    # runs a deployment, not every driver that imports the scheduler module.

    async def start_members(self) -> None:
        """Hand the reserved nodes to Serve and wait until the application is RUNNING."""
        from raygang.runtime import serving

        d = self.deployment
        try:
            app = serving.with_options(
                serving.resolve_app(self.app),
                serving.deployment_options(d.replicas, d.resources.to_dict(), self.nodes,
                                           d.strategy.value),
            )
            await asyncio.to_thread(serving.ensure_serve_started, self.http_port)
        except Exception as error:
            raise MemberFailure(GangError(error_type=type(error).__name__, message=str(error)))
        self._budget.take(self.spec.bundles)  # Serve's own gang placement group takes
        # the holds' place
        self._deployed = True
        try:
            await serving.start_app(d.name, app, d.route, d.startup_timeout_s)
        except serving.ServeAppFailed as error:
            raise MemberFailure(GangError(error_type="ServeAppFailed", message=str(error)))

    async def run(self) -> list[Any]:
        """Serve until undeployed (cancelled); fail if the application is lost for good."""
        from raygang.runtime import serving

        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            lost = await asyncio.to_thread(serving.app_lost, self.deployment.name)
            if lost:
                raise MemberFailure(GangError(error_type="ServeAppLost", message=lost))

    async def resume(self) -> list[Any]:
        """`run()` for an adopted deployment: watch the app that is already there."""
        return await self.run()

    async def signal_preempt(self, grace_s: float,
                             members: Sequence[Any] | None = None) -> list[dict]:
        return []  # Serve drains its replicas itself (graceful_shutdown_timeout_s)

    async def wait_bodies(self, ranks: Sequence[int], timeout: float) -> None:
        return None  # no member bodies: replicas are Serve's, and Serve drains them

    async def close(self) -> None:
        """Delete the application (if it was deployed) and the reservation. Never raises."""
        from raygang.runtime import serving

        await self._budget.close()
        if not self._deployed:
            return
        self._deployed = False
        # Finish deleting even if cancelled again meanwhile: the gang is already ending,
        # and its replicas must not outlive it.
        await run_to_completion(serving.delete_app(self.deployment.name))
