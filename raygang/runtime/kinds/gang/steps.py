"""The single steps a launch takes on Ray, each safe to repeat or to take on nothing:
kill a member, remove a placement group, wait for groups to be ready, for killed members'
names to be free, for a body to end; and how a member's failure and its preemption reply
are told (`launch.GangLaunch`, `elastic.ElasticLaunch`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError
from ray.util.placement_group import PlacementGroup, remove_placement_group

from raygang.control.status import GangError
from raygang.control.tasks import wait_within
from raygang.core.spec import GangSpec, MemberSlot
from raygang.runtime.names import NAMESPACE

log = logging.getLogger(__name__)


def describe_failure(slot: MemberSlot | None, exc: BaseException) -> GangError:
    """The member's own exception class and message, whichever way Ray delivered it."""
    member = f"{slot.role}-{slot.index}" if slot else None
    rank = slot.rank if slot else None
    if isinstance(exc, RayTaskError):
        cause = exc.cause if exc.cause is not None else exc
        return GangError(
            member=member, rank=rank, error_type=type(cause).__name__,
            message=str(cause), traceback=str(exc),
        )
    if isinstance(exc, RayActorError):
        first = (getattr(exc, "error_msg", None) or str(exc)).strip().splitlines()[0]
        return GangError(member=member, rank=rank, error_type="ActorDiedError", message=first)
    return GangError(member=member, rank=rank, error_type=type(exc).__name__, message=str(exc))


def kill_member(handle: Any, name: str) -> None:
    """Kill a member actor (None: none). Never raises."""
    if handle is None:
        return
    try:
        ray.kill(handle, no_restart=True)
    except Exception:  # already gone
        log.debug("kill of %s failed", name, exc_info=True)


def remove_group(pg: PlacementGroup | None, name: str) -> None:
    """Remove a placement group (None: none). Never raises."""
    if pg is None:
        return
    try:
        remove_placement_group(pg)
    except Exception:
        log.warning("removing placement group %s failed", name, exc_info=True)


async def names_free(names: Sequence[str], timeout: float = 10.0) -> None:
    """Wait until killed members' names are free again (a restarted member takes its
    name back; Ray frees a name once the GCS has the actor dead)."""
    deadline = time.monotonic() + timeout
    for name in names:
        while time.monotonic() < deadline:
            try:
                ray.get_actor(name, namespace=NAMESPACE)
            except ValueError:
                break
            await asyncio.sleep(0.05)


async def ready_within(pgs: Sequence[PlacementGroup], timeout: float) -> bool:
    """Whether every group became ready within `timeout` (a group's error is raised).
    Not asyncio.wait_for: a cancellation that arrives as a group becomes ready must not be
    swallowed, or the gang would run on (`wait_within`)."""
    done, pending = await wait_within([pg.ready() for pg in pgs], timeout)
    for ready in done:
        ready.result()
    return not pending


async def settled(ref: Any) -> None:
    try:
        await ref
    except Exception:  # noqa: BLE001 - a body that raised or died has ended too
        pass


def preempt_entry(slot: MemberSlot, hooks: int = 0, error: GangError | str | None = None,
                   running: bool = False) -> dict:
    if isinstance(error, GangError):
        error = f"{error.error_type}: {error.message}"
    return {"member": f"{slot.role}-{slot.index}", "rank": slot.rank, "hooks": hooks,
            "error": error, "running": running}


def role_sizes(spec: GangSpec, world: Sequence[MemberSlot]) -> dict[str, int]:
    counts = Counter(slot.role for slot in world)
    return {role.name: counts[role.name] for role in spec.roles}
