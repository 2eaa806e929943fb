"""Bearer-token auth: loading tokens, who may do what, that they are compared in constant
time, and that tokens never leak (reprs, pickles, error messages, logs)."""

from __future__ import annotations

import hmac
import logging
import pickle

import pytest
from fastapi.testclient import TestClient

from raygang.control.status import GangStatus
from raygang.server.app import create_app
from raygang.server.auth import AuthConfig, AuthConfigError, Principal, digest

SECRET = "a-very-secret-token-42"
DOC = {"tokens": [
    {"name": "ci", "token": SECRET, "queues": ["team-a"], "priority_classes": ["batch"]},
    {"name": "ops", "sha256": digest("ops-token-0123456789"), "admin": True},
]}


def test_tokens_map_to_principals():
    auth = AuthConfig.from_document(DOC, "doc")
    ci = auth.authenticate(f"Bearer {SECRET}")
    assert ci == Principal(name="ci", queues=frozenset({"team-a"}),
                           priority_classes=frozenset({"batch"}))
    assert ci.may_use_queue("team-a") and not ci.may_use_queue("team-b")
    assert ci.may_use_priority("batch") and not ci.may_use_priority("inference")
    assert not ci.may_use_priority(10)  # an integer is a class of its own
    ops = auth.authenticate("bearer ops-token-0123456789")  # the scheme is case-insensitive
    assert ops.admin and ops.may_use_queue("anything") and ops.visible_queues() is None


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", "Basic abc",
                                    f"Token {SECRET}", "Bearer wrong-token-0123456789"])
def test_missing_or_wrong_tokens_are_nobody(header):
    assert AuthConfig.from_document(DOC, "doc").authenticate(header) is None


def test_disabled_auth_is_an_explicit_choice():
    assert AuthConfig.disabled().authenticate(None).admin
    with pytest.raises(AuthConfigError, match="no API tokens: set RAYGANG_AUTH_TOKENS_FILE"):
        AuthConfig.from_env({})
    assert not AuthConfig.from_env({"RAYGANG_AUTH": "disabled"}).enabled
    with pytest.raises(AuthConfigError, match="no token is configured"):
        AuthConfig([], enabled=True)


def test_from_env_reads_a_file_or_inline_yaml(tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text(f"tokens:\n  - name: ci\n    token: {SECRET}\n")
    assert AuthConfig.from_env({"RAYGANG_AUTH_TOKENS_FILE": str(path)}).authenticate(
        f"Bearer {SECRET}").name == "ci"
    inline = AuthConfig.from_env({"RAYGANG_AUTH_TOKENS": '{"tokens": [{"name": "x", '
                                                        f'"token": "{SECRET}"}}]}}'})
    assert inline.authenticate(f"Bearer {SECRET}").name == "x"
    with pytest.raises(AuthConfigError, match="cannot read tokens file"):
        AuthConfig.from_env({"RAYGANG_AUTH_TOKENS_FILE": str(tmp_path / "missing.yaml")})


@pytest.mark.parametrize("doc, says", [
    ({"tokens": []}, "tokens: List should have at least 1 item"),
    ({"tokens": [{"name": "x"}]}, "exactly one of token"),
    ({"tokens": [{"name": "x", "token": "short"}]}, "at least 16 characters"),
    ({"tokens": [{"name": "x", "token": SECRET, "sha256": digest(SECRET)}]}, "exactly one"),
    ({"tokens": [{"name": "x", "token": SECRET}, {"name": "y", "token": SECRET}]},
     "listed twice"),
    ({"tokens": [{"name": "x", "token": SECRET, "admn": True}]}, "admn"),
])
def test_bad_token_files_are_refused_without_showing_tokens(doc, says):
    with pytest.raises(AuthConfigError, match=says) as error:
        AuthConfig.from_document(doc, "tokens.yaml")
    assert SECRET not in str(error.value) and "short" not in str(error.value).split(":", 2)[-1]


def test_tokens_are_kept_and_shipped_as_digests_only():
    auth = AuthConfig.from_document(DOC, "doc")
    assert SECRET not in repr(auth) and digest(SECRET) not in repr(auth)
    shipped = pickle.dumps(auth)
    assert SECRET.encode() not in shipped
    assert pickle.loads(shipped).authenticate(f"Bearer {SECRET}").name == "ci"


# Constant-time comparison --------------------------------------------------------------
TABLE = {"tokens": [
    {"name": "first", "token": "first-token-0123456789"},
    {"name": "second", "token": "second-token-0123456789"},
    {"name": "third", "sha256": digest("third-token-0123456789")},
]}


@pytest.mark.parametrize("presented, expected", [
    ("first-token-0123456789", "first"),  # a match on the first entry does not stop the loop
    ("third-token-0123456789", "third"),
    ("nobody-token-0123456789", None),
])
def test_every_entry_is_compared_with_compare_digest(monkeypatch, presented, expected):
    auth = AuthConfig.from_document(TABLE, "doc")
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    who = auth.authenticate(f"Bearer {presented}")
    assert (who.name if who else None) == expected
    assert len(calls) == len(TABLE["tokens"])
    # digests of equal length, never the token itself: the time taken does not depend on
    # how much of a token matches, nor on which entry (if any) it matches
    assert {a for a, _ in calls} == {digest(presented).encode()}
    assert [b for _, b in calls] == [digest(e.get("token") or "").encode() if "token" in e
                                     else e["sha256"].encode() for e in TABLE["tokens"]]


def test_the_comparison_is_not_equality(monkeypatch):
    """With compare_digest answering "no" to everything, nothing authenticates: no `==`
    on the side decides it."""
    auth = AuthConfig.from_document(DOC, "doc")
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: False)
    assert auth.authenticate(f"Bearer {SECRET}") is None


