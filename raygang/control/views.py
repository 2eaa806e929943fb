"""What the scheduler shows of its queues and of the cluster, built from its book."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from raygang.control.records import GangRecord
from raygang.control.status import ClusterStatus, HeldBundle, NodeStatus, QueueStatus, ScalingStatus
from raygang.core.config import PolicyConfig
from raygang.core.report import queue_report
from raygang.core.resources import Resources
from raygang.core.snapshot import ClusterSnapshot


def queue_statuses(snapshot: ClusterSnapshot, pending: Mapping[str, Mapping[Resources, int]],
                   policy: PolicyConfig) -> list[QueueStatus]:
    """The queue tree with usage (what `snapshot.placed` holds) and fair shares; `pending`:
    what waits in each queue, as `Registry.pending_totals`."""
    specs = policy.queue_tree.specs
    return [
        QueueStatus(
            name=r.name, parent=r.parent, leaf=r.leaf, weight=r.weight,
            quota=r.quota.to_dict(), limit=None if r.limit is None else r.limit.to_dict(),
            usage=r.usage.to_dict(), fair_share=r.fair_share,
            share_ratio=min(r.share_ratio, 1e9), pending=r.pending, running=r.running,
            **{own: getattr(specs[r.name], own) if r.name in specs else None
               for own in ("backfill_lookahead", "backfill_max_runtime_s")},
        )
        for r in queue_report(snapshot, pending, policy)
    ]


def cluster_status(snapshot: ClusterSnapshot, holding: Iterable[GangRecord], observed_at: float,
                   scaling: ScalingStatus | None,
                   unreachable: tuple[float, str] | None = None) -> ClusterStatus:
    """Nodes with their total, free and used resources, and which gang holds what."""
    held: dict[str, list[HeldBundle]] = {}
    for record in holding:
        for rank, (node_id, bundle) in enumerate(zip(record.nodes, record.spec.bundles)):
            held.setdefault(node_id, []).append(HeldBundle(
                gang_id=record.gang_id, name=record.spec.name, queue=record.spec.queue,
                rank=rank, resources=bundle.to_dict(),
            ))
    nodes = [
        NodeStatus(
            node_id=n.node_id, name=n.display, alive=n.alive, labels=dict(n.labels),
            # Booked beyond its total while a gang leaves it: none free, all used.
            total=n.total.to_dict(), free=n.free.positive().to_dict(),
            used=(n.total - n.free.positive()).to_dict(), bundles=held.get(n.node_id, []),
        )
        for n in snapshot.nodes
    ]
    alive = snapshot.alive_nodes
    return ClusterStatus(
        observed_at=observed_at, nodes=nodes,
        total=sum((n.total for n in alive), Resources()).to_dict(),
        free=sum((n.free.positive() for n in alive), Resources()).to_dict(),
        scaling=scaling,
        unreachable_since=unreachable[0] if unreachable else None,
        unreachable_reason=unreachable[1] if unreachable else None,
    )
