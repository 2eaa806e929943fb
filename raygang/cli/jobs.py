"""`raygang job ...`: Ray Jobs queued by raygang, through the REST API (`/v1/jobs`), like
every other HTTP command.

    raygang job submit --queue team-a --gpus 2 -- python train.py --epochs 3

Everything after `--` (or after the first word that is not an option) is the job's shell
command. Options are checked here as far as that needs no pydantic (JSON, KEY=VALUE,
ranges: usage errors, exit 2); the API checks the rest, and its complaint about a field
is reported under the option that set it (exit 1, as for `raygang submit`).
"""

from __future__ import annotations

import json
import re
import shlex
import uuid
from typing import Any

import click

from raygang.cli import render, watch
from raygang.cli.http import EXIT_USAGE, ApiClient, CliError
from raygang.cli.options import (
    STATES,
    STOP_TIMEOUT_S,
    SUBMIT_ATTEMPTS,
    api_options,
    emit,
    output_option,
)

# Strategy's values (raygang.core.spec), spelled out for the same reason as STATES.
STRATEGIES = ("STRICT_PACK", "PACK", "SPREAD", "STRICT_SPREAD")
# JobSpec's fields, by the option that sets each (the API's errors name fields).
OPTION_OF = {
    "entrypoint": "COMMAND", "name": "--name", "queue": "--queue", "priority": "--priority",
    "gpus": "--gpus", "resources": "--resources", "bundle": "--bundle",
    "strategy": "--strategy", "working_dir": "--working-dir", "runtime_env": "--runtime-env",
    "env_vars": "--env", "preemption_grace_s": "--grace", "max_restarts": "--max-restarts",
}
_FIELD = re.compile(r"([A-Za-z_]\w*)(?:\.(\S+))?")  # env_vars.KEY: env_vars, KEY


@click.group()
def job() -> None:
    """Ray Jobs queued by raygang: a shell command started through Ray's Job Submission
    API once the capacity it asks for is admitted in its queue."""


# Submit -------------------------------------------------------------------------------
@job.command("submit", context_settings={"allow_interspersed_args": False})
@click.argument("entrypoint", nargs=-1, required=True, type=click.UNPROCESSED,
                metavar="-- COMMAND...")
@click.option("--queue", help="Queue to wait in [default: default].")
@click.option("--priority", help="Priority class name or integer [default: training].")
@click.option("--gpus", type=click.IntRange(min=1),
              help="GPUs: N bundles of --bundle (default 1 GPU + 1 CPU each).")
@click.option("--resources", "resources_json", metavar="JSON",
              help='The job\'s total, e.g. \'{"GPU": 4, "CPU": 8}\' (cut into --bundle).')
@click.option("--bundle", "bundle_json", metavar="JSON",
              help='One bundle of the job\'s capacity, e.g. \'{"GPU": 1, "CPU": 4}\'.')
@click.option("--strategy", type=click.Choice(STRATEGIES, case_sensitive=False),
              help="Placement of the bundles [default: PACK].")
@click.option("--working-dir", metavar="DIR",
              help="A path on the cluster or a URI (s3://, https://...zip); local folders "
                   "are not uploaded.")
@click.option("--runtime-env", "runtime_env_json", metavar="JSON",
              help="Ray runtime_env of the job's driver (pip, env_vars...).")
@click.option("--env", "env", metavar="KEY=VALUE", multiple=True,
              help="An environment variable of the driver (repeatable).")
@click.option("--name", help="Job name, the prefix of its id [default: job].")
@click.option("--grace", type=click.FloatRange(min=0), metavar="SECONDS",
              help="When stopped or preempted: SIGTERM, then this long before a hard stop "
                   "[default: 30].")
@click.option("--max-restarts", type=click.IntRange(min=0),
              help="New attempts after the command fails [default: 0].")
@click.option("--idempotency-key", help="Retries with the same key never queue a second "
              "job (default: a new key per invocation).")
@click.option("--wait", is_flag=True, help="Follow the job; exit 0 only if it succeeds.")
@api_options
def submit(client: ApiClient, entrypoint: tuple[str, ...], idempotency_key: str | None,
           wait: bool, **options: Any) -> None:
    """Queue COMMAND as a Ray Job; prints its id, then its state (or, with --wait, each
    state change until it ends)."""
    body = job_body(entrypoint, **options)
    key = idempotency_key or f"cli-{uuid.uuid4().hex}"
    try:
        created = client.post("/v1/jobs", body, idempotency_key=key, attempts=SUBMIT_ATTEMPTS)
    except CliError as error:
        raise under_option(error) from None
    job_id = created["gang_id"]
    click.echo(job_id)
    if wait:
        final = watch.wait(client, job_id, render.console(), kind="job")
        failed = watch.outcome(final, kind="job")
        if failed is not None:
            raise failed
        return
    status = client.get(f"/v1/jobs/{job_id}")
    click.echo(f"{status['state']} {watch.describe(status)}".rstrip())


