"""Build the core's `ClusterSnapshot` from what Ray reports.

Free capacity per node is the smaller of two views:
- what the GCS says is available (it sees everything, including work raygang did not
  start, which therefore counts as used), less what raygang has booked there that the
  GCS cannot show yet (`PlacedGang.unseen`: a gang just admitted, or a Serve application
  between raygang's holds and Serve's own group), and
- the node's total minus what raygang has booked there itself, which covers placement
  groups created a moment ago that the GCS view does not show yet.
The GCS view lags removals by tens of milliseconds; taking the minimum errs on the side
of waiting one more cycle, never of promising the same GPU twice. The minimum alone is
not enough where work raygang did not start shares a node with a booking the GCS does
not show: each view then misses one of them (seen once: a preempted gang re-admitted
into the GPU its preemptor, a deployment, was handing to Serve).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

import ray

from raygang.core.resources import Resources
from raygang.core.snapshot import ClusterSnapshot, NodeState, PlacedGang
from raygang.runtime.ray_private import available_resources_per_node


def schedulable(resources: Mapping[str, float]) -> Resources:
    """Drop resources no bundle asks for: per-node markers (`node:10.0.0.1`,
    `node:__internal_head__`) and the ones Ray derives from placement groups
    (`GPU_group_<pg>`, `bundle_group_0_<pg>`)."""
    return Resources(
        {k: v for k, v in resources.items() if not k.startswith("node:") and "_group_" not in k}
    )


def observe(held: Iterable[PlacedGang], draining: Collection[str] = ()) -> ClusterSnapshot:
    """`draining`: nodes asked to go (being scaled down): alive, but nothing free on them."""
    held = tuple(held)
    ours: dict[str, Resources] = {}
    unseen: dict[str, Resources] = {}
    for gang in held:
        for node_id, bundle in gang.bundles:
            ours[node_id] = ours.get(node_id, Resources()) + bundle
            if gang.unseen:
                unseen[node_id] = unseen.get(node_id, Resources()) + bundle
    available = available_resources_per_node()
    nodes = []
    for info in ray.nodes():
        node_id = info["NodeID"]
        alive = bool(info.get("Alive"))
        total = schedulable(info.get("Resources", {}))
        seen_free = schedulable(available.get(node_id, {})) if alive else Resources()
        seen_free = seen_free - unseen.get(node_id, Resources())
        not_ours = total - ours.get(node_id, Resources())
        free = seen_free.minimum(not_ours) if alive and node_id not in draining else Resources()
        nodes.append(
            NodeState(
                node_id=node_id,
                total=total,
                free=free,
                labels=dict(info.get("Labels") or {}),
                alive=alive,
                name=_display_name(info),
            )
        )
    return ClusterSnapshot(nodes=tuple(nodes), placed=held)


def _display_name(info: Mapping) -> str:
    labels = info.get("Labels") or {}
    # KubeRay and cloud providers label nodes; a short id is the fallback.
    for key in ("ray.io/pod-name", "ray.io/node-name"):
        if labels.get(key):
            return labels[key]
    return info["NodeID"][:8]
