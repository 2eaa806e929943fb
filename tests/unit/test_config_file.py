"""SchedulerConfig.from_file: the YAML shown in the docs (docs/concepts.md) loads, bad files
say why."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from raygang.control.config import SchedulerConfig

CONCEPTS = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"


def test_the_documented_config_example_loads(tmp_path):
    block = re.search(r"```yaml\n(queues:.*?)```", CONCEPTS.read_text(), re.DOTALL)
    assert block, "docs/concepts.md shows a queue config"
    path = tmp_path / "raygang.yaml"
    path.write_text(block.group(1))
    config = SchedulerConfig.from_file(path)
    tree = config.queue_tree
    assert tree.leaves == ["default", "nlp", "prod", "vision"]
    assert tree.paths["vision"] == ("research", "vision")
    assert tree.specs["vision"].limit == {"GPU": 24} and tree.specs["vision"].weight == 2
    assert [c.name for c in config.priority_classes] == ["inference", "training", "batch"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("queues: [{name: a, parent: b}]", "queue 'a' has unknown parent 'b'"),
        ("queues: [{name: a, quota: {GPU: -1}}]", "GPU"),
        ("actions: [allocate, shuffle]", "actions.1"),
        ("backfil: true", "backfil"),
        ("- just a list", "expected a mapping at the top, got list"),
    ],
)
def test_bad_config_files_say_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises((ValidationError, ValueError), match=message):
        SchedulerConfig.from_file(path)
