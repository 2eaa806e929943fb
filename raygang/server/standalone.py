"""The API in a process of its own: `raygang api` (uvicorn in the foreground), or in a
background thread of a Python process (a notebook, a benchmark, the tests)."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

import ray
import uvicorn

from raygang.server.app import create_app
from raygang.server.auth import AuthConfig

START_TIMEOUT_S = 30.0
# Longer than clients keep an idle connection (httpx and requests pools: 5 s), so that
# the client closes it first: with uvicorn's default (also 5 s) a request sent on a
# connection the server is closing that instant fails with a read error (seen under load).
KEEP_ALIVE_S = 30


def serve_forever(auth: AuthConfig, host: str = "127.0.0.1", port: int = 8000,
                  ray_address: str = "auto") -> None:
    """Connect to the Ray cluster at `ray_address` and serve the API until interrupted.
    The scheduler need not run yet: `/readyz` says when it does."""
    if not ray.is_initialized():
        ray.init(address=ray_address, namespace="raygang", log_to_driver=False)
    uvicorn.run(create_app(auth=auth), host=host, port=port, log_level="info",
                access_log=False, timeout_keep_alive=KEEP_ALIVE_S)  # access logs would show paths, never tokens; off by default


@dataclass
class ApiThread:
    """The API served by uvicorn in a daemon thread of this process (connected to Ray)."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def serve_in_thread(auth: AuthConfig, host: str = "127.0.0.1", port: int = 0) -> ApiThread:
    """Start the API in a background thread (port 0: a free one); returns once it listens."""
    if port == 0:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(auth=auth), host=host, port=port,
                                           log_level="warning", access_log=False,
                                           timeout_keep_alive=KEEP_ALIVE_S))
    thread = threading.Thread(target=server.run, name="raygang-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"the raygang API did not start on {host}:{port}")
        time.sleep(0.05)
    return ApiThread(f"http://{host}:{port}", server, thread)
