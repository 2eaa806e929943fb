"""A Ray Serve application driven as a gang ("deployment").

A hand-off gang (`runtime.handoff`): the core chooses a node per replica (preempting training
if it must) and raygang holds those bundles — so admission is all-or-nothing and waits
until preempted victims are really gone. Then the budget is handed to Serve whole: the
holds go and the app is deployed with Serve's gang scheduling pinned to exactly those
nodes (`serving.deployment_options`).
The scheduler keeps counting the replicas' bundles on those nodes while the app runs, so
nothing raygang admits can take them in between; work started outside raygang could, in
which case Serve's own gang placement group waits and the startup timeout fails the gang.

An application of several deployments is one gang of a role per deployment
(`runtime.serve_graph`): the holds of every role go at once, and each deployment gets its
role's nodes.

An elastic deployment (`replicas=(min, max)`) is deployed at its minimum with Serve's
external scaling on, each replica in a group of its own under the same node selector (a
gang's count must stay a multiple of its size), and resized live: Serve's count-only
path adds or stops replicas while the others serve on. The selector cannot change without
Serve restarting every replica, so it grows only on its minimum's nodes (the core's
`Elastic.within`; in an application, each deployment on its own role's minimum's nodes,
`Elastic.roles_within`, and a ratio step's deployments change together). Serve chooses
the nodes itself (where a replica starts, which one stops: `serving.scale`), so after
each resize raygang's books follow where the replicas really are (`core.elastic.rebooked`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from raygang.control.ports import MemberFailure
from raygang.control.status import GangError, MemberStatus
from raygang.control.tasks import run_to_completion
from raygang.core.elastic import rebooked
from raygang.core.spec import GangSpec, MemberSlot
from raygang.core.workload_specs import DeploymentSpec
from raygang.runtime.handoff.budget import Budget

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
        moved: Callable[[Mapping[str, str]], None] = lambda moves: None,
        on_member_ready: Callable[[MemberStatus], None] = lambda member: None,
    ):
        self.gang_id = gang_id
        self.spec = spec
        self.deployment = deployment
        self.app = app
        self.nodes = tuple(nodes)  # its minimum's: the node selector of every replica
        self.http_port = http_port
        self._budget = Budget(gang_id, spec.min_bundles, nodes, spec.reservation_timeout_s)
        self._deployed = False
        # Each replica's booking (member name -> node), followed after each resize
        # (`moved` books it in the gang's record too).
        self.booked = {slot.name: node for slot, node in zip(spec.min_slots, nodes)}
        self._moved = moved
        self._on_member_ready = on_member_ready
        self._resizing = asyncio.Lock()  # one count change at a time

    @classmethod
    def adopted(cls, gang_id: str, spec: GangSpec, deployment: DeploymentSpec,
                nodes: Sequence[str], http_port: int | None,
                surplus: Mapping[str, str] | None = None,
                moved: Callable[[Mapping[str, str]], None] = lambda moves: None,
                ) -> ServeLaunch:
        """The launch of a deployment a previous scheduler process deployed: the Serve app
        lives on (Serve's controller is detached), so it is watched, not deployed again.
        `surplus`: an elastic one's replicas beyond its minimum (name -> node)."""
        launch = cls(gang_id, spec, deployment, None, nodes, http_port, moved)
        launch.booked.update(surplus or {})
        launch._deployed = True
        return launch

    def lost_members(self) -> list[str]:
        """Serve starts its replicas itself: none to tell."""
        return []

    async def reserve(self) -> None:
        await self._budget.hold()

    # `serving` imports ray.serve (~0.7 s): only the scheduler pays for it, when it first
    # runs a deployment, not every driver that imports the scheduler module.

    async def start_members(self) -> None:
        """Hand the reserved nodes to Serve and wait until the application is RUNNING."""
        from raygang.runtime import serving

        d = self.deployment

        def build() -> Any:  # in a thread, as Serve's other builds here (serving.BUILDING)
            with serving.BUILDING:
                if d.deployments is not None:  # several deployments: each on its role's nodes
                    from raygang.runtime import serve_graph

                    return serve_graph.placed(self.app, d, self.spec, self.nodes)
                return serving.with_options(
                    serving.resolve_app(self.app),
                    serving.deployment_options(len(self.nodes), d.resources.to_dict(),
                                               self.nodes, d.strategy.value,
                                               gang=not self.spec.elastic),
                )

        try:
            app = await asyncio.to_thread(build)
            await asyncio.to_thread(serving.ensure_serve_started, self.http_port)
        except Exception as error:
            raise MemberFailure(GangError(error_type=type(error).__name__, message=str(error)))
        self._budget.take(self.spec.min_bundles)  # Serve's own gang placement group takes
        # the holds' place
        self._deployed = True
        try:
            await serving.start_app(d.name, app, d.route, d.startup_timeout_s,
                                    scalable=self.spec.elastic)
        except serving.ServeAppFailed as error:
            raise MemberFailure(GangError(error_type="ServeAppFailed", message=str(error)))
        if d.deployments is not None:
            self._report_replicas(await asyncio.to_thread(serving.deployment_replicas, d.name))

    def _report_replicas(self, running: Mapping[str, Sequence[tuple[str, str]]]) -> None:
        """An application of several deployments: each replica is a member of its role,
        booked where Serve runs it (Serve chooses among its role's nodes), and reported
        ready (the app is RUNNING)."""
        now = time.time()
        for deployment, role in self.deployment.roles.items():
            slots = [s for s in self.spec.min_slots if s.role == role]
            replicas = sorted(running.get(deployment, ()))
            if len(replicas) == len(slots):  # else Serve is mid-change: the books stay
                self.follow([node for node, _ in replicas], [s.name for s in slots])
            actors: dict[str, list[str]] = {}
            for node, actor in replicas:
                actors.setdefault(node, []).append(actor)
            for slot in slots:
                node = self.booked[slot.name]
                names = actors.get(node) or [""]
                self._on_member_ready(MemberStatus(
                    role=slot.role, index=slot.index, rank=slot.rank, actor_name=names.pop(0),
                    node_id=node, ready_at=now))

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

    # Resizes (an elastic deployment) ---------------------------------------------------
    async def add_members(self, members: Sequence[tuple[MemberSlot, str]]) -> list[str]:
        """Add a replica per member: Serve starts them beside the others, which serve on.
        Raises (with the count set back) if they do not all run within the startup
        timeout."""
        added = {slot.name: node for slot, node in members}
        return await self._scale({**self.booked, **added})

    async def remove_members(self, members: Sequence[MemberSlot]) -> list[str]:
        """Stop a replica per member (Serve drains it: `graceful_shutdown_timeout_s`), and
        wait until it is gone and its capacity free."""
        from raygang.runtime.serving import ServeAppFailed

        gone = {slot.name for slot in members}
        try:
            return await self._scale({m: n for m, n in self.booked.items() if m not in gone})
        except ServeAppFailed as error:  # Serve stops them still; the gang serves on
            return [str(error)]

    async def _scale(self, target: dict[str, str]) -> list[str]:
        """Set the counts to `target`'s (each deployment's, in an application of several:
        a ratio step's members change several at once) and book each replica where Serve
        put it."""
        async with self._resizing:
            before, timeout = dict(self.booked), self.spec.startup_timeout_s
            counts, old = self._counts(target), self._counts(before)
            changed = {d: n for d, n in counts.items() if n != old[d]}
            try:
                nodes = await self._set_counts(changed, timeout)
            except Exception:
                if len(target) < len(before):  # Serve stops them still, in its own time
                    self.booked = target
                if len(target) > len(before):  # growing: the gang goes on at its size
                    back = asyncio.ensure_future(
                        self._set_counts({d: old[d] for d in changed}, timeout))
                    await run_to_completion(back)
                    if not back.cancelled() and back.exception() is None:
                        self.follow_all(back.result())
                raise
            self.booked = target
            return self.follow_all(nodes)

    def _counts(self, booked: Mapping[str, str]) -> dict[str | None, int]:
        """Replicas per deployment (None: the ingress, the only one resized in an
        application of one deployment) of a booking (member name -> node)."""
        if self.deployment.deployments is None:
            return {None: len(booked)}
        return {d: len(self._members(role, booked)) for d, role in self.deployment.roles.items()}

    @staticmethod
    def _members(role: str, booked: Mapping[str, str]) -> list[str]:
        return [m for m in booked if m.rpartition("-")[0] == role]  # `<role>-<index>`

    async def _set_counts(self, counts: Mapping[str | None, int], timeout: float
                          ) -> dict[str | None, list[str]]:
        from raygang.runtime import serving

        name = self.deployment.name
        if None in counts:
            return {None: await serving.scale_app(name, counts[None], timeout)}
        found = await serving.scale(name, {d: n for d, n in counts.items() if d}, timeout)
        return {d: nodes for d, nodes in found.items()}

    def follow_all(self, nodes: Mapping[str | None, Sequence[str]]) -> list[str]:
        """`follow` for each deployment (None: the ingress of an app of one) of `nodes`."""
        if None in nodes:
            return self.follow(nodes[None])
        roles = self.deployment.roles
        return [problem for d, where in nodes.items() if d is not None
                for problem in self.follow(where, self._members(roles[d], self.booked))]

    def follow(self, nodes: Sequence[str], members: Sequence[str] | None = None) -> list[str]:
        """Book the replicas on `nodes` (where Serve runs them, one each): what moved.
        `members`: those of one deployment (default: all)."""
        booked = self.booked if members is None else {m: self.booked[m] for m in members}
        moves = rebooked(booked, nodes)
        if not moves:
            return []
        self.booked.update(moves)
        self._moved(moves)
        where = ", ".join(f"{member} on {node[:8]}" for member, node in moves.items())
        return [f"Serve placed {where}, not where raygang booked: the books follow Serve"]

    async def reserve_members(self, members: Sequence[tuple[MemberSlot, str]]) -> None:
        raise NotImplementedError("a deployment resizes live (Serve's count-only path)")

    async def restart(self, world: Sequence[MemberSlot],
                      stopped: Callable[[], None] | None = None) -> None:
        raise NotImplementedError("a deployment resizes live (Serve's count-only path)")

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
