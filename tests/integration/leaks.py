"""The no-leak guarantee, as assertions tests share."""

from __future__ import annotations

import time

import ray
from ray.util.placement_group import placement_group_table

import raygang
from raygang.runtime.names import SCHEDULER_NAME

# Compared: every resource `ray.available_resources()` reports (CPU, GPU, custom ones, and
# the `*_group_<pg>` keys a placement group adds: one showing up means a group is left),
# except these, which vary on their own: memory, and per-node markers (`node:<ip>`).
UNTRACKED = ("memory", "object_store_memory")
UNTRACKED_PREFIXES = ("node:",)


def tracked(name: str) -> bool:
    return name not in UNTRACKED and not name.startswith(UNTRACKED_PREFIXES)


def raygang_placement_groups() -> list[dict]:
    return [
        pg for pg in placement_group_table().values()
        if pg["name"].startswith("raygang-") and pg["state"] != "REMOVED"
    ]


def serve_gang_pgs() -> list[str]:
    """Serve's own gang placement groups (a deployment's replicas hold one while running)."""
    return [pg["name"] for pg in placement_group_table().values()
            if pg["name"].startswith("SERVE_GANG::") and pg["state"] != "REMOVED"]


def raygang_member_actors() -> list[str]:
    return [
        a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith("raygang-") and a["name"] != SCHEDULER_NAME
    ]


def free() -> dict[str, float]:
    return {k: v for k, v in ray.available_resources().items() if tracked(k)}


def differences(expected: dict[str, float], now: dict[str, float]) -> dict[str, tuple]:
    """{resource: (expected, now)} where they differ; a missing key counts as 0 (Ray drops
    a key when it reaches 0)."""
    return {
        k: (expected.get(k, 0.0), now.get(k, 0.0))
        for k in sorted({*expected, *now})
        if expected.get(k, 0.0) != now.get(k, 0.0)
    }


def wait_until_idle(cluster_resources: bool = False, timeout: float = 15) -> dict[str, float]:
    """Wait until no raygang gang holds anything; returns the free resources then. With
    `cluster_resources`, also until everything is free (nothing else holds anything)."""
    deadline = time.time() + timeout
    total = {k: v for k, v in ray.cluster_resources().items() if tracked(k)}
    while time.time() < deadline:
        now = free()
        idle = not raygang_placement_groups() and not raygang_member_actors()
        if idle and (not cluster_resources or not differences(total, now)):
            return now
        time.sleep(0.1)
    raise AssertionError(
        f"cluster not idle after {timeout}s: pgs={raygang_placement_groups()} "
        f"actors={raygang_member_actors()} free vs total (total, free): "
        f"{differences(total, free())}"
    )


def unfinished_gangs() -> list[str]:
    """Gangs neither finished nor cancelled: a waiting one holds nothing, but a test that
    leaves it behind hands it to the next test's cluster."""
    return [f"{g.gang_id} {state.value}" for state in raygang.GangState
            if not state.finished for g in raygang.list_gangs(state)]


def cancel_unfinished() -> None:
    """Cancel every gang not finished (a failed test's): the tests after it must not see
    its gangs as their leaks. Never raises."""
    for line in unfinished_gangs():
        try:
            raygang.GangRef(line.split()[0]).cancel()
        except Exception:  # noqa: BLE001 - it ended meanwhile, or the scheduler is gone
            pass


def assert_nothing_left(before: dict[str, float], timeout: float = 15) -> None:
    deadline = time.time() + timeout
    while True:
        pgs, actors, now = raygang_placement_groups(), raygang_member_actors(), free()
        changed = differences(before, now)
        gangs = unfinished_gangs()
        if not pgs and not actors and not changed and not gangs:
            return
        if time.time() > deadline:
            raise AssertionError(
                f"leak: placement groups {[p['name'] for p in pgs]}, member actors {actors}, "
                f"free resources changed since before the test (before, now): {changed}, "
                f"gangs not finished: {gangs}"
            )
        time.sleep(0.1)
