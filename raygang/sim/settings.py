"""What a replay is run with, beyond the scheduler's own config."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SimSettings(BaseModel):
    """The simulated cluster and how its jobs behave."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: int = Field(80, ge=1, description="nodes in the cluster")
    gpus_per_node: int = Field(8, ge=1, description="GPUs of every node")
    checkpoint_s: float = Field(
        1800.0, ge=0, description="a job checkpoints after every this many seconds of "
        "running; preempted, it loses the work since (0: it never loses work)")
    preemption_grace_s: float = Field(
        30.0, ge=0, description="each gang's grace period (GangSpec.preemption_grace_s): a "
        "victim runs on this long before it is stopped")
    reservation_timeout_s: float = Field(60.0, gt=0, description="each gang's")
    resync_s: float = Field(
        60.0, gt=0, description="the loop's resync interval in simulated seconds. It is "
        "1 s on a live cluster, to notice what raygang did not cause; here every change "
        "wakes the loop itself, and a resync only bounds how late a time-based rule "
        "(a class's min_runtime_s) is noticed")
    product_loop: bool = Field(
        False, description="keep the control plane loop's re-checks after a release, "
        "made for Ray's lagging view (slower; the same decisions: sim.loop)")
