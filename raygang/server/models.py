"""What the REST API takes and gives: the Python API's own models, plus the code to run.

A gang submitted over HTTP cannot carry Python objects, so each role names its code by
import path (`"pkg.module:function_or_class"`) with JSON arguments and an optional Ray
`runtime_env`, as Ray Jobs and Serve configs do. `GangSubmission` is a `GangSpec` whose
roles carry that program: the spec's own validators run on it unchanged.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from raygang.core.gang import GangState
from raygang.core.spec import GangSpec, RoleSpec
from raygang.control.program import RoleProgram
from raygang.control.status import GangStatus

IMPORT_PATH = r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$"
IDEMPOTENCY_KEY = r"^[\x21-\x7e]{1,255}$"  # printable ASCII, as Stripe's keys
MAX_PAGE = 1000


class RoleSubmission(RoleSpec):
    """A role plus what its members run."""

    entrypoint: str = Field(
        pattern=IMPORT_PATH, max_length=512,
        description='"pkg.module:function_or_class" imported by each member',
    )
    args: list[Any] = Field([], description="positional arguments (JSON values)")
    kwargs: dict[str, Any] = Field({}, description="keyword arguments (JSON values)")
    runtime_env: dict[str, Any] | None = Field(
        None, description="Ray runtime_env of the members (working_dir, pip, env_vars...)"
    )
    max_concurrency: int | None = Field(None, ge=1, le=10_000)

    def role_spec(self) -> RoleSpec:
        # Every field of RoleSpec, none by hand (min_replicas was once left out: an
        # elastic role sent over REST ran rigid at its maximum).
        return RoleSpec(**{name: getattr(self, name) for name in RoleSpec.model_fields})

    def program(self) -> RoleProgram:
        return RoleProgram(target=self.entrypoint, args=tuple(self.args), kwargs=self.kwargs,
                           max_concurrency=self.max_concurrency, runtime_env=self.runtime_env)


class GangSubmission(GangSpec):
    """`POST /v1/gangs`: a gang spec whose roles name the code they run."""

    roles: tuple[RoleSubmission, ...] = Field(min_length=1)

    def gang_spec(self) -> GangSpec:
        fields = self.model_dump(exclude={"roles"})
        return GangSpec(**fields, roles=tuple(r.role_spec() for r in self.roles))

    def programs(self) -> dict[str, RoleProgram]:
        return {role.name: role.program() for role in self.roles}


class GangCreated(BaseModel):
    gang_id: str
    location: str


class GangPage(BaseModel):
    """One page of `GET /v1/gangs` (or `GET /v1/jobs`), in submission order."""

    model_config = ConfigDict(frozen=True)

    items: list[GangStatus]
    total: int = Field(description="gangs matching the filters, on all pages")
    offset: int
    limit: int
    next_offset: int | None = Field(None, description="offset of the next page; null on the last")
    now: float = Field(description="the server's clock (seconds since the epoch), for ages")


class JobLogs(BaseModel):
    """`GET /v1/jobs/{id}/logs`: the output of the job's Ray job (its last attempt's)."""

    gang_id: str
    state: GangState
    ray_job_id: str | None = Field(None, description="null until the job first started")
    logs: str = Field(description="the driver's output so far; empty before it started")


class Health(BaseModel):
    status: str
    scheduler: dict[str, Any] | None = None
    detail: str | None = None


class Problem(BaseModel):
    """Every error body: one line saying what went wrong; `errors` for invalid fields."""

    detail: str
    errors: list[dict[str, Any]] | None = None
