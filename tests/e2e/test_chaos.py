"""Chaos soak (tests/e2e/chaos_scenario.py): members, the scheduler actor and worker nodes
killed, and (with Debian's redis-server as the GCS's store) the GCS killed and the head
replaced, while gangs stream in; every gang ends accounted for, and nothing leaks."""

from __future__ import annotations

import pytest

from tests.e2e.test_scaling import scenario_output

pytestmark = pytest.mark.own_cluster  # see tests/conftest.py


# Arrivals up to 120 s, the ends up to END_WAIT_S, the last teardowns up to 60 s: 90 s here
# when the machine is quiet, past the suite's 300 s limit once in a clean clone's run
@pytest.mark.timeout(480)
def test_chaos_soak_loses_nothing_and_leaks_nothing():
    # A fault every 1.5 to 3 s, gangs arriving until every kind of fault has come (member,
    # scheduler, GCS, member, node, cancel, head): the whole soak within about 80 s when
    # the machine is quiet; a clean clone's run at load 9 passed 270 s.
    result = scenario_output("tests.e2e.chaos_scenario", "--seconds", "15", "--gangs", "10",
                             "--every", "1.5,3", timeout=420)
    assert result["submitted"] >= 10, result
    assert result["lost"] == [] and result["duplicated"] == [], result
    assert result["stuck"] == [], result["stuck"]  # their stories first: pytest cuts the rest
    assert result["unfinished"] == 0, result
    assert result["failed_without_reason"] == [], result
    assert result["leaked"] == [] and result["short"] == {}, result
    # The chaos really happened: every kind of fault, and gangs restarted whole.
    assert {"member", "scheduler", "node"} <= set(result["actions"]), result
    if result["redis"]:  # .ci/run installs it; without it the GCS is the head's alone
        assert {"gcs", "head"} <= set(result["actions"]), result
    assert result["restarts"] > 0 and result["ends"].get("SUCCEEDED", 0) > 0, result
