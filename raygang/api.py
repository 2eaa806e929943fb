"""The Python surface: `@gang_task`, `raygang.gang(...)` and `GangRef`.

Like `@ray.remote`, decorating only declares: options are validated when the decorator is
applied (a bad spec raises `SpecError` naming the field), `.options()` and `.bind()`
return copies, and nothing touches the cluster until `.remote()`.

    @raygang.gang_task(replicas=4, num_gpus=1, strategy="SPREAD")
    def train(config):
        ctx = raygang.get_context()          # rank, world size, peers...
        ...
    ref = train.remote(config)               # a GangRef
    losses = ref.result()                    # one result per member, in rank order
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping
from typing import Any

import ray

from raygang.control.api import SchedulerAPI
from raygang.control.errors import GangCancelledError, GangFailedError
from raygang.control.program import RoleProgram
from raygang.control.status import ClusterStatus, DryRunResult, GangStatus, QueueStatus
from raygang.core.gang import GangState
from raygang.core.spec import GangSpec, RoleSpec, SpecError, gang_spec, role_spec
from raygang.core.workload_specs import DeploymentSpec, deployment_spec, job_spec
from raygang.runtime.client import connection
from raygang.runtime.names import NAMESPACE

# Options of a whole gang (its spec's fields but the roles; a topology given to the
# decorator is its role's), and options of one role (the rest of its keywords).
_GANG_OPTIONS = set(GangSpec.model_fields) - {"roles", "topology"}
_ROLE_OPTIONS = {
    "role", "replicas", "min_replicas", "resources", "num_cpus", "num_gpus", "memory", "after",
    "max_concurrency", "runtime_env", "topology",
}

start = connection.start


def shutdown() -> None:
    """Cancel every unfinished gang and stop the scheduler actor."""
    _client.forget()
    connection.shutdown()


def gang_task(_target: Any = None, /, **options: Any):
    """Declare a gang whose members run a function or a class.

    Works bare (`@gang_task`) and with options (`@gang_task(replicas=4, num_gpus=1)`).
    Role options: `replicas` (a count, or `(min, max)`: an elastic role), `min_replicas`,
    `resources` (or `num_cpus`/`num_gpus`/`memory`), `after`, `role` (name),
    `max_concurrency`, `runtime_env`, `topology` (a `raygang.Topology` or a dict such as
    `{"required": "rack"}`: where its members sit, by node label). Gang options: `name`,
    `queue`, `priority`, `strategy`, `reservation_timeout_s`, `startup_timeout_s`,
    `max_restarts`, `preemption_grace_s`, `resize`, `checkpoint_interval_s`, `fence_s`, `ratio`,
    `max_runtime_s` (the longest a run may last; a short one may pass a blocked gang).
    """
    if _target is not None:
        return GangTask(_target, options)
    return lambda target: GangTask(target, options)


class GangTask:
    """One role's program and options; also a one-role gang you can `.remote()`."""

    def __init__(self, target: Any, options: Mapping[str, Any], args: tuple = (),
                 kwargs: Mapping[str, Any] | None = None):
        if not callable(target):
            raise TypeError(f"@gang_task decorates a function or a class, got {target!r}")
        unknown = set(options) - _GANG_OPTIONS - _ROLE_OPTIONS
        if unknown:
            known = ", ".join(sorted(_GANG_OPTIONS | _ROLE_OPTIONS))
            raise TypeError(f"unknown @gang_task option(s) {sorted(unknown)}; known: {known}")
        self._target = target
        self._options = dict(options)
        self._args = tuple(args)
        self._kwargs = dict(kwargs or {})
        what = f"@gang_task {_display(target)}"
        self.role_spec = _role_spec(self.role_name, self._options, what)
        # Validate the gang-level options now, on a copy of this role without `after`
        # (the roles it names exist only once composed with `raygang.gang`).
        gang_spec(what, **self._gang_fields(), roles=(self.role_spec.model_copy(update={"after": ()}),))

    @property
    def role_name(self) -> str:
        return self._options.get("role") or _default_name(self._target)

    def options(self, **options: Any) -> GangTask:
        """A copy with some options replaced (validated the same way)."""
        return GangTask(self._target, {**self._options, **options}, self._args, self._kwargs)

    def bind(self, *args: Any, **kwargs: Any) -> GangTask:
        """A copy that will be started with these arguments (for `raygang.gang`)."""
        return GangTask(self._target, self._options, args, kwargs)

    def remote(self, *args: Any, **kwargs: Any) -> GangRef:
        """Submit a one-role gang; returns at once with a `GangRef`."""
        task = self.bind(*args, **kwargs) if (args or kwargs) else self
        return task.as_gang().remote()

    def as_gang(self) -> Gang:
        """This role alone as a gang, with the gang options given to the decorator."""
        fields = self._gang_fields()
        return Gang(fields.pop("name"), {self.role_name: self}, **fields)

    def program(self) -> RoleProgram:
        return RoleProgram(
            target=self._target, args=self._args, kwargs=self._kwargs,
            max_concurrency=self._options.get("max_concurrency"),
            runtime_env=self._options.get("runtime_env") or _driver_runtime_env(),
        )

    def _gang_fields(self) -> dict[str, Any]:
        fields = {k: v for k, v in self._options.items() if k in _GANG_OPTIONS}
        fields.setdefault("name", _default_name(self._target))
        return fields

    def __call__(self, *args: Any, **kwargs: Any):
        raise TypeError(
            f"{_display(self._target)} is a gang task: call "
            f"{_display(self._target)}.remote(...) to run it as a gang"
        )

    def __repr__(self) -> str:
        return f"GangTask({_display(self._target)}, role={self.role_name!r}, {self.role_spec!r})"


