"""Bearer-token auth: loading tokens, who may do what, and that tokens never leak."""

from __future__ import annotations

import pickle

import pytest

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
