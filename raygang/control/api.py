"""What a scheduler answers, as typed protocols: the one list of its calls.

`ControlPlane` implements `SchedulerAPI` (mypy checks it: `control/plane.py` ends with the
assignment that says so); the Ray actor (`runtime/scheduler/actor.py`) forwards each of these
calls to its plane, and every caller names the call it makes by the protocol's method:
`SchedulerClient.call(SchedulerAPI.status, gang_id)` (the Python API, blocking) and
`SchedulerClient.aio` (the REST API, coroutines) are typed by these signatures, so a
change here is a type error at every caller, and go-to-definition lands here.
`tests/unit/test_scheduler_api.py` checks that the plane, the actor and the proxies
offer exactly these calls with these parameters.

`TrainAPI` is the narrower surface a Ray Train controller's callback
(`runtime/client/train_callback.py`) calls, in its own process.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol

from raygang.control.program import RoleProgram
from raygang.control.status import (ClusterStatus, DryRunResult, GangStatus, QueueHistory,
                                    QueueStatus)
from raygang.core.gang import GangState
from raygang.core.queues import QueueSpec
from raygang.core.spec import GangSpec
from raygang.core.workload_specs import DeploymentSpec, JobSpec


class SchedulerAPI(Protocol):
    """The scheduler's calls: submitting and changing work, and reading it."""

    async def ping(self) -> dict[str, Any]:
        """Its config, whether it has recovered its state, its instance and counters."""
        ...

    # Submitting -------------------------------------------------------------------------
    async def submit(self, spec: GangSpec, programs: dict[str, RoleProgram],
                     idempotency_key: str | None = None, parent: str | None = None) -> str:
        """Queue a gang (inside job `parent`'s budget if given); its id."""
        ...

    async def deploy(self, deployment: DeploymentSpec, app: Any = None,
                     parent: str | None = None) -> str:
        """Queue a Serve application as a gang; its id."""
        ...

    async def submit_job(self, job: JobSpec, idempotency_key: str | None = None) -> str:
        """Queue a Ray Job; its id."""
        ...

    # Reading ----------------------------------------------------------------------------
    async def status(self, gang_id: str) -> GangStatus: ...

    async def list_gangs(self, state: GangState | None = None,
                         queues: Collection[str] | None = None) -> list[GangStatus]: ...

    async def gang_page(self, state: GangState | None, queues: Collection[str] | None,
                        offset: int, limit: int, newest_first: bool = False,
                        ) -> tuple[list[GangStatus], int]: ...

    async def list_deployments(self) -> list[GangStatus]: ...

    async def list_jobs(self, state: GangState | None = None) -> list[GangStatus]: ...

    async def job_logs(self, gang_id: str) -> str:
        """The output of a job's Ray job (its last attempt's); empty before it started."""
        ...

    async def queues(self) -> list[QueueStatus]: ...

    async def history(self, queues: Collection[str] | None = None) -> QueueHistory:
        """Pending, running and GPUs against guarantee per queue, over the last hours
        (only `queues` if given)."""
        ...

    async def cluster(self) -> ClusterStatus: ...

    async def dry_run(self, spec: GangSpec) -> DryRunResult: ...

    async def debug_cycle(self) -> dict[str, Any]:
        """The next cycle's inputs and plan (`core.cycle_dump`), to replay it offline."""
        ...

    async def wait(self, gang_id: str, timeout: float | None = None,
                   until_running: bool = False) -> GangStatus: ...

    async def results(self, gang_id: str) -> list[Any]:
        """The members' results in rank order, as its run returned them (on Ray: refs)."""
        ...

    # Changing ---------------------------------------------------------------------------
    async def cancel(self, gang_id: str, reason: str = "cancelled by user") -> GangStatus: ...

    async def undeploy(self, name: str) -> GangStatus: ...

    async def set_queue(self, queue: QueueSpec) -> list[QueueStatus]: ...

    async def shutdown(self) -> int:
        """Cancel every unfinished gang; how many there were."""
        ...


class TrainAPI(Protocol):
    """What a Ray Train controller's callback asks of the scheduler (a session per run)."""

    async def train_open(self, spec: GangSpec, parent: str | None, controller: str | None,
                         key: str, kind: str = "train") -> str: ...

    async def train_claim(self, session: str, timeout: float) -> list[str] | None: ...

    async def train_adopt(self, session: str, pg_id: str) -> list[str]: ...

    async def train_released(self, session: str, final: bool) -> None: ...

    async def train_finished(self, session: str, error: str | None) -> None: ...

    async def train_wait_preempt(self, session: str, timeout: float) -> dict[str, Any] | None: ...


def calls(protocol: type) -> list[str]:
    """The names of a protocol's calls, in the order it declares them."""
    return [name for name, value in vars(protocol).items()
            if callable(value) and not name.startswith("_")]
