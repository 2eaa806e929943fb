"""KubeRay adapter: read and scale the worker groups of a RayCluster through the Kubernetes API.

Sits between `raygang.runtime` (which decides when to scale) and `raygang.core`; it imports
`kubernetes` and `raygang.core` only, never Ray.
"""

from raygang.kuberay.client import (
    ConflictError,
    ForbiddenError,
    InvalidError,
    KubeRayError,
    KubeRayUnavailable,
    NotFoundError,
    RayClusterClient,
)
from raygang.kuberay.groups import WorkerGroup, parse_quantity

__all__ = [
    "ConflictError",
    "ForbiddenError",
    "InvalidError",
    "KubeRayError",
    "KubeRayUnavailable",
    "NotFoundError",
    "RayClusterClient",
    "WorkerGroup",
    "parse_quantity",
]
