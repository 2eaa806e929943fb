"""Elastic gangs on Ray (`replicas=(min, max)`, `resize="live"`): the minimum is one
placement group, each surplus member one of its own; members come and go while the others
run on and are told the new world (`get_context()`, `on_resize`) before a new member's
body starts. The shared cluster has 8 GPUs (two workers of 4)."""

from __future__ import annotations

import pathlib
import time

import pytest
import ray
from ray.util.state import list_actors

import raygang
from raygang import GangState
from tests.conftest import SCHEDULER_CONFIG
from tests.integration.helpers import (
    actor_gone,
    restart_scheduler,
    scheduler,
    stop_scheduler_for_good,
    wait_scheduler_ready,
    wait_state,
    wait_until,
)
from tests.integration.leaks import raygang_placement_groups


@raygang.gang_task(replicas=4, num_gpus=1, num_cpus=0)
class Hold:
    """Holds GPUs until cancelled or preempted."""


@raygang.gang_task(role="worker", replicas=(2, 4), num_gpus=1, num_cpus=0,
                   preemption_grace_s=5)
class DataParallel:
    """Runs until its world is `until` members (or it is preempted), then reports what it
    saw: its name, rank and world, its actor id, and each resize it was told of."""

    def __init__(self, until: int, hook_fails: str | None = None, hook_s: float = 0.0):
        self.until, self.hook_fails, self.hook_s = until, hook_fails, hook_s
        self.resizes: list[tuple[int, int, int, tuple[str, ...]]] = []
        self.told_to_go = False

    def on_resize(self, world: raygang.World) -> None:
        self.resizes.append((world.generation, world.size, world.rank, world.removed))
        time.sleep(self.hook_s)
        ctx = raygang.get_context()
        if f"{ctx.role}-{ctx.role_rank}" == self.hook_fails:
            raise ValueError("could not re-form the process group")

    def on_preempt(self) -> None:
        self.told_to_go = True

    def run(self):
        ctx = raygang.get_context()
        while ctx.world_size != self.until and not ctx.preempted:
            time.sleep(0.05)
        return {"member": f"{ctx.role}-{ctx.role_rank}", "rank": ctx.rank,
                "world_size": ctx.world_size, "peers": len(ctx.peers),
                "actor": ray.get_runtime_context().get_actor_id(),
                "resizes": self.resizes, "min": ctx.min_size, "max": ctx.max_size}


@pytest.fixture
def made(ray_cluster):
    """The gangs a test submits, cancelled at its end even if it failed (before the leak
    check: a failed test must not leave its gangs to the next ones)."""
    refs: list = []
    yield refs
    for ref in refs:
        ref.cancel()


def _ready_members(gang, n: int):
    """The gang's status once `n` members are ready (world_size counts them from when
    they are booked; their actors exist once ready)."""
    return wait_until(lambda: (s := gang.status()).world_size == n and len(s.members) == n and s)


def _actor_ids(gang_id: str, members: list[str]) -> dict[str, str]:
    return {m: ray.get_actor(f"raygang-{gang_id}-{m}", namespace="raygang")._actor_id.hex()
            for m in members}


def test_admitted_at_its_minimum_it_grows_live_when_a_blocker_ends(made):
    blocker = Hold.options(replicas=6).remote()
    made.append(blocker)
    wait_state(blocker, GangState.RUNNING)
    # Slow hooks: both first members' bodies end (their world is 4) while the barrier still
    # waits for their hooks, before the new members are released (seen in CI: the gang's
    # outcome was then taken without the new members', KeyError).
    gang = DataParallel.remote(4, hook_fails="worker-1", hook_s=1.0)
    made.append(gang)
    status = wait_state(gang, GangState.RUNNING)
    assert (status.world_size, status.min_size, status.max_size) == (2, 2, 4)
    first = _actor_ids(gang.gang_id, ["worker-0", "worker-1"])
    groups = {pg["name"] for pg in raygang_placement_groups()}
    assert f"raygang-{gang.gang_id}" in groups  # the minimum's group: 2 bundles
    blocker.cancel()
    results = gang.result(timeout=90)
    # Same gang, four members, every one saw a world of 4; the first two were never
    # restarted (same actors) and were told of each resize.
    assert [r["member"] for r in results] == [f"worker-{i}" for i in range(4)]
    assert [r["rank"] for r in results] == [0, 1, 2, 3]
    assert {(r["world_size"], r["peers"], r["min"], r["max"]) for r in results} == {(4, 4, 2, 4)}
    assert {r["member"]: r["actor"] for r in results[:2]} == first
    for r in results[:2]:
        assert r["resizes"] and r["resizes"][-1][1:3] == (4, r["rank"]), r
    final = gang.status()
    assert (final.state, final.restarts, final.preemptions) == (GangState.SUCCEEDED, 0, 0)
    assert any("grew to 4 members" in e.reason for e in final.events), final.events
    # A hook that raised is the gang's event; the gang ran on (its code may cope).
    assert any(e.reason.startswith("resize: the resize hooks of worker-1 failed: ValueError: "
                                   "could not re-form the process group")
               for e in final.events), [e.reason for e in final.events]


def test_a_restarted_scheduler_adopts_the_surplus_members_too(made):
    gang = DataParallel.options(priority=0).remote(0)  # runs until preempted
    made.append(gang)
    _ready_members(gang, 4)
    members = [f"worker-{i}" for i in range(4)]
    actors = _actor_ids(gang.gang_id, members)

    restart_scheduler()  # the journal knows the minimum; the surplus is found in Ray

    status = gang.status()
    assert (status.state, status.world_size, status.restarts) == (GangState.RUNNING, 4, 0)
    assert _actor_ids(gang.gang_id, members) == actors
    # The new process books the surplus and takes it back first, as the old one would.
    high = Hold.options(replicas=6, priority=500).remote()
    made.append(high)
    wait_state(high, GangState.RUNNING)
    shrunk = wait_until(lambda: (s := gang.status()).world_size == 2 and s)
    assert (shrunk.state, shrunk.preemptions) == (GangState.RUNNING, 0)
    assert _actor_ids(gang.gang_id, members[:2]) == {m: actors[m] for m in members[:2]}


