"""The REST API (FastAPI) and the status page: `create_app(scheduler, auth, clock)`."""

from raygang.server.app import create_app
from raygang.server.auth import AuthConfig, Principal

__all__ = ["AuthConfig", "Principal", "create_app"]
