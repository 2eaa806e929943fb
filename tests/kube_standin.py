"""A small, honest stand-in for the Kubernetes API server: the RayCluster routes only.

A real HTTP server on loopback (stdlib `ThreadingHTTPServer` in a thread) that the official
`kubernetes` client talks to through `kubernetes.client.Configuration(host=standin.url)`:

- `GET  /apis/ray.io/v1/namespaces/{ns}/rayclusters`          list
- `GET  /apis/ray.io/v1/namespaces/{ns}/rayclusters/{name}`   read
- `PATCH` on the same path: `application/json-patch+json` (RFC 6902: add, remove, replace,
  test) or `application/merge-patch+json` (RFC 7386); strategic merge patch answers 415,
  as it does for custom resources.

Answers are shaped as kube-apiserver shapes them: `metadata.resourceVersion` is a string
bumped on every write, `uid` is set on create; errors are `Status` objects. A JSON patch
that fails to apply (a failed `test` included) answers 422 Invalid with the generic message
and the patch error as a cause, as `errors.NewGenericServerResponse(422, ...)` in
apiserver's `handlers/patch.go` does; a patched object whose `resourceVersion` differs from
the stored one answers 409 Conflict.

Test hooks: `mutate` (another writer), `before_next_patch` (a writer that slips in between
a client's read and its patch), `fail_next` (inject 403, 500, ...), and `requests`.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ROUTE = re.compile(r"^/apis/ray\.io/v1/namespaces/([^/]+)/rayclusters(?:/([^/]+))?$")
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    content_type: str | None
    body: Any


def status_body(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "message": message, "reason": reason,
                            "code": code}
    if details:
        body["details"] = details
    return body


class _Failure(Exception):
    def __init__(self, code: int, body: dict[str, Any]):
        super().__init__(body.get("message"))
        self.code = code
        self.body = body


def _invalid_patch(message: str) -> _Failure:
    # apiserver: errors.NewGenericServerResponse(422, "", GroupResource{}, "", err.Error(), 0, false)
    return _Failure(422, status_body(
        422, "Invalid", "the server rejected our request due to an error in our request",
        causes=[{"reason": "UnexpectedServerResponse", "message": message}],
    ))


class KubeStandIn:
    """Start with `with KubeStandIn() as kube:`; `kube.url` is the API server's address."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[tuple[str, str], dict[str, Any]] = {}
        self._rv = itertools.count(1000)
        self._faults: list[tuple[str | None, int, str, str]] = []
        self._before_patch: list[Callable[[], None]] = []
        self.requests: list[Request] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> KubeStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # Test hooks -----------------------------------------------------------------------
    def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        meta.update(namespace=namespace, uid=str(uuid.uuid4()), generation=1,
                    resourceVersion=str(next(self._rv)))
        obj.setdefault("apiVersion", "ray.io/v1")
        obj.setdefault("kind", "RayCluster")
        with self._lock:
            self._objects[(namespace, meta["name"])] = obj
        return copy.deepcopy(obj)

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._objects[(namespace, name)])

    def mutate(self, namespace: str, name: str, fn: Callable[[dict[str, Any]], None]) -> None:
        """Another writer: `fn` edits the stored object in place; resourceVersion moves on."""
        with self._lock:
            obj = self._objects[(namespace, name)]
            fn(obj)
            obj["metadata"]["resourceVersion"] = str(next(self._rv))

    def before_next_patch(self, fn: Callable[[], None]) -> None:
        """Run `fn` when the next PATCH arrives, before it is applied (one PATCH each)."""
        self._before_patch.append(fn)

    def fail_next(self, code: int, reason: str, message: str, method: str | None = None) -> None:
        """Answer the next request (of `method`, if given) with this `Status`."""
        self._faults.append((method, code, reason, message))

    def patches(self) -> list[Request]:
        return [r for r in self.requests if r.method == "PATCH"]

    # Serving --------------------------------------------------------------------------
    def handle(self, method: str, path: str, content_type: str | None, raw: bytes) -> tuple[int, Any]:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        self.requests.append(Request(method, path, content_type, body))
        for i, (only, code, reason, message) in enumerate(self._faults):
            if only in (None, method):
                del self._faults[i]
                return code, status_body(code, reason, message)
        try:
            return 200, self._route(method, path, content_type, body)
        except _Failure as failure:
            return failure.code, failure.body

    def _route(self, method: str, path: str, content_type: str | None, body: Any) -> Any:
        match = _ROUTE.match(path.split("?", 1)[0])
        if match is None or method not in ("GET", "PATCH") or (method == "PATCH" and not match[2]):
            raise _Failure(404, status_body(
                404, "NotFound", "the server could not find the requested resource"))
        namespace, name = match[1], match[2]
        if name is None:
            return self._list(namespace)
        if method == "PATCH":
            for hook in self._before_patch[:1]:
                self._before_patch.pop(0)
                hook()
        with self._lock:
            obj = self._objects.get((namespace, name))
            if obj is None:
                raise _Failure(404, status_body(
                    404, "NotFound", f'rayclusters.ray.io "{name}" not found',
                    name=name, group="ray.io", kind="rayclusters"))
            if method == "GET":
                return copy.deepcopy(obj)
            patched = _apply_patch(obj, content_type, body)
            return self._store(namespace, name, obj, patched)

    def _list(self, namespace: str) -> dict[str, Any]:
        with self._lock:
            items = [copy.deepcopy(o) for (ns, _), o in sorted(self._objects.items())
                     if ns == namespace]
            rv = str(next(self._rv))
        return {"apiVersion": "ray.io/v1", "kind": "RayClusterList",
                "metadata": {"resourceVersion": rv}, "items": items}

    def _store(self, namespace: str, name: str, old: dict[str, Any], new: Any) -> dict[str, Any]:
        if not isinstance(new, dict):
            raise _invalid_patch("patched object is not a JSON object")
        meta = new.setdefault("metadata", {})
        if meta.get("resourceVersion", old["metadata"]["resourceVersion"]) != old["metadata"]["resourceVersion"]:
            raise _Failure(409, status_body(
                409, "Conflict",
                f'Operation cannot be fulfilled on rayclusters.ray.io "{name}": the object '
                "has been modified; please apply your changes to the latest version and try again",
                name=name, group="ray.io", kind="rayclusters"))
        for key in ("name", "namespace", "uid"):  # immutable; the server keeps its own
            meta[key] = old["metadata"][key]
        if new.get("spec") != old.get("spec"):
            meta["generation"] = old["metadata"].get("generation", 1) + 1
        meta["resourceVersion"] = str(next(self._rv))
        self._objects[(namespace, name)] = new
        return copy.deepcopy(new)


