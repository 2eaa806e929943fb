"""Bearer-token auth: who may submit to and see which queues, and who is an admin.

Tokens come from a YAML/JSON file named by `RAYGANG_AUTH_TOKENS_FILE` (or the same
document inline in `RAYGANG_AUTH_TOKENS`):

    tokens:
      - name: ci-team-a              # shown in logs and events, never the token
        sha256: 9f86d08...           # or `token: <plain text>`; a digest keeps it off disk
        queues: [team-a]             # queues it may submit to and view; omit for all
        priority_classes: [training, batch]   # omit for all
      - name: ops
        token: s3cret
        admin: true                  # every queue and gang, and queue configuration

Only SHA-256 digests are kept in memory and compared, with `hmac.compare_digest` against
every entry (no early exit), so neither the comparison's time nor a log line or a repr
reveals a token. Auth is off only when explicitly disabled (`AuthConfig.disabled()`,
`--no-auth`, or `RAYGANG_AUTH=disabled`) for local use.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from raygang.core.spec import NAME_PATTERN, describe_errors

TOKENS_FILE_ENV = "RAYGANG_AUTH_TOKENS_FILE"
TOKENS_ENV = "RAYGANG_AUTH_TOKENS"
AUTH_ENV = "RAYGANG_AUTH"


class AuthConfigError(ValueError):
    """The tokens file is missing or invalid; the API refuses to start."""


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Principal(BaseModel):
    """Who a request comes from, and what it may do."""

    model_config = ConfigDict(frozen=True)

    name: str
    queues: frozenset[str] | None = None  # None: every queue
    priority_classes: frozenset[str] | None = None  # None: every class
    admin: bool = False

    def may_use_queue(self, queue: str) -> bool:
        return self.admin or self.queues is None or queue in self.queues

    def may_use_priority(self, priority: int | str) -> bool:
        # An integer priority is a class of its own; only unrestricted tokens may use one.
        if self.admin or self.priority_classes is None:
            return True
        return isinstance(priority, str) and priority in self.priority_classes

    def visible_queues(self) -> frozenset[str] | None:
        return None if self.admin else self.queues


ANONYMOUS_ADMIN = Principal(name="local (auth disabled)", admin=True)


class TokenEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    token: str | None = Field(None, min_length=16, repr=False)
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", repr=False)
    queues: frozenset[str] | None = None
    priority_classes: frozenset[str] | None = None
    admin: bool = False

    @model_validator(mode="after")
    def _one_secret(self) -> TokenEntry:
        if (self.token is None) == (self.sha256 is None):
            raise ValueError("give exactly one of token (plain text) or sha256 (its digest)")
        return self

    @property
    def token_digest(self) -> str:
        return self.sha256 or digest(self.token or "")

    def principal(self) -> Principal:
        return Principal(name=self.name, queues=self.queues,
                         priority_classes=self.priority_classes, admin=self.admin)


class _TokensDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: list[TokenEntry] = Field(min_length=1)


class AuthConfig:
    """The token table (digests only) of an enabled auth, or a disabled one."""

    def __init__(self, entries: Collection[tuple[str, Principal]] = (), enabled: bool = True):
        self.enabled = enabled
        self._entries = tuple((d.encode(), p) for d, p in entries)
        if enabled and not self._entries:
            raise AuthConfigError("auth is enabled but no token is configured")

    @classmethod
    def disabled(cls) -> AuthConfig:
        return cls((), enabled=False)

    @classmethod
    def from_document(cls, data: Any, source: str) -> AuthConfig:
        try:
            document = _TokensDocument.model_validate(data)
        except ValidationError as error:
            # Without the input: a token must never appear in an error message.
            items = error.errors(include_input=False)
            problems = "; ".join(f"{f}: {m}" for f, m in describe_errors(items))
            raise AuthConfigError(f"{source}: {problems}") from None
        digests = [e.token_digest for e in document.tokens]
        if len(set(digests)) != len(digests):
            raise AuthConfigError(f"{source}: the same token is listed twice")
        return cls([(e.token_digest, e.principal()) for e in document.tokens])

    @classmethod
    def from_file(cls, path: str | Path) -> AuthConfig:
        import yaml  # a dependency of Ray

        try:
            text = Path(path).read_text()
        except OSError as error:
            raise AuthConfigError(f"cannot read tokens file {path}: {error.strerror}") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise AuthConfigError(f"{path}: not valid YAML/JSON: {error}") from None
        return cls.from_document(data, str(path))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AuthConfig:
        """From `RAYGANG_AUTH_TOKENS_FILE` or `RAYGANG_AUTH_TOKENS`; disabled only by
        `RAYGANG_AUTH=disabled`. Neither set is an error: auth is never off by accident."""
        import yaml

        env = os.environ if environ is None else environ
        if env.get(AUTH_ENV, "").lower() == "disabled":
            return cls.disabled()
        if env.get(TOKENS_FILE_ENV):
            return cls.from_file(env[TOKENS_FILE_ENV])
        if env.get(TOKENS_ENV):
            try:
                data = yaml.safe_load(env[TOKENS_ENV])
            except yaml.YAMLError:
                raise AuthConfigError(f"{TOKENS_ENV}: not valid YAML/JSON") from None
            return cls.from_document(data, TOKENS_ENV)
        raise AuthConfigError(
            f"no API tokens: set {TOKENS_FILE_ENV} to a tokens file, or disable auth for "
            f"local use ({AUTH_ENV}=disabled or --no-auth)"
        )

    def authenticate(self, authorization: str | None) -> Principal | None:
        """The principal of an `Authorization: Bearer <token>` header, or None."""
        if not self.enabled:
            return ANONYMOUS_ADMIN
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        presented = digest(token.strip()).encode()
        found = None
        for known, principal in self._entries:  # every entry, whatever matched
            if hmac.compare_digest(presented, known):
                found = principal
        return found

    def __repr__(self) -> str:  # never the digests
        return f"AuthConfig(enabled={self.enabled}, tokens={len(self._entries)})"

    def __reduce__(self):  # shipped to the Serve replica as digests, never tokens
        return (_rebuild, (self.enabled, [(d.decode(), p) for d, p in self._entries]))


def _rebuild(enabled: bool, entries: list[tuple[str, Principal]]) -> AuthConfig:
    return AuthConfig(entries, enabled=enabled)
