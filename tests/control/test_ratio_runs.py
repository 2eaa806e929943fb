"""A gang with ratio steps on the in-memory cluster: it grows in whole steps (2 prefill
members and 1 decode member together), a pending gang of its queue shrinks it by whole
steps, and its status says each role's size and why it is not larger."""

from __future__ import annotations

import asyncio
from collections import Counter

from raygang.control.memory import MemoryProgram
from raygang.control.program import RoleProgram
from raygang.core.gang import GangState as S
from raygang.core.spec import gang_spec

from tests.control.harness import make_cluster, make_plane, released, run, submit, wait_for


async def pd_gang(plane) -> str:
    """prefill: 1 to 5 members of 1 GPU; decode: 1 to 3 of 2 GPUs; steps of 2 + 1."""
    s = gang_spec("gang 'pd'", name="pd", ratio={"prefill": 2, "decode": 1}, roles=[
        {"name": "prefill", "replicas": (1, 5), "resources": {"GPU": 1}},
        {"name": "decode", "replicas": (1, 3), "resources": {"GPU": 2}}])
    program = RoleProgram(target=MemoryProgram(seconds=None, on_preempt="hook"))
    return await plane.submit(s, {"prefill": program, "decode": program})


async def roles_at(plane, gang_id: str, prefill: int, decode: int, timeout: float = 5.0):
    """Wait until the gang runs exactly this many members of each role; its status."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        status = await plane.status(gang_id)
        count = Counter(m.role for m in status.members)
        if status.state is S.RUNNING and (count["prefill"], count["decode"]) == (prefill,
                                                                                 decode):
            return status
        assert loop.time() < deadline, (count, status.reason, status.grow_reason)
        await asyncio.sleep(0.005)


async def role_reasons(plane, gang_id: str) -> dict[str, tuple[int, str | None]]:
    """Each role's (size, why not larger), once the next cycle has said why."""
    status = await plane.status(gang_id)
    while status.grow_reason is None and status.world_size < (status.max_size or 0):
        await asyncio.sleep(0.005)
        status = await plane.status(gang_id)
    return {r.role: (r.size, r.grow_reason) for r in status.roles}


def test_a_ratio_gang_grows_and_is_shrunk_in_whole_steps_and_says_why_not_larger():
    async def scenario():
        cluster = make_cluster("n0: GPU=8")
        plane = make_plane(cluster)
        blocker = await submit(plane, "blocker", "4xGPU=1", seconds=0.3)
        await wait_for(plane, blocker, S.RUNNING)
        pd = await pd_gang(plane)
        await roles_at(plane, pd, 1, 1)  # its minimum: 3 GPUs, 1 left; a step takes 4
        roles = await role_reasons(plane, pd)
        for role in ("prefill", "decode"):  # the next step holds members of both
            size, why = roles[role]
            assert size == 1 and why is not None and why.startswith(
                "no room for a whole ratio step of 3 members (prefill-1, prefill-2, "
                "decode-1, GPU 4 in all)"), (role, why)
        assert len(cluster.members[pd]) == 2  # not half a step: no prefill-1 on the free GPU
        await wait_for(plane, blocker, S.SUCCEEDED)
        status = await roles_at(plane, pd, 3, 2)  # one step: 7 GPUs, 1 left
        assert any("grew to 5 members (added prefill-1, prefill-2, decode-1)" in e.reason
                   for e in status.events)
        assert [(r.role, r.size, r.min_size, r.max_size, r.step) for r in status.roles] == [
            ("prefill", 3, 1, 5, 2), ("decode", 2, 1, 3, 1)]
        roles = await role_reasons(plane, pd)
        assert "no room for a whole ratio step" in (roles["prefill"][1] or "")
        # A gang of its queue, waiting for 2 GPUs (1 is free): a whole step goes for it.
        later = await submit(plane, "later", "2xGPU=1", seconds=None)
        await wait_for(plane, later, S.RUNNING)
        status = await roles_at(plane, pd, 1, 1)
        assert status.preemptions == 0
        assert any("shrinking to 2 members (removing decode-1, prefill-1, prefill-2)" in e.reason
                   for e in status.events), [e.reason for e in status.events]
        roles = await role_reasons(plane, pd)
        assert roles["prefill"][0] == 1 and "no room for a whole ratio step" in (
            roles["prefill"][1] or "")
        await plane.cancel(later)
        await plane.cancel(pd)
        await released(plane)
        assert cluster.booked == {} and cluster.members == {}
    run(scenario)


def test_at_its_maximum_each_role_says_so():
    async def scenario():
        cluster = make_cluster("n0: GPU=12")
        plane = make_plane(cluster)
        pd = await pd_gang(plane)
        status = await roles_at(plane, pd, 5, 3)  # two steps: 11 GPUs
        assert [(r.role, r.size, r.grow_reason) for r in status.roles] == [
            ("prefill", 5, "at its maximum (5)"), ("decode", 3, "at its maximum (3)")]
        assert status.grow_reason is None
        await plane.cancel(pd)
        await released(plane)
    run(scenario)
