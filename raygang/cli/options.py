"""What the API commands share: `--address`/`--token` after the command, `-o/--output`,
printing an answer as a table or JSON, and the constants they agree on."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from raygang.cli import render

# GangState's values, spelled out: importing raygang.core would load pydantic
# (tests/unit/test_cli_offline.py checks that they agree).
STATES = ("PENDING", "ADMITTED", "RESERVED", "STARTING", "RUNNING", "SUCCEEDED", "FAILED",
          "CANCELLED", "PREEMPTED", "RESTARTING")
SUBMIT_ATTEMPTS = 3
STOP_TIMEOUT_S = 300.0  # DELETE answers once the members are stopped (grace periods)


def api_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--address`/`--token` after the command too (`raygang list --token T`); they
    override the ones given before it. Passes an `ApiClient` as `client`, made by the
    root command's `connect` (so tests can hand in a client on a mock transport)."""
    command = click.option("--token", "token_here", default=None,
                           help="Overrides `raygang --token`.")(command)
    command = click.option("--address", "address_here", default=None,
                           help="Overrides `raygang --address`.")(command)

    def wrapper(address_here: str | None, token_here: str | None, **kwargs: Any) -> Any:
        obj = click.get_current_context().find_root().obj
        client = obj["connect"](address_here or obj["address"], token_here or obj["token"])
        return command(client=client, **kwargs)

    wrapper.__name__, wrapper.__doc__ = command.__name__, command.__doc__
    return _copy_params(command, wrapper)


def _copy_params(source: Callable[..., Any], target: Callable[..., Any]) -> Callable[..., Any]:
    target.__click_params__ = getattr(source, "__click_params__", [])  # type: ignore[attr-defined]
    return target


def output_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table",
                        show_default=True, help="json: the API's answer, for scripts.")(command)


def emit(data: Any, output: str, table: Callable[[Any], Any]) -> None:
    if output == "json":
        click.echo(json.dumps(data, indent=2))
    else:
        render.console().print(table(data))
