"""The CLI's client of the REST API: a request gives the decoded JSON answer, or raises a
`CliError` carrying the API's one-line `detail` and the exit code that says whose problem
it is (1: the API said no; 3: no API answered).

Only httpx and click here: `raygang list` must not pay for importing Ray or FastAPI.
"""

from __future__ import annotations

import time
from typing import Any

import click
import httpx

DEFAULT_ADDRESS = "http://127.0.0.1:8000"
EXIT_API = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 0.5
# Failures after which the request surely (connect) or harmlessly (same Idempotency-Key)
# can be sent again.
_RETRYABLE = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError)
_UNAVAILABLE = 503


def one_line(text: object) -> str:
    return " ".join(str(text).split())


class CliError(click.ClickException):
    """An error the user caused or must fix: one line on stderr, then `exit_code`.
    `fields`: the API's (field, message) pairs when it refused invalid fields."""

    def __init__(self, message: object, exit_code: int = EXIT_API,
                 fields: tuple[tuple[str, str], ...] = ()):
        super().__init__(one_line(message))
        self.exit_code = exit_code
        self.fields = fields

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.message}", err=True)


def normalize_address(address: str) -> str:
    address = address.strip().rstrip("/")
    if "://" not in address:
        address = f"http://{address}"  # `raygang --address host:8000 list` is what people type
    if not address.startswith(("http://", "https://")):
        raise CliError(f"--address must be an http(s):// URL, got {address!r}", EXIT_USAGE)
    return address


class ApiClient:
    """Requests to one raygang API with one bearer token."""

    def __init__(self, address: str, token: str | None, timeout: float = TIMEOUT_S,
                 transport: httpx.BaseTransport | None = None,
                 backoff_s: float = RETRY_BACKOFF_S):
        self.address = normalize_address(address)
        self._backoff_s = backoff_s
        self._token_given = bool(token)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            self._http = httpx.Client(base_url=self.address, headers=headers,
                                      timeout=timeout, transport=transport)
        except httpx.InvalidURL as error:
            raise CliError(f"--address {address!r} is not a valid URL: {error}",
                           EXIT_USAGE) from None

    def get(self, path: str, **params: Any) -> Any:
        query = {k: v for k, v in params.items() if v is not None}
        return self.request("GET", path, params=query)

    def post(self, path: str, body: Any, idempotency_key: str | None = None,
             attempts: int = 1) -> Any:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self.request("POST", path, json=body, headers=headers, attempts=attempts)

    def delete(self, path: str, timeout: float | None = None) -> Any:
        kwargs: dict[str, Any] = {"timeout": timeout} if timeout else {}
        return self.request("DELETE", path, **kwargs)

    def request(self, method: str, path: str, attempts: int = 1, **kwargs: Any) -> Any:
        """Send; retry up to `attempts` times on connect errors and 503s (only safe for
        reads and for POSTs that carry an Idempotency-Key)."""
        for attempt in range(1, attempts + 1):
            last = attempt == attempts
            try:
                response = self._http.request(method, path, **kwargs)
            except _RETRYABLE as error:
                if last:
                    raise self.unreachable(error) from None
            except httpx.TransportError as error:
                raise self.unreachable(error) from None
            except httpx.InvalidURL as error:
                raise CliError(f"invalid request URL: {error}", EXIT_USAGE) from None
            else:
                if response.status_code != _UNAVAILABLE or last:
                    return self._answer(response)
            time.sleep(self._backoff_s * attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def unreachable(self, error: Exception) -> CliError:
        return CliError(f"cannot reach the raygang API at {self.address}: {_why(error)}",
                        EXIT_UNREACHABLE)

    def _answer(self, response: httpx.Response) -> Any:
        if response.is_success:
            if not response.content:
                return None
            try:
                return response.json()
            except ValueError:
                raise CliError(f"{self.address} answered {response.request.url.path} with "
                               "something other than JSON: is it a raygang API?") from None
        detail, fields = _problem(response)
        if response.status_code == 401 and not self._token_given:
            detail += " (no token given: set RAYGANG_TOKEN or pass --token)"
        raise CliError(detail, EXIT_API, fields)


def _problem(response: httpx.Response) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The error body's `detail`, and its `errors` as (field, message) pairs."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        errors = body["errors"] if isinstance(body.get("errors"), list) else []
        fields = tuple((str(e.get("field", "")), str(e.get("message", "")))
                       for e in errors if isinstance(e, dict))
        return body["detail"], fields
    text = one_line(response.text)[:200]
    status = f"HTTP {response.status_code} {response.reason_phrase}"
    return status + (f": {text}" if text else ""), ()


def _why(error: Exception) -> str:
    """`connection refused`, not `[Errno 111] Connection refused`."""
    if isinstance(error, httpx.TimeoutException):
        return "no answer in time (timed out)"
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror[0].lower() + cause.strerror[1:]
        cause = cause.__cause__ or cause.__context__
    text = str(error) or type(error).__name__
    if text.startswith("[Errno") and "]" in text:
        text = text.split("]", 1)[1].strip()
    return text[0].lower() + text[1:] if text else type(error).__name__
