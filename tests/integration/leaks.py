"""The no-leak guarantee, as assertions tests share."""

from __future__ import annotations

import time

import ray
from ray.util.placement_group import placement_group_table

from raygang.runtime.scheduler import SCHEDULER_NAME

TRACKED = ("CPU", "GPU")


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
    available = ray.available_resources()
    return {k: available.get(k, 0.0) for k in TRACKED}  # keys vanish at 0


def wait_until_idle(cluster_resources: bool = False, timeout: float = 15) -> dict[str, float]:
    """Wait until no raygang gang holds anything; returns the free resources then."""
    deadline = time.time() + timeout
    total = ray.cluster_resources()
    while time.time() < deadline:
        now = free()
        idle = not raygang_placement_groups() and not raygang_member_actors()
        if idle and (not cluster_resources or all(now[k] == total.get(k, 0) for k in TRACKED)):
            return now
        time.sleep(0.1)
    raise AssertionError(
        f"cluster not idle after {timeout}s: pgs={raygang_placement_groups()} "
        f"actors={raygang_member_actors()} free={free()} total={total}"
    )


def assert_nothing_left(before: dict[str, float], timeout: float = 15) -> None:
    deadline = time.time() + timeout
    while True:
        pgs, actors, now = raygang_placement_groups(), raygang_member_actors(), free()
        if not pgs and not actors and now == before:
            return
        if time.time() > deadline:
            raise AssertionError(
                f"leak: placement groups {[p['name'] for p in pgs]}, member actors {actors}, "
                f"free {now} != {before} before the test"
            )
        time.sleep(0.1)
