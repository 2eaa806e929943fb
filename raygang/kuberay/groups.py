"""Worker groups of a RayCluster, read from its `spec.workerGroupSpecs[]`.

A worker group's node shape follows what the Ray autoscaler's KubeRay provider uses:
`rayStartParams` (`num-cpus`, `num-gpus`, `memory`, `resources`) first, then the limits
(or, failing those, the requests) of the group's Ray container, which is `containers[0]`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from raygang.core.resources import Resources

# Defaults written by the RayCluster CRD (ray.io_rayclusters.yaml) when a field is absent.
DEFAULT_MIN_REPLICAS = 0
DEFAULT_MAX_REPLICAS = 2**31 - 1
DEFAULT_NUM_OF_HOSTS = 1

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: dict[str, Decimal | int] = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": 10**3,
            "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
# Container resource names that Ray counts as accelerators (as Ray's KubeRay provider does).
_ACCELERATORS = {"nvidia.com/gpu": "GPU", "amd.com/gpu": "GPU", "google.com/tpu": "TPU"}


def parse_quantity(quantity: str | int | float) -> float:
    """A Kubernetes quantity ("500m", "16Gi", "1e3", "4") as a number.

    Raises ValueError for anything that is not a quantity.
    """
    if isinstance(quantity, bool):
        raise ValueError(f"not a quantity: {quantity!r}")
    if isinstance(quantity, (int, float)):
        return float(quantity)
    text = str(quantity).strip()
    number, factor = text, Decimal(1)
    if text[-2:] in _BINARY:
        number, factor = text[:-2], Decimal(_BINARY[text[-2:]])
    elif text[-1:] in _DECIMAL and not text[-1:].isdigit():
        # "E" is a suffix ("1E" = 1e18) unless it is part of an exponent like "1E3".
        number, factor = text[:-1], Decimal(_DECIMAL[text[-1:]])
    try:
        value = Decimal(number) * factor
    except InvalidOperation:
        raise ValueError(f"not a quantity: {quantity!r}") from None
    if not number or not value.is_finite() or value < 0:
        raise ValueError(f"not a quantity: {quantity!r}")
    return float(value)


def parse_custom_resources(text: str) -> dict[str, float]:
    """rayStartParams["resources"], e.g. '"{\\"TPU\\": 4}"' (quoted, as KubeRay documents) or '{"TPU": 4}'."""
    value: Any = text.strip()
    if value.startswith("'") and value.endswith("'"):
        value = value[1:-1]
    # KubeRay passes the value to `ray start --resources=...` through a shell, so it is
    # usually written as a JSON string holding the JSON object; unwrap at most twice.
    for _ in range(2):
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ValueError(f"rayStartParams resources is not JSON: {text!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"rayStartParams resources is not a JSON object: {text!r}")
    return {str(k): float(v) for k, v in value.items()}


@dataclass(frozen=True)
class WorkerGroup:
    """One `spec.workerGroupSpecs[]` entry of a RayCluster, as read at `resource_version`."""

    name: str
    replicas: int
    min_replicas: int
    max_replicas: int
    num_of_hosts: int
    ray_start_params: Mapping[str, str]
    resources: Resources  # the shape of one Ray node (one host) of this group
    workers_to_delete: tuple[str, ...]
    resource_version: str

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], resource_version: str) -> WorkerGroup:
        params = dict(spec.get("rayStartParams") or {})
        strategy = spec.get("scaleStrategy") or {}
        return cls(
            name=spec["groupName"],
            replicas=int(spec.get("replicas", 0)),
            min_replicas=int(spec.get("minReplicas", DEFAULT_MIN_REPLICAS)),
            max_replicas=int(spec.get("maxReplicas", DEFAULT_MAX_REPLICAS)),
            num_of_hosts=int(spec.get("numOfHosts", DEFAULT_NUM_OF_HOSTS)),
            ray_start_params=params,
            resources=node_shape(params, _ray_container(spec)),
            workers_to_delete=tuple(strategy.get("workersToDelete") or ()),
            resource_version=resource_version,
        )


def _ray_container(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or [{}]
    return containers[0]


def node_shape(params: Mapping[str, str], container: Mapping[str, Any]) -> Resources:
    """Resources of one Ray node: rayStartParams win over the container's limits/requests."""
    resources = container.get("resources") or {}
    # Limits first: Ray's KubeRay provider reads limits and falls back to requests.
    quantities = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    shape: dict[str, float] = {}
    if "cpu" in quantities:
        shape["CPU"] = parse_quantity(quantities["cpu"])
    if "memory" in quantities:
        shape["memory"] = parse_quantity(quantities["memory"])
    for key, name in _ACCELERATORS.items():
        if key in quantities:
            shape[name] = shape.get(name, 0.0) + parse_quantity(quantities[key])
    if "num-cpus" in params:
        shape["CPU"] = parse_quantity(params["num-cpus"])
    if "num-gpus" in params:
        shape["GPU"] = parse_quantity(params["num-gpus"])
    if "memory" in params:
        shape["memory"] = parse_quantity(params["memory"])
    if "resources" in params:
        shape.update(parse_custom_resources(params["resources"]))
    return Resources(shape)
