"""Who calls the API (the bearer token's principal) and what it may see and use; and
`ApiError`, the 4xx a route raises. Shared by the route groups (app.py, jobs.py)."""

# No `from __future__ import annotations`: FastAPI reads `principal`'s annotations.

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from raygang.control.api import SchedulerAPI
from raygang.control import kinds
from raygang.control.errors import GangNotFoundError
from raygang.control.status import GangStatus
from raygang.server.auth import AuthConfig, Principal


class ApiError(Exception):
    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None):
        self.status, self.detail, self.headers = status, detail, headers


_bearer = HTTPBearer(auto_error=False, description="a token from RAYGANG_AUTH_TOKENS_FILE")


def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller, authenticated by the app's `Access` (`create_app` keeps it in the app's
    state: one process may serve several apps, each with its tokens)."""
    access: Access = request.app.state.access
    header = f"Bearer {credentials.credentials}" if credentials else None
    who = access.auth.authenticate(header)
    if who is None:
        raise ApiError(401, "missing or unknown bearer token",
                       {"WWW-Authenticate": 'Bearer realm="raygang"'})
    return who


# Who calls a route: its parameter `who: Caller` is the bearer token's principal.
Caller = Annotated[Principal, Depends(principal)]


class Access:
    """Who calls (the bearer token's principal, as a route dependency: `Caller`), and what
    it may see and use."""

    def __init__(self, auth: AuthConfig, scheduler: SchedulerAPI):
        self.auth = auth
        self._scheduler = scheduler

    @staticmethod
    def check_queue(who: Principal, queue: str) -> None:
        if not who.may_use_queue(queue):
            raise ApiError(403, f"token {who.name!r} may not use queue {queue!r}")

    def authorize_submission(self, who: Principal, queue: str, priority: int | str) -> None:
        self.check_queue(who, queue)
        if not who.may_use_priority(priority):
            raise ApiError(403, f"token {who.name!r} may not use priority {priority!r}")

    async def visible_gang(self, who: Principal, gang_id: str) -> GangStatus:
        status = await self._scheduler.status(gang_id)
        self.check_queue(who, status.queue)
        return status

    async def visible_job(self, who: Principal, gang_id: str) -> GangStatus:
        """A job's status; 404 for an unknown id or a gang of another kind. The queue is
        checked before the kind: a token learns nothing of other queues' gangs here that
        `GET /v1/gangs/{id}` would not tell it."""
        try:
            status = await self.visible_gang(who, gang_id)
        except GangNotFoundError:
            raise GangNotFoundError(f"no job with id {gang_id!r}") from None
        if not kinds.of(status.kind).ray_job:
            raise GangNotFoundError(f"{gang_id} is a {status.kind}, not a job")
        return status

    async def visible_deployment(self, who: Principal, name: str) -> GangStatus:
        for status in await self._scheduler.list_deployments():
            if status.name == name:
                self.check_queue(who, status.queue)
                return status
        raise GangNotFoundError(f"no deployment named {name!r}")
