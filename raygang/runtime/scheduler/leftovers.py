"""What a restarted scheduler finds of its gangs in Ray: the `raygang-*` member actors and
placement groups left there, by gang id (recovery adopts a running gang whose parts are
all there and removes the rest)."""

from __future__ import annotations

import logging
from collections.abc import Container

import ray
from ray.util.placement_group import placement_group_table, remove_placement_group

from raygang.runtime.names import NAMESPACE, PREFIX, SCHEDULER_NAME
from raygang.runtime.ray_private import placement_group

log = logging.getLogger(__name__)


class RayLeftovers:
    """The `raygang-*` member actors and placement groups in Ray, read once (a rebuild with
    a thousand gangs must not list every actor and group per gang), by gang id."""

    def __init__(self, known: Container[str]):
        self.actors: dict[str | None, list[str]] = {}  # gang id (None: no known gang) -> names
        self.groups: dict[str | None, list[str]] = {}  # gang id -> placement group ids
        self.names: dict[str, str] = {}  # placement group id -> its name
        for actor in ray.util.list_named_actors(all_namespaces=True):
            name = actor["name"]
            if actor["namespace"] == NAMESPACE and name.startswith(PREFIX) \
                    and name != SCHEDULER_NAME:
                self.actors.setdefault(gang_of(name, known), []).append(name)
        for pg_id, info in placement_group_table().items():
            name = info.get("name") or ""
            if name.startswith(PREFIX) and info.get("state") != "REMOVED":
                self.groups.setdefault(gang_of(name, known), []).append(pg_id)
                self.names[pg_id] = name

    def take(self, gang_id: str) -> None:
        self.actors.pop(gang_id, None)
        self.groups.pop(gang_id, None)

    def clear(self, gang_id: str | None) -> int:
        """Kill the gang's members and remove its placement groups; how many there were."""
        removed = 0
        for name in self.actors.pop(gang_id, []):
            removed += self.remove(name, None)
        for pg_id in self.groups.pop(gang_id, []):
            removed += self.remove(None, pg_id)
        return removed

    def remove(self, actor: str | None, pg_id: str | None) -> int:
        """Kill member actor `actor` and remove placement group `pg_id`; how many were."""
        removed = 0
        if actor is not None:
            try:
                ray.kill(ray.get_actor(actor, namespace=NAMESPACE), no_restart=True)
                removed += 1
            except ValueError:  # gone meanwhile
                pass
        if pg_id is not None:
            try:  # by id: a name is only unique within the namespace that created it
                remove_placement_group(placement_group(pg_id))
                removed += 1
            except Exception as error:  # noqa: BLE001 - the rest is removed all the same
                # A group left behind keeps its resources from every gang: say which one
                log.warning("could not remove placement group %s (%s): %s: %s", pg_id,
                            self.names.get(pg_id, "no name"), type(error).__name__, error)
        return removed

    def orphans(self, unfinished: set[str], unknown: bool = True) -> int:
        """Remove everything of no unfinished gang (`unknown`: also of no known gang)."""
        stale = (set(self.actors) | set(self.groups)) - unfinished
        if not unknown:
            stale.discard(None)
        return sum(self.clear(gang_id) for gang_id in stale)


def gang_of(name: str, known: Container[str]) -> str | None:
    """The known gang id a `raygang-<gang id>[-<role>-<index>]` name belongs to (gang ids
    and role names may hold dashes: try each cut, longest id first)."""
    parts = name[len(PREFIX):].split("-")
    for cut in range(len(parts), 0, -1):
        candidate = "-".join(parts[:cut])
        if candidate in known:
            return candidate
    return None