class Gang:
    """Several roles that start together: `raygang.gang("llm", roles={...}, strategy=...)`
    (`topology=`: the whole gang by node labels; `ratio=`: elastic roles move in steps)."""

    def __init__(self, name: str, roles: Mapping[str, GangTask], **options: Any):
        unknown = set(options) - (_GANG_OPTIONS - {"name"}) - {"topology"}
        if unknown:
            raise TypeError(f"unknown gang option(s) {sorted(unknown)}")
        for role_name, task in roles.items():
            if not isinstance(task, GangTask):
                raise TypeError(f"role {role_name!r} must be a @gang_task, got {task!r}")
        self._roles = dict(roles)
        self._options = dict(options)
        specs = tuple(t.role_spec.model_copy(update={"name": n}) for n, t in self._roles.items())
        self.spec: GangSpec = gang_spec(f"gang {name!r}", name=name, roles=specs, **options)

    def options(self, **options: Any) -> Gang:
        return Gang(self.spec.name, self._roles, **{**self._options, **options})

    def remote(self) -> GangRef:
        programs = {name: task.program() for name, task in self._roles.items()}
        # A key of its own: if the scheduler restarts mid-call, the retry gets this gang.
        gang_id = _call(SchedulerAPI.submit, self.spec, programs, f"python:{uuid.uuid4().hex}",
                        _inside_job())
        return GangRef(gang_id)


def gang(name: str, roles: Mapping[str, GangTask], **options: Any) -> Gang:
    """Compose a gang of several roles; validated here (unknown roles in `after`, cycles)."""
    return Gang(name, roles, **options)


