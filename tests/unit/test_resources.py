"""Resources: exact fixed-point arithmetic, comparison, validation, pydantic round-trip."""

from __future__ import annotations

import json
import math
import pickle

import pytest
from pydantic import BaseModel, ValidationError

from raygang.core import Resources
from raygang.core.resources import UNIT, ZERO, format_amount, scarcity_key

from tests.unit.builders import amounts, res


# Arithmetic ---------------------------------------------------------------------------

@pytest.mark.parametrize(
    "left, op, right, expected",
    [
        ("GPU=1 CPU=2", "+", "GPU=1", "GPU=2 CPU=2"),
        ("GPU=1", "+", "CPU=4", "GPU=1 CPU=4"),
        ("GPU=4 CPU=8", "-", "GPU=1 CPU=8", "GPU=3"),  # CPU 0 dropped
        ("GPU=1", "-", "GPU=1", ""),
        ("", "+", "", ""),
        ("CPU=0.1", "+", "CPU=0.2", "CPU=0.3"),  # exact, unlike floats
        ("CPU=0.3", "-", "CPU=0.1", "CPU=0.2"),
        ("memory=1Gi", "+", "memory=0.5Gi", "memory=1.5Gi"),
        ("accel=0.0001", "+", "accel=0.0002", "accel=0.0003"),  # Ray's finest unit
    ],
)
def test_add_and_subtract(left, op, right, expected):
    a, b = res(left), res(right)
    result = a + b if op == "+" else a - b
    assert result == res(expected)
    assert result.to_dict() == res(expected).to_dict()


def test_subtraction_can_go_negative_and_says_so():
    short = res("GPU=1") - res("GPU=3 CPU=1")
    assert short.to_dict() == {"GPU": -2, "CPU": -1}
    assert not short.is_nonnegative()
    assert (res("GPU=3") - res("GPU=1")).is_nonnegative()


def test_fixed_point_sum_of_many_tenths_is_exact():
    total = Resources()
    for _ in range(10):
        total = total + Resources(CPU=0.1)
    assert total == Resources(CPU=1)
    assert total["CPU"] == 1.0
    assert sum([0.1] * 10) != 1.0  # what the fixed point protects against


def test_float_amounts_read_back_as_the_nearest_float():
    r = Resources(CPU=0.1) + Resources(CPU=0.2)
    assert r["CPU"] == 0.3
    assert r.units("CPU") == 3000
    assert UNIT == 10_000


@pytest.mark.parametrize("factor, expected", [(0, ""), (1, "GPU=1 CPU=0.5"), (4, "GPU=4 CPU=2")])
def test_multiply_by_an_integer(factor, expected):
    r = res("GPU=1 CPU=0.5")
    assert r * factor == res(expected)
    assert factor * r == res(expected)


def test_multiply_by_a_float_is_refused():
    with pytest.raises(TypeError):
        _ = res("GPU=1") * 1.5


@pytest.mark.parametrize(
    "a, b, minimum",
    [
        ("GPU=4 CPU=8", "GPU=2 CPU=16", "GPU=2 CPU=8"),
        ("GPU=4 CPU=8", "CPU=16", "CPU=8"),  # GPU missing on one side counts as 0
        ("", "GPU=1", ""),
    ],
)
def test_minimum(a, b, minimum):
    assert res(a).minimum(res(b)) == res(minimum)


@pytest.mark.parametrize(
    "demand, capacity, shortfall",
    [
        ("GPU=4 CPU=8", "GPU=2 CPU=16", "GPU=2"),
        ("GPU=4", "CPU=16", "GPU=4"),
        ("GPU=1", "GPU=8", ""),
        ("CPU=0.3", "CPU=0.1", "CPU=0.2"),
    ],
)
def test_shortfall(demand, capacity, shortfall):
    assert res(demand).shortfall(res(capacity)) == res(shortfall)


def test_only_keeps_named_resources():
    assert res("GPU=1 CPU=2 memory=1Gi").only({"GPU", "memory"}) == res("GPU=1 memory=1Gi")


# Comparison -----------------------------------------------------------------------------

