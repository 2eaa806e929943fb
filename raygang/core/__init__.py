"""Pure scheduling decisions: no ray, kubernetes or web imports (checked by import-linter).

`schedule(snapshot, pending, config, now) -> Plan` is the whole contract with the runtime.
"""

from raygang.core.capacity import Capacity
from raygang.core.config import (
    DEFAULT_PRIORITY_CLASSES,
    PriorityClass,
    PolicyConfig,
    UnknownPriorityClass,
)
from raygang.core.explain import describe_bundles, why_not
from raygang.core.gang import GangState, PendingGang
from raygang.core.placement import place
from raygang.core.fairshare import QueueBook, water_fill
from raygang.core.plan import Admission, Growth, Plan, Preemption, WaitCode, Waiting
from raygang.core.queues import DEFAULT_QUEUE, QueueSpec, QueueTree
from raygang.core.resources import Resources
from raygang.core.schedule import Scheduler, schedule, unschedulable_reason
from raygang.core.snapshot import ClusterSnapshot, Elastic, NodeState, PlacedGang
from raygang.core.topology import Topology
from raygang.core.spec import (
    GangSpec,
    MemberSlot,
    Resize,
    RoleSpec,
    SpecError,
    Strategy,
    gang_spec,
    role_spec,
)

__all__ = [
    "Admission", "Capacity", "DEFAULT_QUEUE", "Elastic", "Growth", "Preemption", "Resize", "QueueBook", "QueueSpec",
    "QueueTree", "water_fill", "ClusterSnapshot", "DEFAULT_PRIORITY_CLASSES", "GangSpec",
    "GangState", "MemberSlot", "NodeState", "PendingGang", "PlacedGang", "Plan",
    "PriorityClass", "Resources", "RoleSpec", "PolicyConfig", "SpecError", "Strategy", "Topology",
    "UnknownPriorityClass", "WaitCode", "Waiting", "describe_bundles", "gang_spec", "place",
    "role_spec", "schedule", "Scheduler", "unschedulable_reason", "why_not",
]
