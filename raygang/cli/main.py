"""The `raygang` commands. The HTTP ones need only click, rich and httpx; `start` and
`api` import Ray when they run (see `raygang.cli.launch`)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from raygang.cli import render
from raygang.cli.http import (
    DEFAULT_ADDRESS,
    EXIT_API,
    EXIT_USAGE,
    ApiClient,
    CliError,
    one_line,
)
from raygang.cli.jobs import job
from raygang.cli.options import (
    STATES,
    STOP_TIMEOUT_S,
    SUBMIT_ATTEMPTS,
    api_options,
    emit,
    output_option,
)
from raygang.sim.cli import sim


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--address", envvar="RAYGANG_ADDRESS", default=DEFAULT_ADDRESS, show_default=True,
              help="URL of the raygang API [env RAYGANG_ADDRESS].")
@click.option("--token", envvar="RAYGANG_TOKEN", default=None,
              help="Bearer token for the API [env RAYGANG_TOKEN].")
@click.version_option(package_name="raygang")
@click.pass_context
def cli(ctx: click.Context, address: str, token: str | None) -> None:
    """Gang scheduling inside a Ray cluster: queues, priorities, preemption."""
    ctx.obj = {"address": address, "token": token, "connect": ApiClient}


cli.add_command(job)
cli.add_command(sim)


def read_yaml(path: str) -> dict[str, Any]:
    """A spec file as a dict; every problem a one-line usage error."""
    import yaml  # only the commands that read files pay for it

    try:
        text = click.get_text_stream("stdin").read() if path == "-" else Path(path).read_text()
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror or error}", EXIT_USAGE) from None
    except UnicodeDecodeError:
        raise CliError(f"{path}: not a text file", EXIT_USAGE) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise CliError(f"{path}: not valid YAML{where}: {problem}", EXIT_USAGE) from None
    if not isinstance(data, dict):
        kind = "nothing" if data is None else f"a {type(data).__name__}"
        raise CliError(f"{path}: expected a mapping (name, roles, ...), got {kind}", EXIT_USAGE)
    return data


# Cluster side -----------------------------------------------------------------------------
def auth_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option("--tokens-file", type=click.Path(dir_okay=False, path_type=Path),
                           help="API tokens (YAML); default: RAYGANG_AUTH_TOKENS_FILE.")(command)
    return click.option("--no-auth", is_flag=True,
                        help="No tokens: anyone who reaches the API is an admin.")(command)


def _auth_choice(no_auth: bool, tokens_file: Path | None) -> None:
    if no_auth and tokens_file is not None:
        raise click.UsageError("--no-auth and --tokens-file exclude each other")


@cli.command()
@click.option("--address", "ray_address", default="auto", show_default=True,
              help="Ray cluster (GCS host:port, or auto).")
@click.option("--config", "config_paths", type=click.Path(dir_okay=False, path_type=Path),
              multiple=True,
              help="Scheduler config (YAML); repeat to merge files (later top-level keys win).")
@click.option("--api", is_flag=True, help="Also deploy the REST API on Ray Serve.")
@click.option("--host", default="127.0.0.1", show_default=True, help="API host (with --api).")
@click.option("--port", default=8000, show_default=True, help="API port (with --api).")
@auth_options
def start(ray_address: str, config_paths: tuple[Path, ...], api: bool, host: str, port: int,
          no_auth: bool, tokens_file: Path | None) -> None:
    """Start the scheduler (and, with --api, the API) in a running Ray cluster."""
    _auth_choice(no_auth, tokens_file)
    from raygang.cli import launch

    launch.start(ray_address, config_paths, api, host, port, no_auth, tokens_file)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True)
@click.option("--ray-address", default="auto", show_default=True, help="Ray cluster to join.")
@auth_options
def api(host: str, port: int, ray_address: str, no_auth: bool, tokens_file: Path | None) -> None:
    """Run the REST API in this process (uvicorn) until interrupted."""
    _auth_choice(no_auth, tokens_file)
    from raygang.cli import launch

    launch.api(host, port, ray_address, no_auth, tokens_file)


# Gangs ------------------------------------------------------------------------------------
@cli.command()
@click.argument("spec", metavar="SPEC.yaml")
@click.option("--wait", is_flag=True, help="Follow the gang; exit 0 only if it succeeds.")
@click.option("--idempotency-key", help="Retries with the same key never create a second "
              "gang (default: a new key per invocation).")
@api_options
def submit(client: ApiClient, spec: str, wait: bool, idempotency_key: str | None) -> None:
    """Queue a gang described by SPEC.yaml ('-' for stdin); prints its id."""
    body = read_yaml(spec)
    key = idempotency_key or f"cli-{uuid.uuid4().hex}"
    created = client.post("/v1/gangs", body, idempotency_key=key, attempts=SUBMIT_ATTEMPTS)
    gang_id = created["gang_id"]
    click.echo(gang_id)
    if wait:
        from raygang.cli import watch

        final = watch.wait(client, gang_id, render.console())
        error = watch.outcome(final)
        if error is not None:
            raise error


@cli.command("list")
@click.option("--queue", help="Only this queue.")
@click.option("--state", type=click.Choice(STATES, case_sensitive=False), help="Only this state.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="Show the most recent N gangs.")
@output_option
@api_options
def list_(client: ApiClient, queue: str | None, state: str | None, limit: int,
          output: str) -> None:
    """The most recent gangs, in submission order (oldest of them first, like `tail`)."""
    page = client.get("/v1/gangs", queue=queue, state=state and state.upper(), limit=limit,
                      order="newest")
    page["items"].reverse()
    emit(page, output, render.gangs_table)


@cli.command()
@click.argument("gang_id", metavar="ID")
@output_option
@api_options
def status(client: ApiClient, gang_id: str, output: str) -> None:
    """A gang's fields, members and their nodes, and its events."""
    emit(client.get(f"/v1/gangs/{gang_id}"), output, render.gang_details)


