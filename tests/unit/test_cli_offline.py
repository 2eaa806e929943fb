"""The CLI's checks that need no API server: its copy of the gang states, its import
weight, its usage errors (one line on stderr), and its retry of a POST with the same
idempotency key (on httpx's mock transport, which stands in for a network that refuses
connections)."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from raygang.core.gang import GangState


def test_the_cli_knows_every_gang_state():
    from raygang.cli.main import STATES

    assert STATES == tuple(s.value for s in GangState)


def test_http_commands_do_not_import_ray():
    code = ("import sys, raygang.cli.main, raygang.cli.watch; "
            "print(sorted(m for m in ('ray', 'fastapi', 'pydantic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_connect_error_is_retried_with_the_same_idempotency_key():
    from raygang.cli.http import ApiClient

    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Idempotency-Key"))
        if len(seen) < 3:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(201, json={"gang_id": "g-1", "location": "/v1/gangs/g-1"})

    client = ApiClient("http://api.test", "t", transport=httpx.MockTransport(handler),
                       backoff_s=0)
    assert client.post("/v1/gangs", {}, idempotency_key="k1", attempts=3)["gang_id"] == "g-1"
    assert seen == ["k1", "k1", "k1"]


def test_cluster_shows_the_node_groups_when_raygang_scales():
    from rich.console import Console

    from raygang.cli import render

    cluster = {"nodes": [], "total": {}, "free": {}, "scaling": {
        "mode": "kuberay", "draining": ["n1"], "last_error": "KubeRayUnavailable: refused",
        "actions": ["2026-11-22T02:10:51Z gpu: replicas 0 -> 2"],
        "groups": [{"name": "gpu", "shape": {"CPU": 2.0, "GPU": 2.0}, "min_nodes": 0,
                    "max_nodes": 3, "nodes": 1, "desired": 2},
                   {"name": "cpu", "shape": {"CPU": 4.0}, "min_nodes": 1,
                    "max_nodes": 2**31 - 1, "nodes": 1, "desired": 1}]}}
    console = Console(width=200, record=True)
    console.print(render.cluster_view(cluster))
    text = console.export_text()
    assert "gpu     CPU 2, GPU 2   1       2         0-3" in text, text
    assert "cpu     CPU 4          1       1         1+ " in text, text
    assert "\nscaling: kuberay mode\nbeing released: 1 node(s)\nlast request failed: " \
           "KubeRayUnavailable: refused\nlast request: 2026-11-22T02:10:51Z gpu: replicas " \
           "0 -> 2\n" in text, text
    del cluster["scaling"]
    console.print(render.cluster_view(cluster))
    text = console.export_text()
    assert "GROUP" not in text and "GCS" not in text
    cluster.update(unreachable_since=0.0, unreachable_reason="a small read did not answer")
    console.print(render.cluster_view(cluster))
    assert "Ray's GCS does not answer since " in console.export_text()


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    """`raygang ARGS` in this process: exit code, stdout, stderr."""
    from raygang.cli.main import main

    with pytest.raises(SystemExit) as ended:
        main(list(args))
    out = capsys.readouterr()
    return ended.value.code, out.out, out.err


@pytest.mark.parametrize("args, says", [
    (["submit"], "error: Missing argument 'SPEC.yaml'. (see raygang submit --help)"),
    (["status"], "error: Missing argument 'ID'. (see raygang status --help)"),
    (["list", "--state", "sleeping"], "error: Invalid value for '--state': 'sleeping' is not "
                                      "one of 'pending', "),
    (["list", "--limit", "0"], "error: Invalid value for '--limit': 0 is not in the range "
                               "1<=x<=1000. (see raygang list --help)"),
    (["list", "--output", "xml"], "error: Invalid value for '-o' / '--output': 'xml' is not "),
    (["frobnicate"], "error: No such command 'frobnicate'. (see raygang --help)"),
    (["--frobnicate"], "error: No such option '--frobnicate'. (see raygang --help)"),
    (["api", "--no-auth", "--tokens-file", "tokens.yaml"],
     "error: --no-auth and --tokens-file exclude each other (see raygang api --help)"),
    (["start", "--no-auth", "--tokens-file", "tokens.yaml"],
     "error: --no-auth and --tokens-file exclude each other (see raygang start --help)"),
])
def test_usage_errors_are_one_line_on_stderr_and_exit_2(capsys, args, says):
    code, out, err = run_main(capsys, *args)
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith(says), err
    assert out == ""


def test_help_and_version_exit_0():
    for args in (["--help"], ["-h"], ["list", "--help"], ["submit", "-h"], ["--version"]):
        done = subprocess.run([sys.executable, "-m", "raygang.cli.main", *args],
                              capture_output=True, text=True)
        assert done.returncode == 0 and done.stderr == "", (args, done.stderr)
        assert done.stdout.startswith(("Usage: raygang", "raygang, version")), done.stdout


def test_bare_raygang_shows_the_help_and_fails(capsys):
    code, out, err = run_main(capsys)
    assert code == 2 and out.startswith("Usage: raygang [OPTIONS] COMMAND") and "submit" in out
    assert err == "error: missing command (see raygang --help)\n"


def test_the_installed_program_reports_usage_errors_in_one_line():
    done = subprocess.run([sys.executable, "-m", "raygang.cli.main", "list", "--limit", "x"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("error: Invalid value for '--limit': 'x' is not a valid integer "
                           "range. (see raygang list --help)\n")
