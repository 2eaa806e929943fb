"""Hand-off gangs: raygang admits and reserves, a Ray library places its own group.

No Ray library can put its placement group inside another one (Ray has no nested
placement groups): Serve makes one for a gang of replicas, Ray Train one for its worker
group, and a Ray Job's driver starts such libraries itself. So raygang admits the gang as
any other, reserves its capacity as holds (`Budget`: one placement group per bundle,
`raygang-<gang>-hold-<i>`, pinned to the node the plan chose), and when the library
creates its group, hands the capacity over:

1. claim: the holds of the bundles taken are removed and the library is given their nodes
   (a node-id label selector on its bundles);
2. adopt: the library's placement group is found and checked against those nodes
   (`check_group`): it is then booked to the gang, as the holds were.

raygang's book keeps the capacity booked to the gang throughout, so nothing raygang admits
can take it in between; work started outside raygang could, in that window, and then the
library's group is not placed: the hand-off fails and the gang requeues (a lease bounds
the wait). Holds are single-bundle groups so that a claim can take some of a budget (a
job's Train run) and give them back when it ends, without touching the rest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group

from raygang.control.ports import ReservationTimeout
from raygang.control.tasks import run_to_completion
from raygang.core.budget import take
from raygang.core.resources import Resources
from raygang.runtime.names import NODE_ID_LABEL, hold_name
from raygang.runtime.placement import SETTLE_S, wait_ready

log = logging.getLogger(__name__)


class HandoffFailed(Exception):
    """The library's group is not where raygang reserved (or never came)."""


class Budget:
    """An admitted gang's bundles, each held on its node until a claim takes it."""

    def __init__(self, gang_id: str, bundles: Sequence[Resources], nodes: Sequence[str],
                 timeout_s: float):
        self.gang_id = gang_id
        self.bundles = tuple(bundles)
        self.nodes = tuple(nodes)
        self.timeout_s = timeout_s
        self._holds: dict[int, PlacementGroup] = {}
        self._settled: set[int] = set()  # holds known to be ready (not mid-prepare)
        self.claimed: set[int] = set()
        self.gone: set[int] = set()  # bundles dropped from the budget (an elastic shrink)
        self._removing: set[asyncio.Task] = set()  # holds made or removed, under way
        self.changed = asyncio.Event()  # a claim gave bundles back
        self.closing = False  # being stopped: no claim may take anything any more

    @property
    def free(self) -> list[int]:
        return [i for i in range(len(self.bundles))
                if i not in self.claimed and i not in self.gone]

    def adopt_holds(self, groups: dict[int, PlacementGroup]) -> None:
        """Holds a previous scheduler process made (recovery)."""
        self._holds.update(groups)
        self._settled.update(groups)

    async def hold(self, indices: Sequence[int] | None = None) -> None:
        """Hold these bundles (default: all) on their nodes; all ready within the timeout
        or ReservationTimeout (the holds made stay, for `close` to remove)."""
        indices = list(range(len(self.bundles)) if indices is None else indices)
        made: dict[int, PlacementGroup] = {}
        for i in indices:
            self._settled.discard(i)
            made[i] = self._holds[i] = placement_group(
                [self.bundles[i].to_dict()], strategy="STRICT_PACK",
                name=hold_name(self.gang_id, i), lifetime="detached",
                bundle_label_selector=[{NODE_ID_LABEL: self.nodes[i]}],
            )
        waits = {i: asyncio.ensure_future(made[i].ready()) for i in indices}
        try:
            done, _ = await asyncio.wait(waits.values(), timeout=self.timeout_s)
        finally:
            for wait in waits.values():
                if not wait.done():
                    wait.cancel()
        # A hold taken meanwhile (a claim came first) is not this call's to settle.
        mine = [i for i in indices if self._holds.get(i) is made[i]]
        for i in mine:
            if waits[i] in done and waits[i].exception() is None:
                self._settled.add(i)
        missing = [i for i in mine if i not in self._settled]
        if missing:
            raise ReservationTimeout(
                f"{len(missing)} of {len(indices)} bundles of {self.gang_id} were not held "
                f"on their nodes within {self.timeout_s:g}s")

    def add(self, bundles: Sequence[Resources], nodes: Sequence[str]) -> list[int]:
        """Add these bundles (an elastic gang's surplus) on their nodes, neither held nor
        claimed; their indices."""
        first = len(self.bundles)
        self.bundles += tuple(bundles)
        self.nodes += tuple(nodes)
        return list(range(first, len(self.bundles)))

    async def extend(self, bundles: Sequence[Resources], nodes: Sequence[str]) -> list[int]:
        """Add these bundles, held on their nodes; their indices. ReservationTimeout if not
        all are held in time (none stays added)."""
        added = self.add(bundles, nodes)
        try:
            await self.hold(added)
        except BaseException:
            self.drop(added)
            raise
        return added

    def drop(self, indices: Sequence[int]) -> None:
        """Take these bundles out of the budget (an elastic gang's surplus going): their
        holds go, and no claim takes them any more."""
        self.gone.update(indices)
        self.claimed.difference_update(indices)
        for i in indices:
            self._release(i)

    def take(self, wanted: Sequence[Resources]) -> list[int] | None:
        """Claim bundles holding `wanted` (core.budget.take); their holds are released at
        once (the library's group takes their place). None if the free ones cannot."""
        chosen = take(self.bundles, self.free, wanted)
        if chosen is None:
            return None
        self.claimed.update(chosen)
        for i in chosen:
            self._release(i)
        return chosen

    def give_back(self, indices: Sequence[int]) -> None:
        """A claim ended: its bundles are free for the next claim at once, and held again
        meanwhile (best effort: a hold that cannot be placed at once, because work
        outside raygang took the room, waits for it)."""
        indices = [i for i in indices if i in self.claimed]
        self.claimed.difference_update(indices)
        if not indices or self.closing:
            return
        task = asyncio.get_running_loop().create_task(self._hold_again(indices))
        self._removing.add(task)  # awaited by close() like a removal
        task.add_done_callback(self._removing.discard)
        self.changed.set()
        self.changed = asyncio.Event()

    async def _hold_again(self, indices: list[int]) -> None:
        try:
            await self.hold(indices)
        except ReservationTimeout as error:
            log.warning("%s", error)

    def _release(self, index: int) -> None:
        """Remove a hold; one still being prepared (just given back) once it settles:
        removing it mid-prepare leaks its bundle in Ray 2.60 (launcher.GangLaunch.close).
        Until then the library's group waits for the room, as Ray queues it."""
        group = self._holds.pop(index, None)
        settled = index in self._settled
        self._settled.discard(index)
        if group is None:
            return
        if settled:
            _remove(group, hold_name(self.gang_id, index))
            return
        task = asyncio.get_running_loop().create_task(self._remove_settled(group, index))
        self._removing.add(task)
        task.add_done_callback(self._removing.discard)

    async def _remove_settled(self, group: PlacementGroup, index: int) -> None:
        await run_to_completion(wait_ready(group, SETTLE_S))
        _remove(group, hold_name(self.gang_id, index))

    async def close(self) -> None:
        self.closing = True
        await self._close()

    async def _close(self) -> None:
        """Remove every hold (letting one still being prepared settle first: removing it
        mid-prepare leaks its bundle in Ray 2.60, see launcher.GangLaunch.close)."""
        unsettled = [g for i, g in self._holds.items() if i not in self._settled]
        if unsettled:
            await run_to_completion(asyncio.gather(*(wait_ready(g, SETTLE_S)
                                                     for g in unsettled)))
            self._settled.update(self._holds)  # at rest, or not being prepared at all
        for i in list(self._holds):
            self._release(i)
        if self._removing:
            await run_to_completion(asyncio.gather(*self._removing))