class GangRef:
    """A handle to a submitted gang. Picklable: pass it to tasks and other drivers."""

    def __init__(self, gang_id: str):
        self.gang_id = gang_id

    def status(self) -> GangStatus:
        """State, pending reason, members and their nodes, restarts, error, history."""
        return _call(SchedulerAPI.status, self.gang_id)

    def wait(self, timeout: float | None = None) -> GangStatus:
        """Block until the gang has finished; raises TimeoutError after `timeout` seconds."""
        status = _call(SchedulerAPI.wait, self.gang_id, timeout)
        if not status.finished:
            raise _still(status, timeout)
        return status

    def ready(self, timeout: float | None = None) -> GangStatus:
        """Block until every member is ready and released (RUNNING): for service gangs.

        Raises GangFailedError / GangCancelledError if the gang ended first, and
        TimeoutError after `timeout` seconds.
        """
        status = _call(SchedulerAPI.wait, self.gang_id, timeout, True)
        _raise_if_ended_badly(status)
        if status.state not in (GangState.RUNNING, GangState.SUCCEEDED):
            raise _still(status, timeout)
        return status

    def result(self, timeout: float | None = None) -> list[Any]:
        """Every member's result in rank order; raises if the gang failed or was cancelled."""
        _raise_if_ended_badly(self.wait(timeout))
        return ray.get(_call(SchedulerAPI.results, self.gang_id))

    def cancel(self) -> GangStatus:
        """Cancel; returns once members are stopped and resources released."""
        return _call(SchedulerAPI.cancel, self.gang_id)

    def handles(self) -> dict[str, list[Any]]:
        """Actor handles of a running gang's members by role, to call their methods."""
        status = self.status()
        if status.state is not GangState.RUNNING:
            raise RuntimeError(f"gang {self.gang_id} is {status.state.value}, not RUNNING")
        out: dict[str, list[Any]] = {}
        for member in status.members:
            out.setdefault(member.role, []).append(
                ray.get_actor(member.actor_name, namespace=NAMESPACE)
            )
        return out

    def __reduce__(self):
        return (GangRef, (self.gang_id,))

    def __repr__(self) -> str:
        return f"GangRef({self.gang_id!r})"


def list_gangs(state: GangState | str | None = None) -> list[GangStatus]:
    return _call(SchedulerAPI.list_gangs, GangState(state) if state else None)


def dry_run(what: GangTask | Gang | GangSpec | DeploymentSpec) -> DryRunResult:
    """What submitting `what` (a gang, or a deployment's spec) now would do — be admitted
    on which nodes, preempt which gangs, or wait and why — without doing any of it."""
    if isinstance(what, DeploymentSpec):
        what = what.gang_spec()
    if isinstance(what, GangTask):
        what = what.as_gang()
    spec = what.spec if isinstance(what, Gang) else what
    if not isinstance(spec, GangSpec):
        raise TypeError(f"dry_run() takes a @gang_task, a gang or a GangSpec, got {what!r}")
    return _call(SchedulerAPI.dry_run, spec)


class DeploymentRef(GangRef):
    """A handle to a Serve application run as a gang; `undeploy()` frees its capacity."""

    def __init__(self, gang_id: str, name: str):
        super().__init__(gang_id)
        self.name = name

    def undeploy(self) -> GangStatus:
        return undeploy(self.name)

    def __reduce__(self):
        return (DeploymentRef, (self.gang_id, self.name))

    def __repr__(self) -> str:
        return f"DeploymentRef({self.gang_id!r}, name={self.name!r})"


