"""GangSpec / RoleSpec validation (every message names its field) and derived views."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from raygang.core import GangSpec, MemberSlot, Resources, RoleSpec, SpecError, Strategy, gang_spec
from raygang.core.spec import MAX_MEMBERS

from tests.unit.builders import res, spec

W = {"name": "w", "replicas": 2, "resources": {"GPU": 1}}


def _problems(**fields) -> list[tuple[str, str]]:
    fields.setdefault("name", "g")
    with pytest.raises(SpecError) as info:
        gang_spec("gang 'g'", **fields)
    error = info.value
    assert isinstance(error, ValueError)
    assert str(error).startswith("invalid gang 'g': ")
    for field, message in error.problems:
        assert (f"  {field}: {message}" if field else f"  {message}") in str(error)
    return error.problems


# Each row: spec fields, then (field path, substrings of the message) for the only problem.
INVALID = [
    pytest.param(
        {"roles": [{"name": "w", "resources": {"GPU": -1}}]},
        "roles[0].resources", ["'GPU'", ">= 0", "-1"], id="negative-resource",
    ),
    pytest.param(
        {"roles": [W, {"name": "ps", "resources": {"CPU": float("nan")}}]},
        "roles[1].resources", ["'CPU'", "finite"], id="nan-resource",
    ),
    pytest.param(
        {"roles": [{"name": "w", "resources": {"GPU": "two"}}]},
        "roles[0].resources", ["'GPU'", "number", "'two'"], id="non-number-resource",
    ),
    pytest.param(
        {"roles": [{"name": "w", "resources": {"": 1}}]},
        "roles[0].resources", ["non-empty"], id="empty-resource-name",
    ),
    pytest.param(
        {"roles": [{"name": "w", "resources": {}}]},
        "roles[0].resources", ["at least one positive amount"], id="empty-resources",
    ),
    pytest.param(
        {"roles": [{"name": "w", "resources": {"GPU": 0}}]},
        "roles[0].resources", ["at least one positive amount"], id="all-zero-resources",
    ),
    pytest.param(
        {"roles": [{"name": "w", "resources": [1]}]},
        "roles[0].resources", ["mapping", "list"], id="resources-not-a-mapping",
    ),
    pytest.param(
        {"roles": [{"name": "w", "replicas": 0}]},
        "roles[0].replicas", ["greater than or equal to 1", "got 0"], id="zero-replicas",
    ),
    pytest.param(
        {"roles": [{"name": "w", "replicas": MAX_MEMBERS + 1}]},
        "roles[0].replicas", [f"less than or equal to {MAX_MEMBERS}"], id="too-many-replicas",
    ),
    pytest.param(
        {"roles": [W], "strategy": "CLUSTER"},
        "strategy", ["STRICT_PACK", "STRICT_SPREAD", "got 'CLUSTER'"], id="unknown-strategy",
    ),
    pytest.param(
        {"roles": [{"name": "w", "after": ["ps"]}]},
        "roles[0].after", ["unknown role 'ps'", "roles are: w"], id="unknown-after",
    ),
    pytest.param(
        {"roles": [{"name": "w", "after": ["w"]}]},
        "roles[0].after", ["'w'", "cannot wait for itself"], id="waits-for-itself",
    ),
    pytest.param(
        {"roles": [{"name": "a", "after": ["b"]}, {"name": "b", "after": ["a"]}]},
        "roles.after", ["cycle", "a -> b -> a"], id="cycle-of-two",
    ),
    pytest.param(
        {"roles": [
            {"name": "router"},
            {"name": "a", "after": ["c", "router"]},
            {"name": "b", "after": ["a"]},
            {"name": "c", "after": ["b"]},
        ]},
        "roles.after", ["cycle", "a -> c -> b -> a"], id="cycle-of-three",
    ),
    pytest.param(
        {"roles": [{"name": "w"}, {"name": "w"}]},
        "roles[1].name", ["'w'", "declared twice"], id="duplicate-role",
    ),
    pytest.param(
        {"roles": [{"name": "-w"}]}, "roles[0].name", ["pattern", "'-w'"], id="bad-role-name",
    ),
    pytest.param(
        {"roles": [{"name": "w x"}]}, "roles[0].name", ["pattern"], id="role-name-space",
    ),
    pytest.param({"roles": [W], "name": "my gang"}, "name", ["pattern"], id="bad-gang-name"),
    pytest.param({"roles": [W], "name": "x" * 64}, "name", ["pattern"], id="gang-name-too-long"),
    pytest.param({"roles": [W], "queue": "team/a"}, "queue", ["pattern"], id="bad-queue"),
    pytest.param({"roles": []}, "roles", ["at least 1 item"], id="no-roles"),
    pytest.param({}, "roles", ["Field required"], id="roles-missing"),
    pytest.param(
        {"roles": [W], "priority": "very high"},
        "priority", ["priority class name", "'very high'"], id="priority-not-a-name",
    ),
    pytest.param(
        {"roles": [W], "reservation_timeout_s": 0},
        "reservation_timeout_s", ["greater than 0"], id="zero-timeout",
    ),
    pytest.param(
        {"roles": [W], "startup_timeout_s": -1},
        "startup_timeout_s", ["greater than 0"], id="negative-startup-timeout",
    ),
    pytest.param(
        {"roles": [W], "max_restarts": -1},
        "max_restarts", ["greater than or equal to 0"], id="negative-restarts",
    ),
    pytest.param(
        {"roles": [W], "gpus": 4}, "gpus", ["Extra inputs are not permitted"], id="extra-field",
    ),
    pytest.param(
        {"roles": [{"name": "w", "gpus": 4}]},
        "roles[0].gpus", ["Extra inputs are not permitted"], id="extra-role-field",
    ),
    pytest.param(
        {"roles": [{"name": "a", "replicas": MAX_MEMBERS}, {"name": "b", "replicas": 1}],
         "strategy": "STRICT_SPREAD"},
        "strategy", ["STRICT_SPREAD", str(MAX_MEMBERS)], id="strict-spread-too-wide",
    ),
]


@pytest.mark.parametrize("fields, field, words", INVALID)
def test_invalid_spec_names_the_field(fields, field, words):
    problems = _problems(**fields)
    assert [f for f, _ in problems] == [field], problems
    message = problems[0][1]
    for word in words:
        assert word in message, message


def test_priority_of_the_wrong_type_names_the_field():
    # pydantic reports one problem per member of `int | str`; both name `priority`.
    problems = _problems(roles=[W], priority=1.5)
    assert problems and all(f.startswith("priority") and "1.5" in m for f, m in problems)


def test_several_problems_are_all_reported():
    problems = _problems(
        name="bad name",
        strategy="NOPE",
        roles=[{"name": "w", "replicas": 0, "resources": {"GPU": -1}}],
    )
    fields = sorted(f for f, _ in problems)
    assert fields == ["name", "roles[0].replicas", "roles[0].resources", "strategy"]


def test_spec_error_message_counts_problems():
    with pytest.raises(SpecError) as info:
        gang_spec("gang 'g'", name="g", roles=[{"name": "w", "replicas": 0}])
    assert str(info.value).splitlines()[0] == "invalid gang 'g': 1 problem"
    with pytest.raises(SpecError) as info:
        gang_spec("gang 'g'", name="g", roles=[{"name": "w", "replicas": 0}], strategy="X")
    assert str(info.value).splitlines()[0] == "invalid gang 'g': 2 problems"


def test_direct_construction_raises_pydantic_validation_error():
    with pytest.raises(ValidationError):
        GangSpec(name="g", roles=[{"name": "w", "replicas": 0}])
    with pytest.raises(ValidationError):
        RoleSpec(name="w", resources={"GPU": -1})


# Valid specs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("priority", [0, 5, -3, 1000, "training", "inference", "my_class"])
def test_priority_is_an_int_or_a_class_name(priority):
    assert gang_spec("g", name="g", roles=[W], priority=priority).priority == priority


@pytest.mark.parametrize("strategy", list(Strategy) + [s.value for s in Strategy])
def test_every_strategy_is_accepted_by_enum_or_name(strategy):
    assert gang_spec("g", name="g", roles=[W], strategy=strategy).strategy is Strategy(strategy)


def test_defaults():
    s = gang_spec("g", name="g", roles=[{"name": "w"}])
    assert s.queue == "default"
    assert s.priority == "training"
    assert s.strategy is Strategy.PACK
    assert s.roles[0].replicas == 1
    assert s.roles[0].resources == Resources(CPU=1)
    assert s.roles[0].after == ()
    assert s.max_restarts == 0


def test_specs_are_frozen_and_hashable():
    s = spec("g", "2xGPU=1")
    with pytest.raises(ValidationError):
        s.name = "h"  # type: ignore[misc]
    assert s == spec("g", "2xGPU=1")
    assert hash(s) == hash(spec("g", "2xGPU=1"))
    assert s != spec("g", "3xGPU=1")


def test_round_trip_through_plain_data_and_json():
    s = spec("svc", "CPU=1 + 4xGPU=1,CPU=2,memory=8Gi", "STRICT_PACK", priority="inference")
    dumped = s.model_dump()
    assert dumped["roles"][1]["resources"] == {"GPU": 1.0, "CPU": 2.0, "memory": 8 * 2**30}
    assert type(dumped["roles"][1]["resources"]) is dict
    assert GangSpec.model_validate(dumped) == s
    assert GangSpec.model_validate_json(s.model_dump_json()) == s
    assert GangSpec.model_validate(s.model_dump(mode="json")) == s
    # derived views are not fields
    assert "world_size" not in dumped and "bundles" not in dumped


@pytest.mark.parametrize("mode", ["validation", "serialization"])
def test_json_schema(mode):
    schema = GangSpec.model_json_schema(mode=mode)
    role = schema["$defs"]["RoleSpec"]
    assert role["properties"]["resources"]["additionalProperties"] == {"type": "number"}
    assert role["additionalProperties"] is False
    assert set(schema["properties"]["strategy"].get("$ref", "").split("/")[-1:]) == {"Strategy"}


# Derived views ----------------------------------------------------------------------------------

def _pipeline() -> GangSpec:
    return gang_spec(
        "g",
        name="svc",
        roles=[
            {"name": "router", "replicas": 1, "resources": {"CPU": 1}},
            {"name": "prefill", "replicas": 2, "resources": {"GPU": 1}, "after": ["router"]},
            {"name": "decode", "replicas": 3, "resources": {"GPU": 2}, "after": ["router"]},
            {"name": "metrics", "resources": {"CPU": 0.5}, "after": ["prefill", "decode"]},
        ],
    )


def test_world_size_slots_and_bundles_in_rank_order():
    s = _pipeline()
    assert s.world_size == 7
    assert s.slots == (
        MemberSlot("router", 0, 0),
        MemberSlot("prefill", 0, 1),
        MemberSlot("prefill", 1, 2),
        MemberSlot("decode", 0, 3),
        MemberSlot("decode", 1, 4),
        MemberSlot("decode", 2, 5),
        MemberSlot("metrics", 0, 6),
    )
    assert s.bundles == (
        res("CPU=1"), res("GPU=1"), res("GPU=1"), res("GPU=2"), res("GPU=2"), res("GPU=2"),
        res("CPU=0.5"),
    )
    assert [slot.rank for slot in s.slots] == list(range(7))


def test_total():
    assert _pipeline().total == res("CPU=1.5 GPU=8")
    assert spec("g", "4xGPU=1,CPU=0.1").total == res("GPU=4 CPU=0.4")


def test_role_lookup():
    s = _pipeline()
    assert s.role("decode").replicas == 3
    with pytest.raises(KeyError):
        s.role("nope")


@pytest.mark.parametrize(
    "role_list, waves",
    [
        ([{"name": "w"}], [["w"]]),
        ([{"name": "a"}, {"name": "b"}], [["a", "b"]]),
        ([{"name": "b", "after": ["a"]}, {"name": "a"}], [["a"], ["b"]]),
        (
            [{"name": "c", "after": ["b"]}, {"name": "b", "after": ["a"]}, {"name": "a"}],
            [["a"], ["b"], ["c"]],
        ),
        (
            [
                {"name": "router"},
                {"name": "prefill", "after": ["router"]},
                {"name": "decode", "after": ["router"]},
                {"name": "metrics", "after": ["prefill", "decode"]},
            ],
            [["router"], ["prefill", "decode"], ["metrics"]],
        ),
    ],
)
def test_startup_waves(role_list, waves):
    assert gang_spec("g", name="g", roles=role_list).startup_waves() == waves


def test_gang_name_patterns_accepted():
    for name in ["a", "A1", "llama-70b.train_v2", "x" * 63]:
        assert gang_spec("g", name=name, roles=[W]).name == name


def test_priority_rejects_booleans_and_floats():
    from raygang.core import SpecError, gang_spec

    for bad in (True, 1.5):
        with pytest.raises(SpecError, match="priority"):
            gang_spec("g", name="g", priority=bad, roles=[{"name": "w"}])