# Tokens never logged -------------------------------------------------------------------
OPS = "ops-token-0123456789"


class Scheduler:
    """Just enough scheduler for submit, list and get (no Ray)."""

    def __init__(self):
        self.gangs: dict[str, GangStatus] = {}

    async def submit(self, spec, programs, key) -> str:
        gang_id = f"{spec.name}-{len(self.gangs) + 1}"
        self.gangs[gang_id] = GangStatus(gang_id=gang_id, name=spec.name, queue=spec.queue,
                                         priority=100, state="PENDING", world_size=1,
                                         submitted_at=1.0, queue_position=1)
        return gang_id

    async def gang_page(self, state, queues, offset, limit, newest):
        items = [g for g in self.gangs.values() if queues is None or g.queue in queues]
        return items[offset:offset + limit], len(items)

    async def status(self, gang_id: str) -> GangStatus:
        return self.gangs[gang_id]


@pytest.fixture
def all_logs(caplog):
    """caplog at DEBUG on the root and on every logger that exists, and its handler on
    those that do not pass their records up; all put back afterwards."""
    caplog.set_level(logging.DEBUG)
    detached = []
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            caplog.set_level(logging.DEBUG, logger=name)
            if not logger.propagate:
                logger.addHandler(caplog.handler)
                detached.append(logger)
    yield caplog
    for logger in detached:
        logger.removeHandler(caplog.handler)


def test_tokens_never_appear_in_logs(all_logs):
    auth = AuthConfig.from_document(DOC, "doc")
    client = TestClient(create_app(scheduler=Scheduler(), auth=auth))
    ci, ops = {"Authorization": f"Bearer {SECRET}"}, {"Authorization": f"Bearer {OPS}"}
    body = {"name": "job", "queue": "team-a", "priority": "batch",
            "roles": [{"name": "w", "entrypoint": "raygang.demo:sleep", "args": [1]}]}
    wrong = f"{SECRET}-but-wrong"

    assert client.get("/v1/gangs", headers={"Authorization": f"Bearer {wrong}"}
                      ).status_code == 401
    assert client.get("/v1/gangs").status_code == 401
    assert client.post("/v1/gangs", json={**body, "queue": "team-b"}, headers=ci
                       ).status_code == 403
    assert client.put("/v1/queues/team-a", json={"name": "team-a"}, headers=ci
                      ).status_code == 403
    created = client.post("/v1/gangs", json=body, headers={**ci, "Idempotency-Key": "k-1"})
    assert created.status_code == 201, created.text
    gang_id = created.json()["gang_id"]
    assert client.get(f"/v1/gangs/{gang_id}", headers=ci).status_code == 200
    assert client.get("/v1/gangs", headers=ops).json()["total"] == 1
    assert client.post("/v1/gangs", json={**body, "roles": []}, headers=ci).status_code == 422

    logged = "\n".join([all_logs.text] + [
        f"{r.getMessage()} {r.args!r} {r.__dict__!r}" for r in all_logs.records])
    assert "/v1/gangs" in logged  # the capture works: the client logs every request
    for secret in (SECRET, OPS, wrong):
        assert secret not in logged
        assert digest(secret) not in logged
