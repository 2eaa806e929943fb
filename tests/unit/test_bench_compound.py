"""bench/compound.py's counts from a run's samples (no Ray: the bench's runs take minutes)."""

from __future__ import annotations

import pytest

from tests.unit.benches import load_bench


@pytest.fixture(scope="module")
def compound():
    return load_bench("compound")


def samples(compound, rows):
    return [compound.Sample(at, gpus, serving, training) for at, gpus, serving, training in rows]


def test_an_application_reserved_whole_is_never_half_admitted(compound):
    run = compound.Run(arm="raygang", training_s=5.0, training_ended_at=5.0, answered_at=8.0)
    run.samples = samples(compound, [
        (0.0, 0, False, 2),  # waits whole, holding nothing
        (5.0, 4, False, 0),  # the room freed: reserved whole, starting
        (7.0, 4, True, 0),
        (8.0, 4, True, 0),
    ])
    row = compound.tally(run)
    assert row["half_admitted"] is False and row["half_held_s"] == 0.0
    assert row["held_before_serving_s"] == 2.0  # reserved at 5.0, serving from 7.0
    assert row["serving_after_room_s"] == 3.0


def test_a_role_placed_on_the_room_left_is_half_admitted_until_the_rest_fits(compound):
    run = compound.Run(arm="serve", training_s=9.0, training_ended_at=9.0, answered_at=11.0)
    run.samples = samples(compound, [
        (0.0, 0, False, 2),
        (1.0, 2, False, 2),  # prefill took the 2 GPUs left; decode waits
        (9.0, 2, False, 0),  # the training gang ended: decode starts
        (10.0, 4, True, 0),
        (11.0, 4, True, 0),
    ])
    row = compound.tally(run)
    assert row["half_admitted"] is True
    assert row["half_held_s"] == 8.0
    assert row["held_before_serving_s"] == 9.0
    table = compound.summary([row, {**row, "half_admitted": False, "half_held_s": 0.0,
                                    "held_before_serving_s": 1.0,
                                    "leaked": "groups ['raygang-x']"}])
    assert table["half admitted (runs)"] == 1 and table["leaks"] == 1
    assert table["runs half-held > 5 s"] == 1 and table["runs held before serving > 5 s"] == 1