def job_body(entrypoint: tuple[str, ...], queue: str | None, priority: str | None,
             gpus: int | None, resources_json: str | None, bundle_json: str | None,
             strategy: str | None, working_dir: str | None, runtime_env_json: str | None,
             env: tuple[str, ...], name: str | None, grace: float | None,
             max_restarts: int | None) -> dict[str, Any]:
    """The `POST /v1/jobs` body: only what was given (the API has the defaults)."""
    if gpus is not None and resources_json is not None:
        raise click.UsageError("--gpus and --resources exclude each other (--gpus N is N "
                               "bundles of --bundle)")
    if gpus is None and resources_json is None and bundle_json is None:
        raise click.UsageError("say what the job needs: --gpus N, --resources JSON or "
                               "--bundle JSON")
    body: dict[str, Any] = {
        "entrypoint": shlex.join(entrypoint), "queue": queue, "name": name,
        "priority": _priority(priority), "gpus": gpus,
        "resources": json_object("--resources", resources_json),
        "bundle": json_object("--bundle", bundle_json),
        "strategy": strategy and strategy.upper(), "working_dir": working_dir,
        "runtime_env": json_object("--runtime-env", runtime_env_json),
        "env_vars": env_vars(env) or None, "preemption_grace_s": grace,
        "max_restarts": max_restarts,
    }
    return {k: v for k, v in body.items() if v is not None}


def _priority(text: str | None) -> int | str | None:
    """`--priority 500` is the integer 500; anything else a class name."""
    return int(text) if text is not None and re.fullmatch(r"-?\d+", text) else text


def json_object(option: str, text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise CliError(f"{option}: not valid JSON (column {error.colno}): {error.msg}",
                       EXIT_USAGE) from None
    if not isinstance(value, dict):
        kind = "null" if value is None else f"a {type(value).__name__}"
        raise CliError(f'{option}: expected a JSON object such as {{"GPU": 1}}, got {kind}',
                       EXIT_USAGE)
    return value


def env_vars(pairs: tuple[str, ...]) -> dict[str, str]:
    found: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise CliError(f"--env: expected KEY=VALUE, got {pair!r}", EXIT_USAGE)
        found[key.strip()] = value
    return found


def under_option(error: CliError) -> CliError:
    """The API's complaint about a field, said of the option that set it:
    `resources: ...` becomes `--resources: ...`, `env_vars.A: ...` `--env A: ...`. The
    scheduler's own refusals (`priority: unknown priority class ...`) carry no field
    list: then the field their detail starts with."""
    if error.fields:
        (field, message), count = error.fields[0], len(error.fields)
    else:
        (field, _, message), count = error.message.partition(": "), 1
    match = _FIELD.fullmatch(field)
    if match is None or match.group(1) not in OPTION_OF:
        return error
    root, rest = match.groups()
    where = f"{OPTION_OF[root]} {rest or ''}".rstrip()
    more = f" (and {count - 1} more)" if count > 1 else ""
    return CliError(f"{where}: {message}{more}", error.exit_code, error.fields)


# The others ---------------------------------------------------------------------------
@job.command("list")
@click.option("--queue", help="Only this queue.")
@click.option("--state", type=click.Choice(STATES, case_sensitive=False), help="Only this state.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="Show the most recent N jobs.")
@output_option
@api_options
def list_(client: ApiClient, queue: str | None, state: str | None, limit: int,
          output: str) -> None:
    """The most recent jobs, in submission order (oldest of them first, like `tail`)."""
    page = client.get("/v1/jobs", queue=queue, state=state and state.upper(), limit=limit,
                      order="newest")
    page["items"].reverse()
    emit(page, output, render.jobs_table)


@job.command()
@click.argument("job_id", metavar="ID")
@output_option
@api_options
def status(client: ApiClient, job_id: str, output: str) -> None:
    """A job's state, reason and queue position, Ray job id, command and events."""
    emit(client.get(f"/v1/jobs/{job_id}"), output, render.gang_details)


@job.command()
@click.argument("job_id", metavar="ID")
@api_options
def logs(client: ApiClient, job_id: str) -> None:
    """The output of the job's Ray job so far (its last attempt's)."""
    answer = client.get(f"/v1/jobs/{job_id}/logs")
    if answer["ray_job_id"] is None:
        click.echo(f"job {job_id} has not started ({answer['state']}): no output yet",
                   err=True)
        return
    click.echo(answer["logs"], nl=not answer["logs"].endswith("\n") and bool(answer["logs"]))


@job.command()
@click.argument("job_id", metavar="ID")
@api_options
def stop(client: ApiClient, job_id: str) -> None:
    """Stop a job: a queued one never starts; a running one gets SIGTERM, its grace
    period, then a hard stop. Returns once it is stopped."""
    stopped = client.delete(f"/v1/jobs/{job_id}", timeout=STOP_TIMEOUT_S)
    reason = f": {stopped['reason']}" if stopped.get("reason") else ""
    click.echo(f"{stopped['gang_id']} {stopped['state']}{reason}")

