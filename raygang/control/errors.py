"""Errors raised to users of the Python API (and, later, mapped to HTTP statuses)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raygang.control.status import GangStatus


class UnschedulableError(ValueError):
    """The gang can never fit on this cluster as it is (even empty); it was not queued."""


class GangNotFoundError(KeyError):
    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else "gang not found"


class SchedulerNotRunningError(RuntimeError):
    """No raygang scheduler actor answers in this Ray cluster."""


class GangFailedError(RuntimeError):
    """The gang ended FAILED; `.status` holds the member's error and the gang's history."""

    def __init__(self, status: GangStatus):
        self.status = status
        error = status.error
        detail = f": {error.summary}" if error else ""
        super().__init__(f"gang {status.gang_id} failed{detail}")


class GangCancelledError(RuntimeError):
    def __init__(self, status: GangStatus):
        self.status = status
        super().__init__(f"gang {status.gang_id} was cancelled")


class DeploymentExistsError(ValueError):
    """A deployment with this name is queued or running; undeploy it first."""


class IdempotencyConflictError(ValueError):
    """An idempotency key was reused for a different submission."""


class SchedulerRecoveringError(RuntimeError):
    """The scheduler restarted and is still reading back its state; try again shortly."""


class ResultsLostError(RuntimeError):
    """The gang succeeded, but its results were not kept across a scheduler restart."""


class ClusterUnreachable(RuntimeError):
    """The cluster's control service (Ray's GCS) did not answer a read: no view of the
    cluster, so no decision (never an empty cluster, never a gang taken for dead)."""


class StoreError(RuntimeError):
    """The durable store did not take a write: the request was not accepted."""