def test_a_restarted_scheduler_drops_a_ratio_step_that_lost_a_member_while_it_was_down(made):
    # One ratio step: worker-2 and worker-3, grown (and held) together.
    gang = DataParallel.options(priority=0, ratio={"worker": 2}).remote(0)
    made.append(gang)
    _ready_members(gang, 4)
    members = [f"worker-{i}" for i in range(4)]
    actors = _actor_ids(gang.gang_id, members)
    step_groups = {pg["placement_group_id"] for pg in raygang_placement_groups()
                   if pg["name"].endswith(("-worker-2", "-worker-3"))}
    assert len(step_groups) == 2, raygang_placement_groups()

    stop_scheduler_for_good()
    dead = f"raygang-{gang.gang_id}-worker-3"
    ray.kill(ray.get_actor(dead, namespace="raygang"), no_restart=True)
    wait_until(lambda: actor_gone(dead))
    raygang.start(SCHEDULER_CONFIG)
    wait_scheduler_ready()

    # Adopted at its minimum: worker-2, found whole, was half a step without worker-3, so
    # both went. (The room is free: the new process may already be growing a whole step.)
    sizes = [gang.status().world_size]
    assert sizes[0] in (2, 4), sizes
    # (A CI run found worker-0 gone here, once: what the recovery did, if it happens again.)
    recovery = ray.get(scheduler().ping.remote())["recovery"]
    why = f"recovery {recovery}; events {[(e.to_state, e.reason) for e in gang.status().events]}"
    assert recovery.get("adopted", 0) >= 1, why
    assert _actor_ids(gang.gang_id, members[:2]) == {m: actors[m] for m in members[:2]}, why

    def old_step_left() -> list[str]:
        groups = {pg["placement_group_id"] for pg in raygang_placement_groups()}
        return [f"{m}'s actor" for m in members[2:] if list_actors(filters=[
            ("actor_id", "=", actors[m]), ("state", "=", "ALIVE")])] + [
            f"group {g}" for g in step_groups & groups]

    deadline = time.monotonic() + 15
    while (left := old_step_left()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"the adopted gang holds part of a ratio step: {left}"

    def at(size: int):
        status = gang.status()
        sizes.append(status.world_size)
        return status.world_size == size and len(status.members) == size and status

    # ... and grows it again by a whole step: new actors, in groups of their own.
    regrown = wait_until(lambda: at(4))
    assert 3 not in sizes, sizes
    assert (regrown.state, regrown.restarts, regrown.preemptions) == (GangState.RUNNING, 0, 0)
    assert not set(_actor_ids(gang.gang_id, members[2:]).values()) & {
        actors["worker-2"], actors["worker-3"]}
    assert len([pg for pg in raygang_placement_groups()
                if pg["name"].startswith(f"raygang-{gang.gang_id}-worker-")]) == 2


@raygang.gang_task(role="worker", replicas=(2, 4), num_gpus=1, num_cpus=0,
                   resize="restart", preemption_grace_s=5)
class Restarting:
    """Data-parallel code that cannot re-form its group live: it saves its step when told
    to stop (`on_preempt`), and every start resumes from the step saved last."""

    def __init__(self, until: int, store: str):
        self.until, self.store = until, pathlib.Path(store)
        ctx = raygang.get_context()
        saved = self.store / f"{ctx.role}-{ctx.role_rank}"
        self.resumed_at = int(saved.read_text()) if saved.exists() else None
        self.step = self.resumed_at or 0

    def on_preempt(self) -> None:
        ctx = raygang.get_context()
        (self.store / f"{ctx.role}-{ctx.role_rank}").write_text(str(self.step))

    def run(self):
        ctx = raygang.get_context()
        while ctx.world_size != self.until and not ctx.preempted:
            self.step += 1
            time.sleep(0.05)
        return {"member": f"{ctx.role}-{ctx.role_rank}", "rank": ctx.rank,
                "world_size": ctx.world_size, "generation": ctx.generation,
                "actor": ray.get_runtime_context().get_actor_id(),
                "resumed_at": self.resumed_at}


def test_a_restart_gang_checkpoints_and_starts_again_whole_at_its_new_size(made, tmp_path):
    blocker = Hold.options(replicas=6).remote()
    made.append(blocker)
    wait_state(blocker, GangState.RUNNING)
    gang = Restarting.remote(4, str(tmp_path))
    made.append(gang)
    _ready_members(gang, 2)
    first = _actor_ids(gang.gang_id, ["worker-0", "worker-1"])
    blocker.cancel()
    results = gang.result(timeout=90)
    # The same gang, started again at 4: new actors, a new generation; the first two
    # resumed from the step they saved when told (the grace period of a preemption).
    assert [(r["member"], r["rank"], r["world_size"], r["generation"]) for r in results] == [
        (f"worker-{i}", i, 4, 1) for i in range(4)]
    assert not {r["actor"] for r in results} & set(first.values())
    assert [r["resumed_at"] is not None and r["resumed_at"] > 0 for r in results] == [
        True, True, False, False]
    final = gang.status()
    assert (final.state, final.restarts, final.preemptions) == (GangState.SUCCEEDED, 0, 0)
    assert any("restarted at 4 members (added worker-2, worker-3)" in e.reason
               for e in final.events), final.events
