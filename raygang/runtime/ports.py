"""A free TCP port, for what raygang or its tests start beside other processes on one
machine (Serve's proxy, a test's API server, a local cluster's daemons)."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A port on `host` that no socket was bound to when asked. Nothing holds it afterwards:
    another process may bind it first, so a caller that can retries on another one
    (`serving.serve_on_a_free_port`); as long as nobody binds it, connections to it are
    refused, which tests use for an address where nothing listens."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