def _apply_patch(obj: dict[str, Any], content_type: str | None, patch: Any) -> Any:
    kind = (content_type or "").split(";")[0].strip()
    if kind == JSON_PATCH:
        if not isinstance(patch, list) or not all(isinstance(op, dict) for op in patch):
            raise _Failure(400, status_body(400, "BadRequest", "json: cannot unmarshal into patch"))
        doc = copy.deepcopy(obj)
        for op in patch:
            doc = _apply_op(doc, op)
        return doc
    if kind == MERGE_PATCH:
        if not isinstance(patch, dict):
            raise _Failure(400, status_body(400, "BadRequest", "invalid JSON Patch"))
        return merge_patch(obj, patch)
    raise _Failure(415, status_body(
        415, "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{JSON_PATCH}, {MERGE_PATCH}, application/apply-patch+yaml"))


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, without touching `target`: mappings merge, lists and
    scalars are replaced, null deletes. (kustomize's strategic merge on a custom resource,
    which knows no patch strategy for its fields, comes to the same: test_manifests.)"""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _Failure(400, status_body(400, "BadRequest", f"invalid JSON pointer {path!r}"))
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], op: str) -> Any:
    node = doc
    for part in parts[:-1]:
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise _invalid_patch(f"{op} operation does not apply: doc is missing path: "
                                 f"\"/{'/'.join(parts)}\": missing value") from None
    return node


def _apply_op(doc: Any, op: dict[str, Any]) -> Any:
    # Error texts follow evanphx/json-patch, which kube-apiserver uses.
    name, path = op.get("op"), op.get("path", "")
    parts = _pointer(path)
    if name == "test":
        current = _value_at(doc, parts)
        if current is _MISSING or current != op.get("value"):
            raise _invalid_patch(f"testing value {path} failed: test failed")
        return doc
    if not parts:
        if name in ("add", "replace"):
            return copy.deepcopy(op["value"])
        raise _invalid_patch(f"{name} operation does not apply: doc is missing path: \"\"")
    parent, key = _parent(doc, parts, name), parts[-1]
    if isinstance(parent, list):
        index = len(parent) if key == "-" else _index(key, parent, name, path)
        if name == "add":
            parent.insert(index, copy.deepcopy(op["value"]))
        elif name == "replace":
            parent[index] = copy.deepcopy(op["value"])
        elif name == "remove":
            del parent[index]
        else:
            raise _Failure(400, status_body(400, "BadRequest", f"Unexpected kind: {name}"))
    elif isinstance(parent, dict):
        if name in ("replace", "remove") and key not in parent:
            raise _invalid_patch(f"{name} operation does not apply: doc is missing key: {path}: missing value")
        if name in ("add", "replace"):
            parent[key] = copy.deepcopy(op["value"])
        elif name == "remove":
            del parent[key]
        else:
            raise _Failure(400, status_body(400, "BadRequest", f"Unexpected kind: {name}"))
    else:
        raise _invalid_patch(f"{name} operation does not apply: doc is missing path: {path}")
    return doc


def _index(key: str, parent: list[Any], op: str, path: str) -> int:
    limit = len(parent) + (1 if op == "add" else 0)
    if not key.isdigit() or int(key) >= limit:
        raise _invalid_patch(f"{op} operation does not apply: doc is missing path: {path}")
    return int(key)


class _Missing:
    pass


_MISSING = _Missing()


def _value_at(doc: Any, parts: list[str]) -> Any:
    node = doc
    for part in parts:
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            return _MISSING
    return node


def _handler_for(standin: KubeStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            code, body = standin.handle(self.command, self.path,
                                        self.headers.get("Content-Type"), raw)
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_PUT = do_POST = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:  # quiet in tests
            pass

    return Handler