def holds_of(gang_id: str) -> dict[int, PlacementGroup]:
    """The holds of a gang still in Ray, by bundle index (recovery)."""
    from ray.util.placement_group import placement_group_table

    from raygang.runtime.ray_private import placement_group as by_id

    prefix = hold_name(gang_id, 0)[:-1]
    found: dict[int, PlacementGroup] = {}
    for pg_id, info in placement_group_table().items():
        name = info.get("name") or ""
        if name.startswith(prefix) and name[len(prefix):].isdigit() \
                and info.get("state") != "REMOVED":
            found[int(name[len(prefix):])] = by_id(pg_id)
    return found


def check_group(pg_id: str, placed: Sequence[str | None] | None,
                nodes: Sequence[str]) -> list[str]:
    """The node of each bundle of the library's group `pg_id` (`placed`, as
    `group_nodes` read it: the caller reads the GCS, off the scheduler's loop), checked
    against the nodes handed over: as many bundles per node at most as were handed over
    there (the book then still holds). Raises HandoffFailed otherwise, or if the group is
    not placed."""
    where = [node for node in placed or [] if node is not None]
    if placed is None or len(where) < len(placed):
        raise HandoffFailed(f"placement group {pg_id} is not placed")
    allowed: dict[str, int] = {}
    for node in nodes:
        allowed[node] = allowed.get(node, 0) + 1
    for node in where:
        allowed[node] = allowed.get(node, 0) - 1
        if allowed[node] < 0:
            raise HandoffFailed(
                f"placement group {pg_id} put more bundles on node {node[:12]} than raygang "
                f"reserved there (reserved: {sorted(set(nodes))})")
    return where


def remove_group(pg_id: str) -> None:
    from raygang.runtime.ray_private import placement_group as by_id

    _remove(by_id(pg_id), pg_id)


def _remove(group: PlacementGroup, what: str) -> None:
    try:
        remove_placement_group(group)
    except Exception as error:  # noqa: BLE001 - most likely the GCS did not answer: a
        # group left so holds its capacity, so an operator is told which
        log.warning("removing placement group %s failed: %r", what, error)
