"""Elastic roles are decided by the core (tests/unit/test_elastic.py) but not yet carried
out by the runtime: a submission says so, names the role, and queues nothing."""

from __future__ import annotations

import asyncio

import pytest

from raygang.control.memory import MemoryProgram
from raygang.control.program import RoleProgram
from raygang.core.spec import RoleSpec

from tests.control.harness import make_cluster, make_plane
from tests.unit.builders import spec


def test_an_elastic_gang_is_refused_with_the_role_and_nothing_is_queued():
    async def scenario():
        plane = make_plane(make_cluster("n0: GPU=4"))
        s = spec("e", "CPU=1 + GPU=1").model_copy(update={"roles": (
            RoleSpec(name="head"), RoleSpec(name="worker", replicas=(2, 4),
                                            resources={"GPU": 1}))})
        programs = {r.name: RoleProgram(target=MemoryProgram()) for r in s.roles}
        with pytest.raises(ValueError, match=r"roles\[1\]\.replicas: elastic roles "
                                             r"\(replicas=\(2, 4\)\) are not run yet"):
            await plane.submit(s, programs)
        assert await plane.list_gangs() == []

    asyncio.run(asyncio.wait_for(scenario(), 30))