def deploy(
    name: str,
    app: Any,
    *,
    replicas: int | tuple[int, int] = 1,
    resources: Mapping[str, float] | None = None,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    **options: Any,
) -> DeploymentRef:
    """Run a Ray Serve application as a gang: `replicas` replicas of its ingress deployment,
    each reserving `resources`, admitted whole — preempting lower-priority training if it
    must — then deployed with Serve on exactly the reserved nodes.

    `replicas=(min, max)` (or `min_replicas=`): elastic, admitted at `min`, grown toward
    `max` on its minimum's nodes as they free, shrunk toward `min` before anyone is preempted.

    An application of several deployments is one gang: a role per deployment that asks for
    resources (its replicas the members, each reserving its `placement_group_bundles` on one
    node), all reserved first. `deployments={"Decode": {"replicas": (1, 2)}}` sets `replicas`
    (elastic; `ratio={"Prefill": 2, "Decode": 1}`: whole steps), `bundles`, ... (else its own).

    `app` is a bound Serve application (`MyDeployment.bind(...)`) or an import path
    (`"pkg.module:app"`). Options: `queue`, `priority` (default `inference`), `strategy`,
    `route_prefix` (default `/<name>`), `reservation_timeout_s`, `startup_timeout_s`.
    """
    given = {"resources": resources, "num_cpus": num_cpus, "num_gpus": num_gpus}
    role = _role_spec("replica", {k: v for k, v in given.items() if v is not None},
                      f"deployment {name!r}")
    fields: dict[str, Any] = {"name": name, "replicas": replicas, "resources": role.resources,
                              **options}
    if isinstance(app, str):
        fields["import_path"], app = app, None
    spec = deployment_spec(f"deployment {name!r}", **fields)
    return DeploymentRef(_call(SchedulerAPI.deploy, spec, app, _inside_job()), spec.name)


def queues() -> list[QueueStatus]:
    """Every queue with its quota, limit, usage, fair share and pending count."""
    return _call(SchedulerAPI.queues)


def cluster() -> ClusterStatus:
    """Nodes with their free and used resources, which gang holds what, and (when the
    scheduler scales the cluster) its node groups with their current and desired size."""
    return _call(SchedulerAPI.cluster)


def debug_cycle() -> dict:
    """The next scheduling cycle's inputs and plan: `raygang sim --replay-cycle` reruns it."""
    return _call(SchedulerAPI.debug_cycle)


def list_deployments() -> list[GangStatus]:
    return _call(SchedulerAPI.list_deployments)


def undeploy(name: str) -> GangStatus:
    """Delete a deployment; returns once its Serve application is gone and its capacity
    is free (requeued training can then resume)."""
    return _call(SchedulerAPI.undeploy, name)


# Ray Jobs and Ray Train ------------------------------------------------------------------
class JobRef(GangRef):
    """A handle to a Ray Job queued by raygang (`submit_job`)."""

    def logs(self) -> str:
        """The output of its Ray job so far (its last attempt's)."""
        return _call(SchedulerAPI.job_logs, self.gang_id)

    def stop(self) -> GangStatus:
        """Stop it: a queued job never starts; a running one gets SIGTERM (its Train runs
        Train's preemption signal first), the grace period, then a hard stop."""
        return self.cancel()

    def __reduce__(self):
        return (JobRef, (self.gang_id,))

    def __repr__(self) -> str:
        return f"JobRef({self.gang_id!r})"


def submit_job(entrypoint: str, *, gpus: int | None = None,
               resources: Mapping[str, float] | None = None,
               bundle: Mapping[str, float] | None = None,
               idempotency_key: str | None = None, **options: Any) -> JobRef:
    """Queue a Ray Job: `entrypoint` (a shell command) is started through Ray's Job
    Submission API once its capacity is admitted and reserved. Capacity: `gpus` bundles
    of `bundle` (default one GPU and one CPU each), or `resources` in all (cut into
    bundles of `bundle`). Ray Train runs the job starts are placed inside that capacity.
    Options: `name`, `queue`, `priority` (default `training`), `strategy`, `working_dir`,
    `runtime_env`, `env_vars`, `metadata`, `preemption_grace_s`, `max_restarts`,
    `reservation_timeout_s`, `startup_timeout_s`."""
    given = {"gpus": gpus, "resources": resources, "bundle": bundle}
    spec = job_spec("job", entrypoint=entrypoint,
                    **{k: v for k, v in given.items() if v is not None}, **options)
    key = idempotency_key or uuid.uuid4().hex  # a retried call queues the job once
    return JobRef(_call(SchedulerAPI.submit_job, spec, key))


def list_jobs(state: GangState | str | None = None) -> list[GangStatus]:
    return _call(SchedulerAPI.list_jobs, GangState(state) if state else None)