@pytest.mark.parametrize(
    "demand, capacity, fits",
    [
        ("GPU=1", "GPU=1", True),
        ("GPU=1", "GPU=2 CPU=4", True),
        ("GPU=2", "GPU=1 CPU=4", False),
        ("GPU=1", "CPU=4", False),  # missing resource counts as 0
        ("", "", True),
        ("", "GPU=1", True),
        ("CPU=0.3", "CPU=0.3", True),
        ("CPU=0.3001", "CPU=0.3", False),  # one unit more
        ("CPU=0.30001", "CPU=0.3", True),  # finer than Ray's unit: rounds to 0.3
        ("accel=1", "GPU=8 CPU=64", False),  # custom resource
        ("GPU=1 accel=1", "GPU=8 accel=1", True),
    ],
)
def test_fits_in(demand, capacity, fits):
    d, c = res(demand), res(capacity)
    assert d.fits_in(c) is fits
    assert (d <= c) is fits
    assert (c >= d) is fits


def test_sum_of_tenths_fits_exactly():
    assert (Resources(CPU=0.1) + Resources(CPU=0.2)).fits_in(Resources(CPU=0.3))
    assert Resources(CPU=0.3).fits_in(Resources(CPU=0.1) + Resources(CPU=0.2))


# Zeros, equality, hashing ----------------------------------------------------------------

def test_zero_amounts_are_dropped():
    r = Resources({"GPU": 0, "CPU": 2})
    assert r == Resources(CPU=2)
    assert "GPU" not in r
    assert len(r) == 1
    assert list(r) == ["CPU"]
    assert r.get("GPU") == 0.0
    assert r.get("GPU", -1) == -1
    assert Resources(GPU=0) == Resources() == ZERO
    assert not Resources(GPU=0)
    with pytest.raises(KeyError):
        _ = r["GPU"]


def test_equality_with_plain_mappings():
    assert Resources(GPU=1, CPU=2) == {"CPU": 2, "GPU": 1}
    assert Resources(GPU=1) == {"GPU": 1.0, "CPU": 0}
    assert Resources(GPU=1) != {"GPU": 2}
    assert Resources(GPU=1) != "GPU=1"


def test_hash_agrees_with_equality():
    a = Resources({"GPU": 1, "CPU": 0.5, "memory": 0})
    b = Resources(CPU=0.5) + Resources(GPU=1)
    c = Resources(CPU=0.1) + Resources(CPU=0.2) + Resources(CPU=0.2) + Resources(GPU=1)
    assert a == b == c
    assert hash(a) == hash(b) == hash(c)
    assert len({a, b, c, Resources(GPU=1)}) == 2
    assert hash(Resources(GPU=0)) == hash(Resources())


def test_kwargs_and_mapping_combine():
    assert Resources({"GPU": 1}, CPU=2) == Resources(GPU=1, CPU=2)
    assert Resources({"GPU": 1}, GPU=2) == Resources(GPU=2)  # keyword wins
    assert Resources(Resources(GPU=1)) == Resources(GPU=1)


def test_immutable_and_picklable():
    r = res("GPU=1 CPU=0.5")
    with pytest.raises(AttributeError):
        r.foo = 1  # type: ignore[attr-defined]
    assert pickle.loads(pickle.dumps(r)) == r


def test_names_by_scarcity_gpu_first_custom_next_cpu_memory_last():
    r = res("memory=1Gi CPU=1 zz_custom=1 GPU=1 accel=1 object_store_memory=1Gi")
    assert r.names_by_scarcity() == [
        "GPU", "accel", "zz_custom", "CPU", "memory", "object_store_memory"
    ]
    assert scarcity_key("GPU") < scarcity_key("TPU") < scarcity_key("CPU") < scarcity_key("memory")


@pytest.mark.parametrize(
    "text, shown",
    [
        ("GPU=4 CPU=8", "{GPU: 4, CPU: 8}"),
        ("CPU=0.5", "{CPU: 0.5}"),
        ("memory=8Gi", "{memory: 8 GiB}"),
        ("memory=1.5Gi CPU=1", "{CPU: 1, memory: 1.5 GiB}"),
        ("", "{}"),
    ],
)
def test_str(text, shown):
    assert str(res(text)) == shown


