"""Removing what a previous scheduler process left in Ray (`RayLeftovers`), with Ray's
calls replaced (no Ray): a placement group that cannot be removed is said, by id and
name, and the rest is removed all the same."""

from __future__ import annotations

import logging

from raygang.runtime.scheduler import leftovers as leftovers_module
from raygang.runtime.scheduler.leftovers import RayLeftovers

GROUPS = {"aa": {"name": "raygang-g-1", "state": "CREATED"},
          "bb": {"name": "raygang-g-1-w-0", "state": "CREATED"}}


def test_a_group_that_cannot_be_removed_is_said_and_the_rest_removed(monkeypatch, caplog):
    removed: list[str] = []

    def remove_placement_group(pg_id: str) -> None:
        if pg_id == "aa":
            raise TimeoutError("the GCS did not answer")
        removed.append(pg_id)

    monkeypatch.setattr(leftovers_module.ray.util, "list_named_actors",
                        lambda all_namespaces: [])
    monkeypatch.setattr(leftovers_module, "placement_group_table", lambda: GROUPS)
    monkeypatch.setattr(leftovers_module, "placement_group", lambda pg_id: pg_id)
    monkeypatch.setattr(leftovers_module, "remove_placement_group", remove_placement_group)
    found = RayLeftovers({"g-1"})
    with caplog.at_level(logging.WARNING, logger=leftovers_module.__name__):
        assert found.clear("g-1") == 1
    assert removed == ["bb"]
    assert [r.getMessage() for r in caplog.records] == [
        "could not remove placement group aa (raygang-g-1): TimeoutError: the GCS did "
        "not answer"]

