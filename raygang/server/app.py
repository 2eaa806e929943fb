"""The REST API, versioned under `/v1`, and the status page at `/`.

`create_app(scheduler, auth, clock)` builds it with its dependencies given, so the same
app runs standalone (`raygang api`, uvicorn), as a Ray Serve ingress (`raygang start
--api`), and in tests against any scheduler. Every error a client can cause is a 4xx with
a one-line `detail` (and, for invalid fields, `errors: [{field, message}]`); a 5xx means
the scheduler is unavailable (503) or a bug (500).
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations.

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Header, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError

from raygang.control.api import SchedulerAPI
from raygang.control.errors import (
    ClusterUnreachable,
    DeploymentExistsError,
    GangNotFoundError,
    IdempotencyConflictError,
    SchedulerRecoveringError,
    StoreError,
    UnschedulableError,
)
from raygang.control.status import (ClusterStatus, DryRunResult, GangStatus, QueueHistory,
                                    QueueStatus)
from raygang.core.config import UnknownPriorityClass
from raygang.core.gang import GangState
from raygang.core.queues import QueueSpec
from raygang.core.spec import NAME_PATTERN, SpecError, describe_errors
from raygang.core.workload_specs import DeploymentSpec
from raygang.runtime.client.connection import SchedulerClient, SchedulerUnavailable
from raygang.server.access import Access, ApiError, Caller
from raygang.server.auth import AuthConfig
from raygang.server.debug import debug_routes
from raygang.server.jobs import job_routes
from raygang.server.limits import BodyLimit
from raygang.server.models import (
    IDEMPOTENCY_KEY,
    MAX_PAGE,
    GangCreated,
    GangPage,
    GangSubmission,
    Health,
    Problem,
)

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
MAX_BODY_BYTES = 1 << 20  # a gang spec is a few KiB; arguments belong in object storage

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": Problem, "description": text}
    for code, text in (
        (400, "the body is not readable as JSON text (e.g. not UTF-8)"),
        (401, "missing or unknown bearer token"),
        (403, "the token may not use this queue or priority class"),
        (413, "request body too large"),
        (422, "invalid request: which field, and why"),
        (503, "the scheduler does not answer, is recovering, or could not store the request"),
    )
}


def create_app(
    scheduler: SchedulerAPI | None = None,
    auth: AuthConfig | None = None,
    clock: Callable[[], float] = time.time,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> FastAPI:
    """The API app. `scheduler`: an object with the scheduler actor's methods as
    coroutines (default: `SchedulerClient().aio`, the detached actor). `auth`: required;
    `AuthConfig.disabled()` only for local use."""
    if auth is None:
        raise ValueError("create_app needs an AuthConfig (AuthConfig.disabled() for local use)")
    scheduler = scheduler if scheduler is not None else SchedulerClient().aio
    app = FastAPI(
        title="raygang",
        version="1",
        description="Gang scheduling inside a Ray cluster: queues, priorities, preemption.",
        responses=_ERRORS,
    )
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    _install_error_handlers(app)
    access = Access(auth, scheduler)
    app.state.access = access  # the routes' `Caller` dependency authenticates with it
    _health_routes(app, scheduler)
    _gang_routes(app, scheduler, access, clock)
    job_routes(app, scheduler, access, clock)
    _deployment_routes(app, scheduler, access)
    _queue_and_cluster_routes(app, scheduler, access)
    debug_routes(app, scheduler, access)

    @app.get("/", include_in_schema=False)
    async def status_page() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def _health_routes(app: FastAPI, scheduler: SchedulerAPI) -> None:
    @app.get("/healthz", response_model=Health, tags=["health"])
    async def healthz() -> Health:
        """The API process is up (it does not ask the scheduler)."""
        return Health(status="ok")

    @app.get("/readyz", response_model=Health, tags=["health"],
             responses={503: {"model": Health}})
    async def readyz(response: Response) -> Health:
        """Ready only when the scheduler actor answers."""
        try:
            ping = await scheduler.ping()
        except SchedulerUnavailable as error:
            response.status_code = 503
            return Health(status="unavailable", detail=str(error))
        if not ping.get("ready", True):  # restarted, still reading its state back
            response.status_code = 503
            return Health(status="recovering",
                          detail=ping.get("last_cycle_error") or "reading the store")
        unreachable = ping.get("unreachable")
        # Still ready: the scheduler answers and keeps what it is sent; it only decides
        # nothing until Ray's GCS answers again (operations: When things break).
        return Health(status="ready", scheduler={k: ping[k] for k in ("gangs", "cycles")},
                      detail=None if not unreachable else
                      f"Ray's GCS does not answer (since {unreachable[0]:.0f}: "
                      f"{unreachable[1]}); no scheduling decision until it does")


def _gang_routes(app: FastAPI, scheduler: SchedulerAPI, access: Access,
                 clock: Callable[[], float]) -> None:
    check_queue, visible_gang = access.check_queue, access.visible_gang
    authorize_submission = access.authorize_submission

    @app.post("/v1/gangs", status_code=201, response_model=GangCreated, tags=["gangs"],
              responses={409: {"model": Problem, "description": "Idempotency-Key reused"}})
    async def submit_gang(
        submission: GangSubmission,
        who: Caller,
        response: Response,
        idempotency_key: Annotated[
            str | None,
            Header(pattern=IDEMPOTENCY_KEY,
                   description="retries with the same key never create a second gang"),
        ] = None,
    ) -> GangCreated:
        """Queue a gang; its roles name their code by import path."""
        authorize_submission(who, submission.queue, submission.priority)
        key = f"{who.name}:{idempotency_key}" if idempotency_key else None
        gang_id = await scheduler.submit(submission.gang_spec(), submission.programs(), key)
        location = f"/v1/gangs/{gang_id}"
        response.headers["Location"] = location
        return GangCreated(gang_id=gang_id, location=location)

    @app.post("/v1/gangs/dry-run", response_model=DryRunResult, tags=["gangs"])
    async def dry_run_gang(submission: GangSubmission, who: Caller) -> DryRunResult:
        """What submitting this gang now would do (admit where, preempt whom, or wait
        why), without doing it."""
        authorize_submission(who, submission.queue, submission.priority)
        return await scheduler.dry_run(submission.gang_spec())

    @app.get("/v1/gangs", response_model=GangPage, tags=["gangs"])
    async def list_gangs(
        who: Caller,
        queue: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
        state: GangState | None = None,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
        order: Annotated[Literal["oldest", "newest"], Query(
            description="submission order, oldest first (default) or newest first")] = "oldest",
    ) -> GangPage:
        """Gangs in submission order, filtered by queue and state, one page at a time."""
        if queue is not None:
            check_queue(who, queue)
        queues = [queue] if queue else who.visible_queues()
        page, total = await scheduler.gang_page(
            state, None if queues is None else list(queues), offset, limit, order == "newest")
        more = offset + limit < total
        return GangPage(items=page, total=total, offset=offset, limit=limit,
                        next_offset=offset + limit if more else None, now=clock())

    @app.get("/v1/gangs/{gang_id}", response_model=GangStatus, tags=["gangs"],
             responses={404: {"model": Problem}})
    async def get_gang(gang_id: str, who: Caller) -> GangStatus:
        """State, members and their nodes, pending reason, queue position, preemptions,
        and the event history."""
        return await visible_gang(who, gang_id)

    @app.delete("/v1/gangs/{gang_id}", response_model=GangStatus, tags=["gangs"],
                responses={404: {"model": Problem}, 409: {"model": Problem}})
    async def cancel_gang(gang_id: str, who: Caller) -> GangStatus:
        """Cancel; returns once its members are stopped and its resources released.
        Cancelling a cancelled gang again is a no-op; a finished one is a 409."""
        status = await visible_gang(who, gang_id)
        if status.state in (GangState.SUCCEEDED, GangState.FAILED):
            raise ApiError(409, f"gang {gang_id} already {status.state.value}")
        return await scheduler.cancel(gang_id, f"cancelled by {who.name} (REST)")


def _deployment_routes(app: FastAPI, scheduler: SchedulerAPI, access: Access) -> None:
    authorize_submission, visible_deployment = (access.authorize_submission,
                                                access.visible_deployment)

    @app.post("/v1/deployments", status_code=201, response_model=GangCreated,
              tags=["deployments"], responses={409: {"model": Problem}})
    async def deploy(spec: DeploymentSpec, who: Caller, response: Response) -> GangCreated:
        """Run a Ray Serve application (by `import_path`) as a gang of replicas."""
        if spec.import_path is None:
            raise ApiError(422, "import_path: required over REST (\"pkg.module:app\")")
        authorize_submission(who, spec.queue, spec.priority)
        gang_id = await scheduler.deploy(spec)
        location = f"/v1/deployments/{spec.name}"
        response.headers["Location"] = location
        return GangCreated(gang_id=gang_id, location=location)

    @app.get("/v1/deployments", response_model=list[GangStatus], tags=["deployments"])
    async def list_deployments(who: Caller) -> list[GangStatus]:
        return [d for d in await scheduler.list_deployments() if who.may_use_queue(d.queue)]

    @app.get("/v1/deployments/{name}", response_model=GangStatus, tags=["deployments"],
             responses={404: {"model": Problem}})
    async def get_deployment(name: str, who: Caller) -> GangStatus:
        return await visible_deployment(who, name)

    @app.delete("/v1/deployments/{name}", response_model=GangStatus, tags=["deployments"],
                responses={404: {"model": Problem}})
    async def undeploy(name: str, who: Caller) -> GangStatus:
        """Delete the Serve application and free its capacity."""
        await visible_deployment(who, name)
        return await scheduler.undeploy(name)


def _queue_and_cluster_routes(app: FastAPI, scheduler: SchedulerAPI, access: Access) -> None:

    @app.get("/v1/queues", response_model=list[QueueStatus], tags=["queues"])
    async def list_queues(who: Caller) -> list[QueueStatus]:
        """Quota, limit, usage, fair share and pending count of each queue it may see."""
        return [q for q in await scheduler.queues() if who.may_use_queue(q.name)]

    @app.get("/v1/history", response_model=QueueHistory, tags=["queues"])
    async def queue_history(who: Caller) -> QueueHistory:
        """Pending and running gangs and GPUs in use against the guarantee, per queue it may
        see, over the last hours (a ring the scheduler keeps: `history_interval_s`,
        `history_kept_s`)."""
        visible = who.visible_queues()
        return await scheduler.history(None if visible is None else sorted(visible))

    @app.put("/v1/queues/{name}", response_model=list[QueueStatus], tags=["queues"])
    async def set_queue(
        name: Annotated[str, PathParam(pattern=NAME_PATTERN)], queue: QueueSpec, who: Caller
    ) -> list[QueueStatus]:
        """Create a queue or change its quota, limit, weight or parent (admin tokens)."""
        if not who.admin:
            raise ApiError(403, f"token {who.name!r} is not an admin: it may not configure queues")
        if queue.name != name:
            raise ApiError(422, f"name: the body names queue {queue.name!r}, the path {name!r}")
        return await scheduler.set_queue(queue)

    @app.get("/v1/cluster", response_model=ClusterStatus, tags=["cluster"])
    async def cluster(who: Caller) -> ClusterStatus:
        """Nodes with free and used resources, and which gang's bundle sits where (gangs
        of queues the token may not see are left out; their usage still counts)."""
        status: ClusterStatus = await scheduler.cluster()
        if who.visible_queues() is None:
            return status
        nodes = [
            n.model_copy(update={"bundles": [b for b in n.bundles if who.may_use_queue(b.queue)]})
            for n in status.nodes
        ]
        return status.model_copy(update={"nodes": nodes})


def _problem(status: int, detail: str, errors: list[dict[str, Any]] | None = None,
             headers: dict[str, str] | None = None) -> JSONResponse:
    body = Problem(detail=detail, errors=errors).model_dump(exclude_none=True)
    return JSONResponse(body, status_code=status, headers=headers)


def _field_errors(items) -> list[dict[str, str]]:
    return [{"field": field, "message": message} for field, message in describe_errors(items)]


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        items = []
        for item in error.errors():
            loc = tuple(item.get("loc", ()))
            if loc[:1] == ("body",):
                loc = loc[1:]
            elif loc[:1] in (("query",), ("header",), ("path",)):
                loc = (f"{loc[0]}:{loc[1]}",) + loc[2:] if len(loc) > 1 else loc
            items.append({**item, "loc": loc})
        errors = _field_errors(items)
        first = errors[0] if errors else {"field": "", "message": "invalid request"}
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        where = f"{first['field']}: " if first["field"] else ""
        return _problem(422, f"{where}{first['message']}{more}", errors)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        return _problem(error.status, error.detail, headers=error.headers)

    @app.exception_handler(SpecError)
    async def spec_error(request: Request, error: SpecError) -> JSONResponse:
        errors = [{"field": f, "message": m} for f, m in error.problems]
        return _problem(422, str(error).splitlines()[0], errors)

    @app.exception_handler(ValidationError)
    async def model_error(request: Request, error: ValidationError) -> JSONResponse:
        errors = _field_errors(error.errors(include_url=False))
        return _problem(422, "; ".join(f"{e['field']}: {e['message']}" for e in errors), errors)

    statuses: tuple[tuple[type[Exception], int], ...] = (
        (GangNotFoundError, 404),
        (DeploymentExistsError, 409),
        (IdempotencyConflictError, 409),
        (UnschedulableError, 422),
        (UnknownPriorityClass, 422),
        (SchedulerUnavailable, 503),
        (SchedulerRecoveringError, 503),
        (StoreError, 503),
        (ClusterUnreachable, 503),  # a view asked for before Ray's GCS ever answered
        (ValueError, 422),  # the scheduler's own checks of a request (after pydantic's)
    )
    for kind, status in statuses:
        app.add_exception_handler(kind, _simple_handler(status))


def _simple_handler(status: int):
    async def handle(request: Request, error: Exception) -> JSONResponse:
        return _problem(status, str(error))

    return handle
