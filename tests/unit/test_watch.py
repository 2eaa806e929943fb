"""`raygang submit --wait` on a terminal: the live spinner (state, queue position, reason)
and a line per state change, driven by a fake API and a fake clock (no sleeping). The
non-terminal output is checked end to end in tests/e2e/test_cli.py."""

from __future__ import annotations

import io

import httpx
import pytest
from rich.console import Console

from raygang.cli import main as cli_main
from raygang.cli import render, watch
from raygang.cli.http import EXIT_API, ApiClient, CliError

WAITING = "needs {GPU: 4}, free {GPU: 2}"


def status(state: str, **fields) -> dict:
    return {"gang_id": "job-1", "state": state, **fields}


def journey(last: dict | None = None) -> list[dict]:
    """What successive polls answer: waiting (second, then first in line), running, done;
    repeated answers are what a real poll mostly sees."""
    pending = {"queue_position": 2, "reason": WAITING}
    return [status("PENDING", **pending), status("PENDING", **pending),
            status("PENDING", queue_position=1, reason=WAITING),
            status("RUNNING"), status("RUNNING"), last or status("SUCCEEDED")]


class Api:
    """Answers `GET /v1/gangs/{id}` from a script; the last answer repeats."""

    def __init__(self, answers: list[dict]):
        self.answers = list(answers)
        self.paths: list[str] = []

    def get(self, path: str, **params) -> dict:
        self.paths.append(path)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


class Clock:
    """`sleep` moves `now`: the stamps are exact and the test takes no time."""

    def __init__(self):
        self.now = 100.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def live_display_ended(raw: io.StringIO) -> bool:
    """The spinner ran (it hides the cursor) and stopped (the cursor is shown again)."""
    shown = raw.getvalue()
    return 0 <= shown.rfind("\x1b[?25l") < shown.rfind("\x1b[?25h")


# Rich reads TERM, NO_COLOR, TTY_INTERACTIVE...: the tests' own, not the environment's.
ENVIRON = {"TERM": "xterm-256color"}


def terminal() -> tuple[Console, io.StringIO]:
    raw = io.StringIO()
    return Console(file=raw, force_terminal=True, record=True, width=120,
                   color_system="standard", _environ=ENVIRON), raw


def test_the_spinner_follows_the_gang_until_it_succeeds():
    out, raw = terminal()
    api, clock = Api(journey()), Clock()
    final = watch.wait(api, "job-1", out, sleep=clock.sleep, clock=clock)

    assert final == status("SUCCEEDED")
    assert watch.outcome(final) is None  # exit 0
    assert api.paths == ["/v1/gangs/job-1"] * 6
    assert clock.slept == [watch.POLL_S] * 5  # no sleep after the last answer
    text = out.export_text()
    # one line per change of what is shown, stamped with the time since submission
    for line in ("   0.0s  PENDING    queue position 2: " + WAITING,
                 "   1.0s  PENDING    queue position 1: " + WAITING,
                 "   1.5s  RUNNING",
                 "   2.5s  SUCCEEDED"):
        assert line in text, text
    # the spinner: submitted, then the state, position and reason of the last answer
    assert "gang job-1: submitted" in text
    assert f"gang job-1: PENDING queue position 2: {WAITING}" in text
    assert f"gang job-1: PENDING queue position 1: {WAITING}" in text
    assert "gang job-1: RUNNING" in text
    assert live_display_ended(raw), repr(raw.getvalue()[-200:])
    assert "\x1b[33mPENDING" in raw.getvalue()  # states in colour


def test_a_failed_gang_ends_the_watch_with_exit_1_and_its_error():
    out, raw = terminal()
    failed = status("FAILED", reason="member worker-0 raised RuntimeError: boom",
                    error={"member": "worker-0", "rank": 0, "error_type": "RuntimeError",
                           "message": "boom"})
    clock = Clock()
    final = watch.wait(Api(journey(failed)), "job-1", out, sleep=clock.sleep, clock=clock)
    assert "   2.5s  FAILED     member worker-0 raised RuntimeError: boom" in out.export_text()
    assert live_display_ended(raw)
    error = watch.outcome(final)
    assert isinstance(error, CliError) and error.exit_code == EXIT_API
    assert error.message.startswith("gang job-1 FAILED: ") and "RuntimeError: boom" in \
        error.message


def test_interrupting_the_watch_stops_the_spinner_and_leaves_the_gang():
    class Interrupted(Api):
        def get(self, path: str, **params) -> dict:
            if len(self.paths) == 2:
                raise KeyboardInterrupt
            return super().get(path, **params)

    out, raw = terminal()
    clock = Clock()
    with pytest.raises(CliError) as stopped:
        watch.wait(Interrupted(journey()), "job-1", out, sleep=clock.sleep, clock=clock)
    assert stopped.value.exit_code == EXIT_API
    assert "gang job-1 goes on (raygang cancel job-1 to stop it)" in stopped.value.message
    assert live_display_ended(raw)  # the terminal is given back


def test_off_a_terminal_only_the_state_changes_are_printed():
    raw = io.StringIO()
    out = Console(file=raw, width=120, _environ=ENVIRON)
    assert not out.is_terminal
    clock = Clock()
    watch.wait(Api(journey()), "job-1", out, sleep=clock.sleep, clock=clock)
    lines = raw.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == ["PENDING", "PENDING", "RUNNING",
                                                   "SUCCEEDED"]
    assert "\x1b" not in raw.getvalue() and "gang job-1:" not in raw.getvalue()


# The whole command -------------------------------------------------------------------
def run_submit(monkeypatch, tmp_path, capsys, last: dict) -> tuple[int, Console, str]:
    """`raygang submit SPEC --wait` in this process, on a fake terminal, against a fake
    API (httpx's mock transport): its exit code, the terminal and stderr."""
    answers = journey(last)

    def api(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return httpx.Response(201, json={"gang_id": "job-1", "location": "/v1/gangs/job-1"})
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        return httpx.Response(200, json=answer)

    out, _ = terminal()
    monkeypatch.setattr(render, "console", lambda stderr=False: out)
    monkeypatch.setattr(cli_main, "ApiClient", lambda address, token: ApiClient(
        address, token, transport=httpx.MockTransport(api)))
    monkeypatch.setattr(watch, "POLL_S", 0.001)
    spec = tmp_path / "job.yaml"
    spec.write_text("name: job\nroles: [{name: w, entrypoint: 'raygang.demo:sleep'}]\n")
    with pytest.raises(SystemExit) as ended:
        cli_main.main(["--address", "http://api.test", "submit", str(spec), "--wait"])
    return ended.value.code, out, capsys.readouterr().err


def test_submit_wait_exits_0_when_the_gang_succeeds(monkeypatch, tmp_path, capsys):
    code, out, err = run_submit(monkeypatch, tmp_path, capsys, status("SUCCEEDED"))
    assert code == 0 and err == ""
    text = out.export_text()
    assert "gang job-1: PENDING queue position 1" in text
    assert text.index("PENDING") < text.index("RUNNING") < text.index("SUCCEEDED")


def test_submit_wait_exits_1_with_one_line_when_the_gang_is_cancelled(monkeypatch, tmp_path,
                                                                      capsys):
    last = status("CANCELLED", reason="cancelled by ops (REST)")
    code, out, err = run_submit(monkeypatch, tmp_path, capsys, last)
    assert code == EXIT_API
    assert err == "error: gang job-1 CANCELLED: cancelled by ops (REST)\n"
    assert "CANCELLED" in out.export_text()
