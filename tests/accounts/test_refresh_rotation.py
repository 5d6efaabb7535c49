"""Issue 9 item 4: refresh tokens are single use (rotation), a reused one revokes its family
(RFC 9700 §4.14), only hashes are stored, logout and RFC 7009 revocation end a login, and the
admin's action ends them all."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils.http import urlencode

from apps.accounts.models import RefreshTokenRecord, TokenFamily
from apps.accounts.tokens import decode_access_token, issue_access_token, jti_hash
from tests.accounts.forge import claims, sign_with_ring

pytestmark = pytest.mark.django_db

LOGIN_URL = "/api/auth/token/"
REFRESH_URL = "/api/auth/token/refresh/"
LOGOUT_URL = "/api/auth/logout/"
REVOKE_URL = "/oauth2/revoke"
ME_URL = "/api/auth/me/"
FORM = "application/x-www-form-urlencoded"


def _login(client: Client, user: Any, device_id: str = "") -> dict[str, str]:
    body = {"email": user.email, "password": f"pw-{user.email}"}
    if device_id:
        body["device_id"] = device_id
    response = client.post(LOGIN_URL, body, content_type="application/json")
    assert response.status_code == 200
    return response.json()


def _refresh(client: Client, refresh: str) -> Any:
    return client.post(REFRESH_URL, {"refresh": refresh}, content_type="application/json")


def _me(client: Client, access: str) -> int:
    return client.get(ME_URL, HTTP_AUTHORIZATION=f"Bearer {access}").status_code


def _revoke(client: Client, **form: str) -> Any:
    return client.post(REVOKE_URL, urlencode(form), content_type=FORM)


def _families(user: Any) -> list[tuple[Any, str]]:
    return list(
        TokenFamily.objects.filter(user=user).order_by("created_at").values_list(
            "revoked_at", "revoked_reason"
        )
    )


def test_refresh_rotates_the_pair_within_the_family(client: Client, make_user: Any) -> None:
    user = make_user()
    first = _login(client, user, device_id="dev-1")
    response = _refresh(client, first["refresh"])
    assert response.status_code == 200
    second = response.json()
    assert set(second) == {"access", "refresh"}
    assert second["refresh"] != first["refresh"]
    old, new = decode_access_token(first["access"]), decode_access_token(second["access"])
    assert new["fid"] == old["fid"] and new["device_id"] == "dev-1"
    assert _me(client, second["access"]) == 200
    family = TokenFamily.objects.get(user=user)
    assert str(family.pk) == new["fid"]
    assert family.refresh_tokens.count() == 2
    assert family.refresh_tokens.filter(used_at__isnull=True).count() == 1
    third = _refresh(client, second["refresh"])  # the rotated one works in its turn
    assert third.status_code == 200
    assert _me(client, third.json()["access"]) == 200


def test_reusing_a_refresh_token_revokes_its_family_only(client: Client, make_user: Any) -> None:
    user = make_user()
    mine = _login(client, user)
    other = _login(client, user)  # another browser: another family
    rotated = _refresh(client, mine["refresh"]).json()

    replay = _refresh(client, mine["refresh"])
    assert replay.status_code == 401
    assert replay.json()["code"] == "token_reused"
    assert "access" not in replay.json()
    # the whole family is gone: the newest refresh token and every access token of it
    newest = _refresh(client, rotated["refresh"])
    assert newest.status_code == 401 and newest.json()["code"] == "token_revoked"
    assert _me(client, rotated["access"]) == 401
    assert _me(client, mine["access"]) == 401
    assert [reason for _, reason in _families(user)] == ["reuse", ""]
    # the other family is untouched
    assert _me(client, other["access"]) == 200
    assert _refresh(client, other["refresh"]).status_code == 200


def test_a_refused_refresh_changes_nothing(client: Client, make_user: Any) -> None:
    user = make_user()
    pair = _login(client, user)
    before = list(RefreshTokenRecord.objects.values_list("jti_hash", "used_at"))
    familyless = sign_with_ring(claims(str(user.pk), token_type="refresh"))
    for token in (pair["access"], "x.y.z", familyless):
        response = _refresh(client, token)
        assert response.status_code == 401 and response.json()["code"] == "token_not_valid"
    assert list(RefreshTokenRecord.objects.values_list("jti_hash", "used_at")) == before
    assert _families(user) == [(None, "")]
    assert _refresh(client, pair["refresh"]).status_code == 200


def test_only_hashes_of_refresh_tokens_are_stored(client: Client, make_user: Any) -> None:
    user = make_user()
    pair = _login(client, user)
    rotated = _refresh(client, pair["refresh"]).json()
    jtis = [_refresh_jti(t) for t in (pair["refresh"], rotated["refresh"])]
    rows = []
    with connection.cursor() as cursor:
        for model in (RefreshTokenRecord, TokenFamily):
            table = connection.ops.quote_name(model._meta.db_table)
            cursor.execute(f"SELECT * FROM {table}")  # noqa: S608 - a model's own table
            rows += cursor.fetchall()
    dump = repr(rows)
    for token, jti in zip((pair["refresh"], rotated["refresh"]), jtis, strict=True):
        assert jti not in dump
        for part in token.split("."):
            assert part not in dump
        assert jti_hash(jti) in dump
    assert sorted(RefreshTokenRecord.objects.values_list("jti_hash", flat=True)) == sorted(
        jti_hash(j) for j in jtis
    )


def _refresh_jti(token: str) -> str:
    from apps.accounts.tokens import decode_refresh_token

    return decode_refresh_token(token, check_exp=False)["jti"]


def test_logout_revokes_the_family_and_its_access_tokens(client: Client, make_user: Any) -> None:
    user = make_user()
    pair = _login(client, user)
    other = _login(client, user)
    response = client.post(LOGOUT_URL, {"refresh": pair["refresh"]},
                           content_type="application/json")
    assert response.status_code == 204
    assert _me(client, pair["access"]) == 401
    assert _refresh(client, pair["refresh"]).json()["code"] == "token_revoked"
    assert [reason for _, reason in _families(user)] == ["logout", ""]
    assert _me(client, other["access"]) == 200
    again = client.post(LOGOUT_URL, {"refresh": pair["refresh"]}, content_type="application/json")
    assert again.status_code == 204  # idempotent


def test_logout_refuses_what_is_not_a_refresh_token(client: Client, make_user: Any) -> None:
    user = make_user()
    pair = _login(client, user)
    for token in (pair["access"], "x.y.z"):
        response = client.post(LOGOUT_URL, {"refresh": token}, content_type="application/json")
        assert response.status_code == 401 and response.json()["code"] == "token_not_valid"
    assert client.post(LOGOUT_URL, {}, content_type="application/json").status_code == 400
    assert _families(user) == [(None, "")]
    assert _me(client, pair["access"]) == 200


@pytest.mark.parametrize("kind", ["refresh", "access"])
@pytest.mark.parametrize("hint", ["", "refresh_token", "access_token", "bogus"])
def test_rfc7009_revocation_of_either_token_ends_the_login(
    client: Client, make_user: Any, kind: str, hint: str
) -> None:
    user = make_user()
    pair = _login(client, user)
    other = _login(client, user)
    form = {"token": pair[kind]}
    if hint:
        form["token_type_hint"] = hint  # a wrong hint must not stop the search (§2.1)
    response = _revoke(client, **form)
    assert response.status_code == 200
    assert response.content == b""
    assert _me(client, pair["access"]) == 401
    assert _refresh(client, pair["refresh"]).status_code == 401
    assert [reason for _, reason in _families(user)] == ["revoked", ""]
    assert _me(client, other["access"]) == 200


def test_rfc7009_is_form_encoded_and_answers_200_for_unknown_tokens(
    client: Client, make_user: Any
) -> None:
    user = make_user()
    pair = _login(client, user)
    familyless = issue_access_token(user)
    for token in ("x.y.z", "not-a-jwt", familyless, pair["refresh"] + "x"):
        response = _revoke(client, token=token, token_type_hint="refresh_token")
        assert response.status_code == 200, token
    assert _families(user) == [(None, "")]
    missing = _revoke(client, token_type_hint="access_token")
    assert missing.status_code == 400 and missing.json()["error"] == "invalid_request"
    assert _revoke(client, token=pair["refresh"]).status_code == 200
    assert _revoke(client, token=pair["refresh"]).status_code == 200  # already revoked
    json_body = client.post(REVOKE_URL, {"token": "x"}, content_type="application/json")
    assert json_body.status_code == 415  # RFC 7009 §2.1: application/x-www-form-urlencoded
    assert [reason for _, reason in _families(user)] == ["revoked"]


def test_another_users_family_cannot_be_named(client: Client, make_user: Any) -> None:
    alice, bob = make_user(), make_user()
    pair = _login(client, alice)
    fid = decode_access_token(pair["access"])["fid"]
    forged_by_claims = sign_with_ring(claims(str(bob.pk), token_type="access", fid=fid))
    assert _me(client, forged_by_claims) == 401  # a fid of another user's family is refused
    assert _families(alice) == [(None, "")]


def test_the_admin_action_revokes_every_family(client: Client, make_user: Any) -> None:
    user = make_user()
    first, second = _login(client, user), _login(client, user)
    admin = Client()
    admin.force_login(make_user(is_staff=True, is_superuser=True))
    response = admin.post(
        "/admin/accounts/user/",
        {"action": "revoke_tokens", "_selected_action": [user.pk]},
    )
    assert response.status_code == 302
    assert [reason for _, reason in _families(user)] == ["all revoked", "all revoked"]
    for pair in (first, second):
        assert _me(client, pair["access"]) == 401
        assert _refresh(client, pair["refresh"]).status_code == 401


def test_a_client_that_names_itself_on_revoke_must_authenticate(client: Client,
                                                                make_user: Any) -> None:
    """RFC 7009 §2.1: a confidential client authenticates as at the token endpoint; a wrong
    secret or an unknown client is 401 invalid_client and revokes nothing."""
    import base64

    from apps.accounts.clients import oauth_client_create

    site, secret = oauth_client_create(name="site")
    user = make_user()
    pair = _login(client, user)
    wrong = _revoke(client, token=pair["refresh"], client_id=site.client_id,
                    client_secret="not-the-secret")
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
    unknown = _revoke(client, token=pair["refresh"], client_id="nobody")
    assert unknown.status_code == 401
    assert _me(client, pair["access"]) == 200  # nothing revoked
    basic = base64.b64encode(f"{site.client_id}:{secret}".encode()).decode()
    ok = client.post(REVOKE_URL, urlencode({"token": pair["refresh"]}), content_type=FORM,
                     HTTP_AUTHORIZATION=f"Basic {basic}")
    assert ok.status_code == 200
    assert _me(client, pair["access"]) == 401
