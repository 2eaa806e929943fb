"""A topology gang's placement group on Ray: each bundle's label selector pins its node id
and the label values of its domains there (Ray places it nowhere else); no Ray started."""

from __future__ import annotations

import asyncio

import raygang.runtime.kinds.gang as gang_kind
import raygang.runtime.kinds.gang.launch as launch_module
from raygang.control.records import GangRecord
from raygang.runtime.names import NODE_ID_LABEL

from tests.unit.builders import spec

LABELS = {"n1": {"rack": "r1", "zone": "z1", NODE_ID_LABEL: "n1"},
          "n2": {"rack": "r2", "zone": "z1", NODE_ID_LABEL: "n2"}}


class Host:
    def __init__(self):
        self.serve_http_port = None
        self.lease_s = 1.0
        self.jobs = None
        self.sessions: dict = {}
        self.launches: dict = {}
        self.node_labels = LABELS


def _selectors(monkeypatch, s, nodes):
    asked = {}

    def placement_group(bundles, **options):
        asked.update(options, bundles=bundles)
        return object()

    async def ready_within(groups, timeout):
        return True

    monkeypatch.setattr(launch_module, "placement_group", placement_group)
    monkeypatch.setattr(launch_module, "ready_within", ready_within)
    record = GangRecord("g-1", s, {}, 100, 0, 0.0)
    launch = gang_kind.new_run(Host(), record, nodes, 0, lambda m: None)
    asyncio.run(launch.reserve())
    return asked["bundle_label_selector"]


def test_bundles_are_pinned_to_the_domains_of_their_levels(monkeypatch):
    s = spec("g", "4xGPU=1", "SPREAD", topology={"required": "zone", "preferred": "host",
                                                 "segment": 2, "segment_level": "rack"})
    assert _selectors(monkeypatch, s, ["n1", "n1", "n2", "n2"]) == [
        {NODE_ID_LABEL: "n1", "zone": "z1", "rack": "r1"},
        {NODE_ID_LABEL: "n1", "zone": "z1", "rack": "r1"},
        {NODE_ID_LABEL: "n2", "zone": "z1", "rack": "r2"},
        {NODE_ID_LABEL: "n2", "zone": "z1", "rack": "r2"}]


def test_a_gang_without_a_topology_is_pinned_by_node_id_alone(monkeypatch):
    assert _selectors(monkeypatch, spec("g", "2xGPU=1"), ["n1", "n2"]) == [
        {NODE_ID_LABEL: "n1"}, {NODE_ID_LABEL: "n2"}]
