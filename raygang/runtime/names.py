"""Every name raygang gives what it creates in Ray, in one place, and the label selector
that pins what a Ray library places (Serve's replicas, Train's workers) to raygang's nodes.
A restarted scheduler finds its members, placement groups and Ray jobs again by these names
(runtime/scheduler/leftovers.py reads what carries the prefix), and so do the client side,
tests and operators (`ray list actors --filter namespace=raygang`).

Plain strings only: the client side (the Python API, a Ray Train controller's callback)
imports this without importing the scheduler.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raygang.core.spec import MemberSlot

NAMESPACE = "raygang"  # of the scheduler actor and every member actor
SCHEDULER_NAME = "raygang-scheduler"
# The Train callback named in RAY_TRAIN_CALLBACKS (a raygang job's driver, a sweep's trials),
# by its public name: Train imports the module and takes the attribute (`raygang`'s lazy
# export), so the value outlives a move of the module (the old path has a shim too).
TRAIN_CALLBACK = "raygang.RaygangTrain"
PREFIX = "raygang-"  # of every placement group, member actor and Ray job raygang creates
GCS_NAMESPACE = "raygang-state"  # the GCS store's key-value namespace (state.store: gcs)
NODE_ID_LABEL = "ray.io/node-id"  # Ray's own label: what pins a bundle to a node
API_APP = "raygang-api"  # the Serve application of the REST API (`raygang start --api`)
CONTROL_GROUP = "raygang"  # a member actor's concurrency group for raygang's own calls
COORDINATOR_REQUESTER_ID = "raygang"  # raygang's requests in Ray's AutoscalingCoordinator


def pg_name(gang_id: str) -> str:
    return f"{PREFIX}{gang_id}"


def member_name(gang_id: str, slot: MemberSlot) -> str:
    return f"{PREFIX}{gang_id}-{slot.role}-{slot.index}"


def hold_name(gang_id: str, index: int) -> str:
    """A placement group holding one bundle of a hand-off gang (a deployment, a job, a
    Train run) on its node until the library's own group takes its place."""
    return f"{PREFIX}{gang_id}-hold-{index}"


def ray_job_id(gang_id: str, attempt: int) -> str:
    """The submission id of a raygang job's Ray job, one per attempt."""
    return f"{PREFIX}{gang_id}-{attempt}"


def node_selector(nodes: Sequence[str]) -> dict[str, str]:
    """The label selector confining a library's bundles to `nodes` (Ray accepts
    `in(a,b)`): Serve's replicas, Train's workers."""
    if not nodes:
        raise ValueError("nodes: at least one Ray node id is needed")
    unique = sorted(set(nodes))
    return {NODE_ID_LABEL: unique[0] if len(unique) == 1 else f"in({','.join(unique)})"}