def train(trainer: Any, *, queue: str | None = None, priority: int | str | None = None,
          preemption_grace_s: float | None = None) -> Any:
    """Run a Ray Train V2 trainer (`DataParallelTrainer`, `TorchTrainer`...) as a raygang
    gang: `trainer.fit()` with `RaygangTrain` added to its run config's callbacks. Its
    worker group waits in `queue` at `priority`, runs on the nodes raygang reserves, and
    is preempted through Train's own path (it resumes from its last checkpoint)."""
    from raygang.runtime.client.train_callback import RaygangTrain

    callbacks = list(trainer.run_config.callbacks or [])
    if not any(isinstance(c, RaygangTrain) for c in callbacks):
        callbacks.append(RaygangTrain(queue=queue, priority=priority,
                                      preemption_grace_s=preemption_grace_s))
    trainer.run_config.callbacks = callbacks
    return trainer.fit()


# Helpers --------------------------------------------------------------------------------
def _still(status: GangStatus, timeout: float | None) -> TimeoutError:
    reason = f": {status.reason}" if status.reason else ""
    return TimeoutError(f"gang {status.gang_id} still {status.state.value} after {timeout}s{reason}")


def _raise_if_ended_badly(status: GangStatus) -> None:
    if status.state is GangState.FAILED:
        raise GangFailedError(status)
    if status.state is GangState.CANCELLED:
        raise GangCancelledError(status)


RESTART_WAIT_S = 60.0  # how long a call waits for a restarting scheduler actor
# Started on first use; a call made while the actor restarts is made again on the
# restarted one (which first recovers its state: see control/recovery.py).
_client = connection.SchedulerClient(start_if_missing=True, restart_wait_s=RESTART_WAIT_S)


# Call the scheduler (starting it if needed), naming the call by `SchedulerAPI`'s method:
# its errors come out as themselves.
_call = _client.call


def _inside_job() -> str | None:
    """The raygang job this process works for (its driver, or a task or actor it started,
    which inherit its environment): gangs and deployments submitted here are placed inside
    that job's budget (control/inside.py). Unset (or empty) RAYGANG_JOB_ID to queue them on
    their own."""
    return os.environ.get("RAYGANG_JOB_ID") or None


def _driver_runtime_env() -> dict[str, Any] | None:
    # Members are created by the scheduler, whose job may be another driver's; give them
    # this driver's environment (working_dir, pip...) so its code imports there.
    env = dict(ray.get_runtime_context().runtime_env or {}) if ray.is_initialized() else {}
    return env or None


def _role_spec(name: str, options: Mapping[str, Any], what: str) -> RoleSpec:
    resources = dict(options.get("resources") or {})
    problems = []
    for option, key in (("num_cpus", "CPU"), ("num_gpus", "GPU"), ("memory", "memory")):
        if options.get(option) is not None:
            if key in resources:
                problems.append((option, f"given twice, also as resources[{key!r}]"))
            resources[key] = options[option]
    if problems:
        raise SpecError(what, problems)
    fields: dict[str, Any] = {"name": name, "replicas": options.get("replicas", 1),
                              "after": tuple(options.get("after") or ())}
    for optional in ("min_replicas", "topology"):  # given only when set (their defaults)
        if options.get(optional) is not None:
            fields[optional] = options[optional]
    if resources or "resources" in options:
        fields["resources"] = resources
    return role_spec(what, **fields)


def _default_name(target: Any) -> str:
    name = getattr(target, "__name__", "gang")
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name).strip("-_.").lower() or "gang"


def _display(target: Any) -> str:
    return getattr(target, "__qualname__", None) or repr(target)


__all__ = [
    "DeploymentRef", "Gang", "GangRef", "GangTask", "deploy", "dry_run", "gang", "gang_task",
    "list_deployments", "list_gangs", "queues", "shutdown", "start", "undeploy",
]