@cli.command()
@click.argument("gang_id", metavar="ID")
@api_options
def explain(client: ApiClient, gang_id: str) -> None:
    """Why a gang is where it is: reason, queue position, preemptions, its queue's usage."""
    gang = client.get(f"/v1/gangs/{gang_id}")
    queues = client.get("/v1/queues") if gang["state"] == "PENDING" else None
    render.console().print(render.explain(gang, queues))


@cli.command()
@click.argument("gang_id", metavar="ID")
@api_options
def cancel(client: ApiClient, gang_id: str) -> None:
    """Cancel a gang; returns once its members are stopped."""
    gang = client.delete(f"/v1/gangs/{gang_id}", timeout=STOP_TIMEOUT_S)
    reason = f": {gang['reason']}" if gang.get("reason") else ""
    click.echo(f"{gang['gang_id']} {gang['state']}{reason}")


# Queues, cluster, deployments -------------------------------------------------------------
@cli.command()
@output_option
@api_options
def queues(client: ApiClient, output: str) -> None:
    """Queues: quota, limit, usage, fair share, pending and running gangs."""
    emit(client.get("/v1/queues"), output, render.queues_table)


@cli.command()
@output_option
@api_options
def cluster(client: ApiClient, output: str) -> None:
    """Nodes: resources used and total, and the gangs placed on each."""
    emit(client.get("/v1/cluster"), output, render.cluster_view)


@cli.command()
@click.argument("spec", metavar="SPEC.yaml")
@api_options
def deploy(client: ApiClient, spec: str) -> None:
    """Run a Ray Serve application (import_path) as a gang of replicas."""
    body = read_yaml(spec)
    created = client.post("/v1/deployments", body)
    click.echo(f"deployment {body.get('name')}: gang {created['gang_id']}")


@cli.command()
@click.argument("name")
@api_options
def undeploy(client: ApiClient, name: str) -> None:
    """Delete a deployment and free its capacity."""
    gang = client.delete(f"/v1/deployments/{name}", timeout=STOP_TIMEOUT_S)
    click.echo(f"deployment {name}: {gang['state']}")


def main(args: list[str] | None = None) -> None:
    """The `raygang` program: Click parses and runs the command, and every error, Click's
    usage errors included, ends as one `error: ...` line on stderr and a non-zero exit
    (Click's own report is four lines: usage, blank, hint, error)."""
    try:
        code = cli.main(args, prog_name="raygang", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as error:  # bare `raygang`
        click.echo(error.format_message())  # the help, as --help shows it, then the error
        where = error.ctx.command_path if error.ctx else "raygang"
        click.echo(f"error: missing command (see {where} --help)", err=True)
        code = error.exit_code
    except click.ClickException as error:
        click.echo(f"error: {error_line(error)}", err=True)
        code = error.exit_code
    except click.exceptions.Abort:  # Ctrl-C or EOF at a prompt
        click.echo("error: aborted", err=True)
        code = EXIT_API
    sys.exit(code if isinstance(code, int) else 0)  # --help and --version return 0


def error_line(error: click.ClickException) -> str:
    """`Missing argument 'SPEC.yaml'. (see raygang submit --help)`: Click's message and,
    for a usage error, where to look, on one line."""
    text = one_line(error.format_message())
    ctx = getattr(error, "ctx", None)
    if isinstance(error, click.UsageError) and ctx is not None and ctx.help_option_names:
        text += f" (see {ctx.command_path} {ctx.help_option_names[-1]})"
    return text


if __name__ == "__main__":
    main()
