"""`@gang_task` and `raygang.gang` validate when applied, name the field, touch no cluster."""

from __future__ import annotations

import subprocess
import sys

import pytest
import ray

import raygang
from raygang import SpecError


def work():
    return 1


class Worker:
    pass


@pytest.fixture(autouse=True)
def no_cluster():
    before = ray.is_initialized()  # another tier may share this process's cluster
    yield
    assert ray.is_initialized() == before, "declaring a gang must not start or connect to Ray"


def test_declaring_touches_no_cluster_in_a_fresh_process():
    code = (
        "import ray, raygang\n"
        "t = raygang.gang_task(replicas=2, num_gpus=1)(lambda: 1)\n"
        "g = raygang.gang('g', roles={'a': t, 'b': t.options(after=['a']).bind(3)})\n"
        "t.options(replicas=3)\n"
        "assert not ray.is_initialized()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "options, field, expected",
    [
        ({"num_gpus": -1}, "resources", "resource 'GPU' must be >= 0, got -1"),
        ({"resources": {"GPU": -2}}, "resources", "must be >= 0"),
        ({"replicas": 0}, "replicas", "greater than or equal to 1"),
        ({"strategy": "SPREADD"}, "strategy", "'STRICT_PACK', 'PACK', 'SPREAD' or 'STRICT_SPREAD'"),
        ({"resources": {}}, "resources", "needs at least one positive amount"),
        ({"resources": {"GPU": "lots"}}, "resources", "resource 'GPU' must be a number"),
        ({"reservation_timeout_s": 0}, "reservation_timeout_s", "greater than 0"),
        ({"max_restarts": -1}, "max_restarts", "greater than or equal to 0"),
        ({"priority": "very high"}, "priority", "priority class name"),
        ({"name": "has space"}, "name", "should match pattern"),
        ({"num_gpus": 1, "resources": {"GPU": 1}}, "num_gpus", "given twice"),
    ],
)
def test_bad_options_raise_when_decorating(options, field, expected):
    with pytest.raises(SpecError) as raised:
        raygang.gang_task(**options)(work)
    message = str(raised.value)
    assert field in message and expected in message, message
    assert any(field in f or field in m for f, m in raised.value.problems)


def test_unknown_option_is_a_type_error():
    with pytest.raises(TypeError, match="unknown @gang_task option"):
        raygang.gang_task(num_gpu=1)(work)


def test_unknown_role_in_after_names_the_role_and_the_field():
    with pytest.raises(SpecError, match=r"roles\[1\].after: unknown role 'prefil' \(roles are: "):
        raygang.gang("llm", roles={
            "prefill": raygang.gang_task(Worker),
            "router": raygang.gang_task(Worker).options(after=["prefil"]),
        })


def test_cycle_in_after_is_shown():
    a = raygang.gang_task(Worker)
    with pytest.raises(SpecError) as raised:
        raygang.gang("loop", roles={"a": a.options(after=["b"]), "b": a.options(after=["a"])})
    assert "roles.after: startup order has a cycle: a -> b -> a" in str(raised.value)
    assert ("roles.after", "startup order has a cycle: a -> b -> a") in raised.value.problems


def test_role_waiting_for_itself():
    with pytest.raises(SpecError, match="cannot wait for itself"):
        raygang.gang("self", roles={"a": raygang.gang_task(Worker).options(after=["a"])})


def test_bare_and_with_arguments_and_options_copy():
    bare = raygang.gang_task(work)
    assert bare.role_spec.replicas == 1 and bare.role_spec.resources == {"CPU": 1}
    sized = raygang.gang_task(replicas=4, num_gpus=1)(Worker)
    bigger = sized.options(replicas=8)
    assert (sized.role_spec.replicas, bigger.role_spec.replicas) == (4, 8)
    assert bigger.role_spec.resources == {"GPU": 1}
    with pytest.raises(SpecError, match="replicas"):
        sized.options(replicas=0)
    with pytest.raises(TypeError, match=r"call .*\.remote\(\.\.\.\)"):
        bare()


def test_composed_gang_spec_ranks_roles_in_declaration_order():
    llm = raygang.gang("llm", roles={
        "router": raygang.gang_task(Worker).options(after=["prefill", "decode"]),
        "prefill": raygang.gang_task(Worker).options(replicas=2, num_gpus=1, num_cpus=None),
        "decode": raygang.gang_task(Worker).options(replicas=2, num_gpus=1, num_cpus=None),
    }, strategy="PACK")
    assert [s.role for s in llm.spec.slots] == ["router", "prefill", "prefill", "decode", "decode"]
    assert llm.spec.startup_waves() == [["prefill", "decode"], ["router"]]
    assert llm.spec.total == {"CPU": 1, "GPU": 4}


def test_a_topology_is_a_role_option_and_a_gang_option_validated_when_applied():
    decode = raygang.gang_task(replicas=4, num_gpus=1,
                               topology={"segment": 2, "segment_level": "nvlink"})(Worker)
    assert decode.role_spec.topology == raygang.Topology(segment=2, segment_level="nvlink")
    llm = raygang.gang("llm", roles={"prefill": raygang.gang_task(Worker), "decode": decode},
                       topology=raygang.Topology(required="rack"))
    assert llm.spec.topology.required == "rack"
    assert llm.spec.layout.levels == ("rack", "nvlink")
    with pytest.raises(SpecError) as raised:
        decode.options(replicas=3)
    assert raised.value.problems == [("roles[0].topology.segment", "2 does not divide the 3 "
                                      "members (segments are whole: use a divisor of 3)")]
    with pytest.raises(SpecError) as raised:
        raygang.gang_task(topology={"required": "rack zone"})(work)
    assert raised.value.problems[0][0] == "topology.required"
    assert "must be a node label key" in raised.value.problems[0][1]
    with pytest.raises(SpecError, match="topology.segment_level: needed with segment"):
        llm.options(topology={"segment": 5})


def test_a_gang_takes_a_ratio_over_its_elastic_roles_and_names_a_bad_one():
    @raygang.gang_task(replicas=(1, 5), num_gpus=1)
    def prefill():
        pass

    @raygang.gang_task(replicas=(1, 3), num_gpus=2)
    def decode():
        pass

    pd = raygang.gang("pd", {"prefill": prefill, "decode": decode},
                      ratio={"prefill": 2, "decode": 1})
    assert pd.spec.ratio_steps[0] == ("prefill-1", "prefill-2", "decode-1")
    with pytest.raises(SpecError, match=r"ratio: role 'router' is not one of the "
                                                r"gang's roles \(they are: prefill, decode\)"):
        pd.options(ratio={"router": 1})
