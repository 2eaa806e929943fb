"""The API as a Ray Serve application (`raygang start --api`): it lives in the cluster, next
to the scheduler, restarts with Serve, and needs no process of its own to babysit.

The deployment builds its FastAPI app in the replica (Serve's deferred ingress), from the
`AuthConfig` it was bound with; that config travels as token digests, never tokens.
"""

from __future__ import annotations

import asyncio

from ray import serve

from raygang.runtime import serving
from raygang.runtime.names import API_APP
from raygang.runtime.ray_private import serve_http_port
from raygang.server.app import create_app
from raygang.server.auth import AuthConfig

READY_TIMEOUT_S = 120.0


@serve.deployment(name=API_APP, num_replicas=1, ray_actor_options={"num_cpus": 0},
                  max_ongoing_requests=1000)
@serve.ingress()
class RaygangAPI:
    def __init__(self, auth: AuthConfig):
        self._auth = auth

    def __serve_build_asgi_app__(self):
        return create_app(auth=self._auth)


def start_api(auth: AuthConfig, port: int | None = None, host: str = "127.0.0.1",
              route_prefix: str = "/") -> str:
    """Deploy the API on Serve (starting Serve if needed) and wait until it answers;
    returns its base URL. A running API is replaced (e.g. with new tokens)."""
    serving.ensure_serve_started(port, host)
    # mypy keeps a decorated class's type: serve.deployment made it a Deployment.
    app = RaygangAPI.bind(auth)  # type: ignore[attr-defined]
    asyncio.run(serving.start_app(API_APP, app, route_prefix,
                                  READY_TIMEOUT_S))
    proxy_port = serve_http_port()
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return f"http://{shown}:{proxy_port}{route_prefix.rstrip('/')}"


def stop_api() -> None:
    asyncio.run(serving.delete_app(API_APP))
