"""What a replay is run with, beyond the scheduler's own config."""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, ConfigDict, Field, model_validator

from raygang.core.spec import Resize
from raygang.core.topology import Topology

RACK = "rack"  # the label of the simulated racks (`rack_nodes`)
_TOPOLOGY = re.compile(r"^(required|preferred|segment:[1-9][0-9]*)$")


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
    start_s: float = Field(
        0.0, ge=0, description="how long an admitted gang takes to run (reserving and "
        "starting its members): on a real cluster, Ray's placement group and actor start "
        "(about 1 s for a small gang here); 0 for a trace in hours")
    end_s: float = Field(
        0.0, ge=0, description="how long a gang whose work is done still holds its "
        "capacity before it has ended (its members' end noticed, everything torn down): "
        "on a real cluster about a second here, more under load; 0 for a trace in hours")
    resync_s: float = Field(
        60.0, gt=0, description="the loop's resync interval in simulated seconds. It is "
        "1 s on a live cluster, to notice what raygang did not cause; here every change "
        "wakes the loop itself, and a resync only bounds how late a time-based rule "
        "(a class's min_runtime_s) is noticed")
    inference_gpus: int = Field(
        0, ge=0, description="peak GPUs of a diurnal stream of inference deployments run "
        "beside the trace (sim.inference; 0: none)")
    inference_gang_gpus: int = Field(8, ge=1, description="GPUs of one inference deployment")
    inference_low: float = Field(
        0.25, ge=0, le=1, description="the stream's nightly low, as a share of its peak")
    inference_step_s: float = Field(
        3600.0, gt=0, description="how often the stream follows demand (deploys, undeploys)")
    elastic_min: float | None = Field(
        None, gt=0, le=1, description="make every job of more than one member elastic: it "
        "runs between ceil(members x this) and all its members, growing as GPUs free and "
        "shrunk before any job is stopped whole; its work progresses in proportion to the "
        "members it runs (linear scaling). None: rigid")
    elastic_resize: Resize = Field(
        Resize.LIVE, description="how an elastic job lives through a resize: 'live' loses "
        "nothing; 'restart' (Ray Train V2's way) goes back to its last checkpoint and does "
        "no work for elastic_restart_s")
    elastic_restart_s: float = Field(
        120.0, ge=0, description="with elastic_resize 'restart': how long a resized job does "
        "no work (its group stops, starts again at the new size and loads its checkpoint); "
        "an assumption: a Train worker group of a few nodes restarts in minutes")
    rack_nodes: int | None = Field(
        None, ge=1, description="nodes per rack: node i of the cluster (or of a static "
        "partition) is labelled rack=r<i // rack_nodes>. None: no racks")
    topology: str | None = Field(
        None, description="what every job of more than one member asks of the racks: "
        "'required' (all in one rack), 'preferred' (as few racks as it can), 'segment:N' "
        "(members of consecutive ranks, N at a time, each N in one rack; a job whose "
        "members N does not divide asks for nothing). None: nothing")
    declared_runtime: float | None = Field(
        None, ge=1, description="every job declares a max_runtime_s of this many times "
        "its duration, rounded up to the next whole minute (Slurm takes time limits in "
        "minutes): what a line does with declared limits (PolicyConfig."
        "backfill_max_runtime_s); no trace here records them. None: no job declares one")
    product_loop: bool = Field(
        False, description="keep the control plane loop's re-checks after a release, "
        "made for Ray's lagging view (slower; the same decisions: sim.loop)")
    one_cycle_per_instant: bool = Field(
        False, description="run the scheduling cycle once everything of a simulated "
        "instant has happened (control.virtual.VirtualTimeLoop.settled), not once per step "
        "of it: an admission, its start and a job ending at the same second make one cycle "
        "instead of several. Fewer cycles (a busy week: a quarter fewer, and a quarter "
        "less CPU), but ties at an instant break otherwise, so decisions differ: run both "
        "to see how much a result hangs on them (docs/simulator.md, measured)")

    @model_validator(mode="after")
    def _racks(self) -> SimSettings:
        if self.topology is None:
            return self
        if not _TOPOLOGY.match(self.topology):
            raise ValueError(f"topology: 'required', 'preferred' or 'segment:N' (N members "
                             f"of consecutive ranks in one rack), got {self.topology!r}")
        if self.rack_nodes is None:
            raise ValueError("topology: needs racks (rack_nodes: nodes per rack)")
        if self.elastic_min is not None:
            raise ValueError("topology: not with elastic jobs (elastic_min): an elastic gang "
                             "cannot ask for a topology yet")
        return self

    def job_max_runtime(self, duration_s: float) -> float | None:
        """What a job that runs `duration_s` declares as its max_runtime_s."""
        if self.declared_runtime is None:
            return None
        return (math.floor(duration_s * self.declared_runtime / 60) + 1) * 60.0

    def job_topology(self, members: int) -> Topology | None:
        """What a job of `members` members asks of the racks."""
        if self.topology is None or members < 2:
            return None
        if self.topology == "required":
            return Topology(required=RACK)
        if self.topology == "preferred":
            return Topology(preferred=RACK)
        size = int(self.topology.split(":")[1])
        return Topology(segment=size, segment_level=RACK) if members % size == 0 else None

    @model_validator(mode="after")
    def _whole_gangs(self) -> SimSettings:
        gang, node = self.inference_gang_gpus, self.gpus_per_node
        if self.inference_gpus and gang > node and gang % node:
            raise ValueError(f"inference_gang_gpus: {gang} GPUs is not a whole number of "
                             f"{node}-GPU nodes")
        if self.inference_gpus and self.inference_gpus < gang:
            raise ValueError(f"inference_gpus: a peak of {self.inference_gpus} GPUs is less "
                             f"than one deployment ({gang} GPUs)")
        return self