def test_repr_and_format_amount():
    assert repr(Resources(GPU=1)) == "Resources({'GPU': 1.0})"
    assert format_amount("memory", 2**31) == "2 GiB"
    assert format_amount("GPU", 0.25) == "0.25"


# Validation -----------------------------------------------------------------------------

@pytest.mark.parametrize(
    "amounts_in, words",
    [
        ({"GPU": -1}, ["'GPU'", ">= 0", "-1"]),
        ({"CPU": -0.5}, ["'CPU'", ">= 0"]),
        ({"GPU": math.nan}, ["'GPU'", "finite", "nan"]),
        ({"GPU": math.inf}, ["'GPU'", "finite", "inf"]),
        ({"GPU": "1"}, ["'GPU'", "must be a number", "'1'"]),
        ({"GPU": None}, ["'GPU'", "must be a number", "None"]),
        ({"GPU": True}, ["'GPU'", "must be a number", "True"]),
        ({"": 1}, ["non-empty strings", "''"]),
        ({3: 1}, ["non-empty strings", "3"]),
    ],
)
def test_invalid_amounts_are_refused_with_the_resource_named(amounts_in, words):
    with pytest.raises(ValueError) as info:
        Resources(amounts_in)
    for word in words:
        assert word in str(info.value)


def test_amounts_finer_than_rays_unit_round_to_it():
    assert Resources(CPU=0.00001) == Resources()
    assert Resources(CPU=0.00012).units("CPU") == 1


# pydantic -----------------------------------------------------------------------------------

class _Holder(BaseModel):
    resources: Resources


def test_pydantic_validates_from_a_mapping_and_dumps_a_plain_dict():
    h = _Holder(resources={"GPU": 1, "CPU": 0.5, "memory": 0})
    assert isinstance(h.resources, Resources)
    dumped = h.model_dump()
    assert dumped == {"resources": {"GPU": 1.0, "CPU": 0.5}}
    assert type(dumped["resources"]) is dict
    assert json.loads(h.model_dump_json()) == {"resources": {"GPU": 1.0, "CPU": 0.5}}


def test_pydantic_round_trip_python_and_json():
    h = _Holder(resources=res("GPU=1 CPU=0.1 memory=8Gi"))
    assert _Holder.model_validate(h.model_dump()) == h
    assert _Holder.model_validate_json(h.model_dump_json()) == h
    assert _Holder(resources=h.resources).resources is h.resources  # no copy of a Resources


@pytest.mark.parametrize(
    "value, words",
    [
        ([1, 2], ["expected a mapping", "list"]),
        ("GPU=1", ["expected a mapping", "str"]),
        ({"GPU": -1}, ["'GPU'", ">= 0"]),
        ({"GPU": "x"}, ["'GPU'", "number"]),
    ],
)
def test_pydantic_errors_name_the_problem(value, words):
    with pytest.raises(ValidationError) as info:
        _Holder(resources=value)
    text = str(info.value)
    assert "resources" in text
    for word in words:
        assert word in text


def test_pydantic_json_rejects_non_numbers():
    with pytest.raises(ValidationError):
        _Holder.model_validate_json('{"resources": {"GPU": "lots"}}')


@pytest.mark.parametrize("mode", ["validation", "serialization"])
def test_json_schema_is_an_object_of_numbers(mode):
    # Serialization mode is what FastAPI uses for response models in OpenAPI.
    schema = _Holder.model_json_schema(mode=mode)
    prop = schema["properties"]["resources"]
    assert prop["type"] == "object"
    assert prop["additionalProperties"] == {"type": "number"}


def test_builder_amounts():
    assert amounts("GPU=1, CPU=2 memory=1Gi") == {"GPU": 1, "CPU": 2, "memory": 2**30}


def test_comparing_with_a_mapping_that_is_not_resources_is_false_not_an_error():
    assert Resources(CPU=1) != {"CPU": "x"}
    assert Resources(CPU=1) != {"CPU": -1}
