"""`raygang start` and `raygang api`: the commands that join a Ray cluster. Ray, Serve
and FastAPI are imported here, inside the functions, never by the HTTP commands.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from raygang.cli.http import EXIT_API, EXIT_UNREACHABLE, EXIT_USAGE, CliError

if TYPE_CHECKING:  # imported when used: the HTTP commands never load the server
    from raygang.server.auth import AuthConfig

START_RAY = "start one with `ray start --head --num-gpus 4`"
PROBE_TIMEOUT_S = 3.0


def resolve_ray_address(address: str) -> str:
    """`auto` (RAY_ADDRESS, then the cluster this machine started last) or host:port, as
    host:port; a CliError when no cluster answers there.

    ray.init() retries an unreachable GCS for minutes, so a TCP probe says it first.
    """
    if address.startswith("ray://"):
        return address  # Ray Client: ray.init reports its own errors quickly
    from raygang.runtime.ray_private import canonicalize_bootstrap_address

    try:
        resolved = canonicalize_bootstrap_address(address)
    except ValueError as error:
        raise CliError(f"--address {address!r}: {error}", EXIT_USAGE) from None
    except Exception as error:  # e.g. a host name that does not resolve
        raise CliError(f"cannot reach the Ray cluster at {address}: {error}; {START_RAY}",
                       EXIT_UNREACHABLE) from None
    if resolved is None:
        raise CliError(f"no running Ray cluster found (--address {address}); {START_RAY}",
                       EXIT_UNREACHABLE)
    host, _, port = resolved.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), PROBE_TIMEOUT_S):
            pass
    except (OSError, ValueError) as error:
        why = getattr(error, "strerror", None) or str(error) or type(error).__name__
        raise CliError(f"cannot reach the Ray cluster at {resolved}: {why.lower()}; "
                       f"{START_RAY}", EXIT_UNREACHABLE) from None
    return resolved


def connect_ray(address: str) -> None:
    import ray

    resolved = resolve_ray_address(address)
    try:
        # The address as given: with "auto", Ray also finds the local cluster's auth token
        # (token auth is on by default in Ray 2.60); the resolved host:port does not.
        ray.init(address=address, namespace="raygang", logging_level=logging.ERROR,
                 log_to_driver=False)
    except ConnectionError as error:
        raise CliError(f"cannot connect to the Ray cluster at {resolved}: {error}; "
                       f"{START_RAY}", EXIT_UNREACHABLE) from None


def load_auth(no_auth: bool, tokens_file: Path | None) -> AuthConfig:
    from raygang.server.auth import AuthConfig, AuthConfigError

    try:
        if no_auth:
            return AuthConfig.disabled()
        if tokens_file is not None:
            return AuthConfig.from_file(tokens_file)
        return AuthConfig.from_env()
    except AuthConfigError as error:
        raise CliError(str(error), EXIT_USAGE) from None


def load_config(paths: Sequence[Path]) -> Any:
    """The scheduler config from one or more files (later top-level keys win); None for
    none."""
    if not paths:
        return None
    import yaml
    from pydantic import ValidationError

    from raygang.control.config import SchedulerConfig
    from raygang.core.spec import describe_errors

    where = ", ".join(str(p) for p in paths)
    try:
        return SchedulerConfig.from_files(paths)
    except OSError as error:
        raise CliError(f"cannot read {error.filename}: {error.strerror}", EXIT_USAGE) from None
    except yaml.YAMLError as error:
        raise CliError(f"{where}: not valid YAML: {error}", EXIT_USAGE) from None
    except ValidationError as error:
        problems = "; ".join(f"{f}: {m}" for f, m in describe_errors(error))
        raise CliError(f"{where}: {problems}", EXIT_USAGE) from None
    except ValueError as error:
        raise CliError(str(error), EXIT_USAGE) from None


def start(ray_address: str, config_paths: Sequence[Path], api: bool, host: str, port: int,
          no_auth: bool, tokens_file: Path | None) -> None:
    """Start (or find) the detached scheduler and, with `api`, the API on Serve."""
    config = load_config(config_paths)
    auth = load_auth(no_auth, tokens_file) if api else None  # before touching the cluster
    connect_ray(ray_address)
    import ray

    import raygang
    from raygang.runtime.names import SCHEDULER_NAME

    # It warns of another config in a log line; we say so in ours (only if one was asked).
    logging.getLogger("raygang.runtime.client.connection").setLevel(logging.ERROR)
    try:
        handle = raygang.start(config)
        ping = ray.get(handle.ping.remote())
    except Exception as error:  # an actor that cannot start (resources, runtime_env)
        raise CliError(f"the scheduler did not start: {error}", EXIT_API) from None
    gcs = ray.get_runtime_context().gcs_address
    click.echo(f"scheduler {SCHEDULER_NAME} running in the Ray cluster at {gcs} "
               f"(namespace raygang, {ping.get('gangs', 0)} gangs known)")
    if config is not None and ping.get("config") != config.model_dump(mode="json"):
        click.echo("note: it was already running with another config, which it keeps "
                   "(raygang.shutdown() first to change it)")
    if auth is not None:  # with `api`
        from raygang.server.ingress import start_api

        try:
            url = start_api(auth, port, host)
        except Exception as error:
            raise CliError(f"the API did not start: {error}", EXIT_API) from None
        state = "on" if auth.enabled else "OFF (--no-auth)"
        click.echo(f"API (Ray Serve app raygang-api) at {url}, auth {state}")
        click.echo(f"  export RAYGANG_ADDRESS={url}")


def api(host: str, port: int, ray_address: str, no_auth: bool,
        tokens_file: Path | None) -> None:
    """Serve the API in this process until interrupted."""
    auth = load_auth(no_auth, tokens_file)
    connect_ray(ray_address)
    from raygang.server.standalone import serve_forever

    click.echo(f"raygang API on http://{host}:{port} "
               f"(auth {'on' if auth.enabled else 'OFF'}); Ctrl-C stops it", err=True)
    serve_forever(auth, host, port, ray_address)
