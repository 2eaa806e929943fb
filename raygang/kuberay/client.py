"""A thin RayCluster client: read worker groups, scale them with guarded JSON patches.

Every write is one JSON patch (RFC 6902) that starts with
`{"op": "test", "path": "/metadata/resourceVersion", "value": <read>}`, so it applies only
to the object it was computed from. The API server answers a failed `test` with
422 Invalid (its cause reads "testing value ... failed"); that, and 409 Conflict, make the
client re-read the cluster and try again, up to `max_retries` times.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable
from typing import Any

import urllib3
from kubernetes import client as kube
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException

from raygang.kuberay.groups import WorkerGroup

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"
JSON_PATCH = "application/json-patch+json"

Op = dict[str, Any]


class KubeRayError(Exception):
    """A failed call to the Kubernetes API, with the `Status` it answered."""

    def __init__(self, status: int | None, reason: str, message: str):
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class NotFoundError(KubeRayError):
    """404: the RayCluster (or namespace) does not exist."""


class ConflictError(KubeRayError):
    """409, or a JSON patch `test` that failed: someone else wrote the object first."""


class ForbiddenError(KubeRayError):
    """403: RBAC does not allow this call."""


class InvalidError(KubeRayError):
    """422 not caused by a `test` op: the object would not be valid."""


class KubeRayUnavailable(KubeRayError):
    """The API server could not be reached (connection refused, timeout, TLS)."""


_BY_STATUS: dict[int, type[KubeRayError]] = {
    403: ForbiddenError, 404: NotFoundError, 409: ConflictError, 422: InvalidError,
}


def error_from_api_exception(exc: ApiException) -> KubeRayError:
    """The typed error for an `ApiException`, with the message of its `Status` body."""
    body: dict[str, Any] = {}
    try:
        parsed = json.loads(exc.body or "")
        body = parsed if isinstance(parsed, dict) else {}
    except ValueError:
        pass
    status = exc.status
    reason = body.get("reason") or exc.reason or "Unknown"
    message = body.get("message") or (exc.body or "").strip() or str(exc.reason)
    causes = (body.get("details") or {}).get("causes") or []
    cause_messages = [c.get("message", "") for c in causes if isinstance(c, dict)]
    if status == 422 and any(_is_failed_test(m) for m in [message, *cause_messages]):
        # The server's top-level message is generic; the cause names the failed test.
        return ConflictError(status, reason, "; ".join(m for m in cause_messages if m) or message)
    return _BY_STATUS.get(status or 0, KubeRayError)(status, reason, message)


def _is_failed_test(message: str) -> bool:
    return "testing value" in message and "failed" in message


class RayClusterClient:
    """Reads and scales the worker groups of one RayCluster.

    `api` comes from outside (in-cluster config, a kubeconfig, or a test server).
    A conflict is retried up to `max_retries` times after the first attempt.
    """

    def __init__(
        self,
        api: kube.CustomObjectsApi,
        namespace: str,
        name: str,
        max_retries: int = 5,
        request_timeout: float | tuple[float, float] | None = 10.0,
    ):
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.api = api
        self.namespace = namespace
        self.name = name
        self.max_retries = max_retries
        self.request_timeout = request_timeout

    @classmethod
    def from_config(
        cls, namespace: str, name: str, kubeconfig: str | None = None, **kwargs: Any
    ) -> RayClusterClient:
        """In-cluster config when running in a pod, else `kubeconfig` (or ~/.kube/config)."""
        configuration = kube.Configuration()
        if kubeconfig is None:
            try:
                kube_config.load_incluster_config(client_configuration=configuration)
            except kube_config.ConfigException:
                kube_config.load_kube_config(client_configuration=configuration)
        else:
            kube_config.load_kube_config(
                config_file=kubeconfig, client_configuration=configuration
            )
        api = kube.CustomObjectsApi(kube.ApiClient(configuration))
        return cls(api, namespace, name, **kwargs)

    # Reads ----------------------------------------------------------------------------
    def get(self) -> dict[str, Any]:
        """The RayCluster object as the server has it now."""
        return self._call(
            self.api.get_namespaced_custom_object,
            GROUP, VERSION, self.namespace, PLURAL, self.name,
        )

    def worker_groups(self) -> list[WorkerGroup]:
        return _groups_of(self.get())

    def worker_group(self, group: str) -> WorkerGroup:
        cluster = self.get()
        index = _index_of(cluster, group, self.name)
        return _groups_of(cluster)[index]

    # Writes ---------------------------------------------------------------------------
    def set_replicas(self, group: str, replicas: int) -> WorkerGroup:
        """Set `replicas` of `group`; ValueError outside [minReplicas, maxReplicas]."""

        def ops(current: WorkerGroup, base: str, spec: dict[str, Any]) -> list[Op]:
            _check_bounds(current, replicas)
            if current.replicas == replicas and "replicas" in spec:
                return []
            return _set_replicas_ops(base, spec, replicas)

        return self._patch_group(group, ops)

    def delete_workers(self, group: str, pod_names: Iterable[str]) -> WorkerGroup:
        """Ask KubeRay to delete these worker pods and lower `replicas` by as many, atomically.

        Names already listed in `scaleStrategy.workersToDelete` are not counted twice.
        """
        names = list(dict.fromkeys(pod_names))

        def ops(current: WorkerGroup, base: str, spec: dict[str, Any]) -> list[Op]:
            new = [n for n in names if n not in current.workers_to_delete]
            if not new:
                return []
            _check_bounds(current, current.replicas - len(new))
            return [
                *_set_replicas_ops(base, spec, current.replicas - len(new)),
                *_append_workers_ops(base, spec, new),
            ]

        return self._patch_group(group, ops)

    def forget_deleted_workers(self, group: str, alive: Collection[str]) -> WorkerGroup:
        """Drop names from `scaleStrategy.workersToDelete` whose pods are gone (`alive`:
        the pod names still up). KubeRay never clears the list itself (Ray's autoscaler
        does, in `safe_to_scale`); whoever writes it must, or it grows forever."""
        keep = set(alive)

        def ops(current: WorkerGroup, base: str, spec: dict[str, Any]) -> list[Op]:
            listed = list(current.workers_to_delete)
            left = [n for n in listed if n in keep]
            if left == listed:
                return []
            path = f"{base}/scaleStrategy/workersToDelete"
            return [{"op": "test", "path": path, "value": listed},
                    {"op": "replace", "path": path, "value": left}]

        return self._patch_group(group, ops)

    def _patch_group(
        self, group: str, build: Callable[[WorkerGroup, str, dict[str, Any]], list[Op]]
    ) -> WorkerGroup:
        last: KubeRayError | None = None
        for _ in range(self.max_retries + 1):
            cluster = self.get()
            # Found by name on every read: another writer may have reordered the groups.
            index = _index_of(cluster, group, self.name)
            spec = cluster["spec"]["workerGroupSpecs"][index]
            current = _groups_of(cluster)[index]
            ops = build(current, f"/spec/workerGroupSpecs/{index}", spec)
            if not ops:
                return current
            guard = {"op": "test", "path": "/metadata/resourceVersion",
                     "value": cluster["metadata"]["resourceVersion"]}
            try:
                patched = self._call(
                    self.api.patch_namespaced_custom_object,
                    GROUP, VERSION, self.namespace, PLURAL, self.name, [guard, *ops],
                    # 37.0.2 defaults to merge patch for custom objects: say JSON patch.
                    _content_type=JSON_PATCH,
                )
            except ConflictError as exc:
                last = exc
                continue
            return _groups_of(patched)[_index_of(patched, group, self.name)]
        assert last is not None
        raise ConflictError(
            last.status, last.reason,
            f"gave up on {self.namespace}/{self.name} group {group!r} after "
            f"{self.max_retries + 1} conflicting writes: {last.message}",
        )

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, _request_timeout=self.request_timeout, **kwargs)
        except ApiException as exc:
            raise error_from_api_exception(exc) from exc
        except urllib3.exceptions.HTTPError as exc:  # MaxRetryError, timeouts, refused
            raise KubeRayUnavailable(None, "Unavailable", str(exc)) from exc


def _groups_of(cluster: dict[str, Any]) -> list[WorkerGroup]:
    rv = cluster["metadata"]["resourceVersion"]
    return [WorkerGroup.from_spec(s, rv) for s in cluster["spec"].get("workerGroupSpecs") or []]


def _index_of(cluster: dict[str, Any], group: str, name: str) -> int:
    for index, spec in enumerate(cluster["spec"].get("workerGroupSpecs") or []):
        if spec.get("groupName") == group:
            return index
    raise NotFoundError(404, "NotFound", f"RayCluster {name!r} has no worker group {group!r}")


def _check_bounds(group: WorkerGroup, replicas: int) -> None:
    if not group.min_replicas <= replicas <= group.max_replicas:
        raise ValueError(
            f"worker group {group.name!r}: replicas {replicas} outside "
            f"[minReplicas={group.min_replicas}, maxReplicas={group.max_replicas}]"
        )


def _set_replicas_ops(base: str, spec: dict[str, Any], replicas: int) -> list[Op]:
    path = f"{base}/replicas"
    if "replicas" not in spec:
        return [{"op": "add", "path": path, "value": replicas}]
    return [{"op": "test", "path": path, "value": spec["replicas"]},
            {"op": "replace", "path": path, "value": replicas}]


def _append_workers_ops(base: str, spec: dict[str, Any], names: list[str]) -> list[Op]:
    strategy = spec.get("scaleStrategy")
    if strategy is None:
        return [{"op": "add", "path": f"{base}/scaleStrategy",
                 "value": {"workersToDelete": names}}]
    path = f"{base}/scaleStrategy/workersToDelete"
    listed = strategy.get("workersToDelete")
    if listed is None:
        return [{"op": "add", "path": path, "value": names}]
    return [{"op": "test", "path": path, "value": listed},
            {"op": "replace", "path": path, "value": [*listed, *names]}]
