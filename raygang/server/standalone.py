"""`raygang api`: the API in a process of its own (uvicorn), connected to a Ray cluster."""

from __future__ import annotations

import ray
import uvicorn

from raygang.server.app import create_app
from raygang.server.auth import AuthConfig


def serve_forever(auth: AuthConfig, host: str = "127.0.0.1", port: int = 8000,
                  ray_address: str = "auto") -> None:
    """Connect to the Ray cluster at `ray_address` and serve the API until interrupted.
    The scheduler need not run yet: `/readyz` says when it does."""
    if not ray.is_initialized():
        ray.init(address=ray_address, namespace="raygang", log_to_driver=False)
    uvicorn.run(create_app(auth=auth), host=host, port=port, log_level="info",
                access_log=False)  # access logs would show paths, never tokens; off by default
