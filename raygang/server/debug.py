"""`/v1/debug/cycle`: one scheduling cycle's inputs and plan, for admins, to answer "why did
it do that?" offline: save the answer and run `raygang sim --replay-cycle FILE`. It holds
every queue's gangs and the whole cluster, so other tokens may not read it."""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations.

from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from raygang.control.api import SchedulerAPI
from raygang.server.access import Access, ApiError, Caller
from raygang.server.models import Problem


def debug_routes(app: FastAPI, scheduler: SchedulerAPI, access: Access) -> None:

    @app.get("/v1/debug/cycle", response_model=dict[str, Any], tags=["debug"],
             responses={403: {"model": Problem, "description": "not an admin token"}})
    async def debug_cycle(who: Caller) -> JSONResponse:
        """The inputs of the next scheduling cycle (cluster snapshot, pending gangs, policy,
        its time) and the plan it made, as `raygang sim --replay-cycle` reads them (admin
        tokens). The request wakes the scheduler; the cycle runs even with nothing
        pending. A cycle that failed comes with its error instead of a plan."""
        if not who.admin:
            raise ApiError(403, f"token {who.name!r} is not an admin: it may not read a "
                                "scheduling cycle (it shows every queue's gangs)")
        try:
            dump = await scheduler.debug_cycle()
        except TimeoutError as error:
            raise ApiError(503, str(error)) from None
        # Already plain JSON data: sent as it is, not walked again by FastAPI's encoder.
        return JSONResponse(dump)
