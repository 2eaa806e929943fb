"""Hand-off budgets (`core.budget`) and the jobs that have them (`JobSpec`)."""

from __future__ import annotations

import random

import pytest

from raygang.core.budget import never_fits, take
from raygang.core.resources import Resources as R
from raygang.core.spec import SpecError
from raygang.core.workload_specs import job_spec

GPU = R(GPU=1, CPU=1)


def test_a_claim_takes_free_bundles_that_hold_it():
    held = [GPU] * 4
    assert take(held, [0, 1, 2, 3], [R(GPU=1)] * 2) == [0, 1]
    assert take(held, [2, 3], [R(GPU=1)] * 2) == [2, 3]
    assert take(held, [3], [R(GPU=1)] * 2) is None  # one free bundle left


def test_larger_asks_choose_first_and_take_the_smallest_bundle_that_holds_them():
    held = [R(GPU=1), R(GPU=2), R(GPU=4)]
    assert take(held, [0, 1, 2], [R(GPU=1), R(GPU=3)]) == [0, 2]
    assert take(held, [0, 1, 2], [R(GPU=2), R(GPU=2)]) == [1, 2]
    assert take(held, [0, 1, 2], [R(GPU=3), R(GPU=3)]) is None


def test_never_fits_says_why():
    assert never_fits([GPU] * 2, [R(GPU=1)] * 3) == "3 bundles asked, the budget has 2"
    assert "do not fit" in never_fits([GPU] * 2, [R(GPU=2)])
    assert never_fits([GPU] * 2, [R(GPU=1)] * 2) is None


def test_what_take_returns_always_holds_what_was_asked():
    rng = random.Random(7)
    for _ in range(2000):
        held = [R(GPU=rng.randint(0, 3), CPU=rng.randint(1, 4)) for _ in range(rng.randint(1, 6))]
        free = [i for i in range(len(held)) if rng.random() < 0.7]
        wanted = [R(GPU=rng.randint(0, 2), CPU=rng.randint(1, 2))
                  for _ in range(rng.randint(1, 4))]
        chosen = take(held, free, wanted)
        if chosen is not None:
            assert len(set(chosen)) == len(wanted) and set(chosen) <= set(free)
            assert all(w.fits_in(held[j]) for w, j in zip(wanted, chosen))


def test_a_job_s_budget():
    assert job_spec("job", entrypoint="x", gpus=3).bundles == (GPU,) * 3
    four = job_spec("job", entrypoint="x", resources={"GPU": 4, "CPU": 8},
                    bundle={"GPU": 1, "CPU": 2})
    assert four.bundles == (R(GPU=1, CPU=2),) * 4
    assert four.gang_spec().total == R(GPU=4, CPU=8)
    assert job_spec("job", entrypoint="x", resources={"CPU": 2}).bundles == (R(CPU=2),)


@pytest.mark.parametrize("fields, message", [
    ({"entrypoint": "x"}, "say what the job needs"),
    ({"entrypoint": "x", "gpus": 1, "resources": {"GPU": 1}}, "give one of them"),
    ({"entrypoint": "x", "resources": {"GPU": 3}, "bundle": {"GPU": 2}},
     "not a whole number of bundles"),
    ({"entrypoint": "", "gpus": 1}, "entrypoint"),
    ({"entrypoint": "x", "gpus": 0}, "gpus"),
    ({"entrypoint": "x", "gpus": 1, "working_dir": "a", "runtime_env": {"working_dir": "b"}},
     "give it once"),
])
def test_a_bad_job_says_which_field(fields, message):
    with pytest.raises(SpecError, match=message):
        job_spec("job", **fields)
