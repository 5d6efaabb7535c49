"""``POST /api/credentials/temporary`` and ``/api/credentials/revoke``, the admin's revoke
actions, and when a credential stops being honoured (checked through the same selectors the
``/s3/`` endpoint uses; the live refusals are in test_s3_tampering)."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from apps.accounts.services import user_revoke_tokens, user_set_active
from apps.accounts.tokens import issue_access_token, issue_token_pair
from apps.storage.credentials import (
    CredentialRefused,
    credential_check,
    credential_lookup,
    credential_secret,
    credentials_purge_expired,
)
from apps.storage.models import S3Credential

pytestmark = [pytest.mark.django_db]

FIELDS = {"access_key_id", "secret_access_key", "session_token", "expires_at", "bucket",
          "prefix", "endpoint_url", "region"}


def issue(token: str, **extra: Any) -> Any:
    return Client().post("/api/credentials/temporary",
                         headers={"Authorization": f"Bearer {token}"}, **extra)


def refusal(creds: dict[str, str], *, token: str | None = None) -> str | None:
    """The S3 error code /s3/ would answer for a request these credentials signed, or None."""
    record = credential_lookup(creds["access_key_id"])
    if record is None:
        return "InvalidAccessKeyId"
    try:
        credential_check(record, session_token=token or creds["session_token"],
                         now=timezone.now())
    except CredentialRefused as exc:
        return exc.code
    return None


def test_issue_answers_every_field_for_the_callers_prefix(make_user, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "S3_CREDENTIAL_TTL": 600}
    user = make_user()
    before = timezone.now().replace(microsecond=0)
    reply = issue(issue_token_pair(user)["access"])
    assert reply.status_code == 200
    body = reply.json()
    assert set(body) == FIELDS
    assert body["prefix"] == f"user-{user.pk}/"
    assert body["bucket"] == "rtc-agent"
    assert body["region"] == "us-east-1"
    assert body["endpoint_url"] == "http://testserver/s3"
    assert body["access_key_id"].startswith("RTCA") and len(body["access_key_id"]) == 20
    assert len(body["secret_access_key"]) == 40 and len(body["session_token"]) >= 64
    expires = timezone.datetime.fromisoformat(body["expires_at"].replace("Z", "+00:00"))
    assert before + timedelta(seconds=600) <= expires <= timezone.now() + timedelta(seconds=600)
    assert reply["Cache-Control"] == "no-store"
    assert refusal(body) is None


def test_endpoint_url_is_the_public_url_when_configured(make_user, settings) -> None:
    settings.RTC_PUBLIC_URL = "https://rtc.example.com"
    body = issue(issue_access_token(make_user())).json()
    assert body["endpoint_url"] == "https://rtc.example.com/s3"


def test_the_database_keeps_neither_secret_nor_token(make_user) -> None:
    body = issue(issue_access_token(make_user())).json()
    row = S3Credential.objects.values().get(access_key_id=body["access_key_id"])
    stored = " ".join(str(v) for v in row.values())
    assert body["secret_access_key"] not in stored
    assert body["session_token"] not in stored
    assert row["session_token_hash"] == hashlib.sha256(body["session_token"].encode()).hexdigest()
    assert credential_secret(body["access_key_id"]) == body["secret_access_key"]


def test_each_call_issues_a_new_credential(make_user) -> None:
    token = issue_access_token(make_user())
    first, second = issue(token).json(), issue(token).json()
    assert first["access_key_id"] != second["access_key_id"]
    assert first["secret_access_key"] != second["secret_access_key"]
    assert S3Credential.objects.count() == 2


@pytest.mark.parametrize("authorization", [None, "Bearer not-a-jwt"])
def test_issue_needs_a_valid_token(authorization) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    reply = Client().post("/api/credentials/temporary", headers=headers)
    assert reply.status_code == 401
    assert not S3Credential.objects.exists()


def test_issue_refuses_a_revoked_token(make_user) -> None:
    user = make_user()
    token = issue_access_token(user)
    user_revoke_tokens(user_id=user.pk)
    assert issue(token).status_code == 401
    assert not S3Credential.objects.exists()


def test_issue_is_throttled_per_user_as_the_login(make_user) -> None:
    token = issue_access_token(make_user())
    codes = [issue(token).status_code for _ in range(31)]
    assert codes[:30] == [200] * 30
    assert codes[30] == 429
    assert S3Credential.objects.count() == 30
    other = issue(issue_access_token(make_user()))  # another user's budget is untouched
    assert other.status_code == 200


# --- when a credential stops working ---------------------------------------------------------


def test_a_credential_expires(make_user, settings) -> None:
    body = issue(issue_access_token(make_user())).json()
    S3Credential.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert refusal(body) == "ExpiredToken"


def test_a_wrong_session_token_is_refused(make_user) -> None:
    body = issue(issue_access_token(make_user())).json()
    assert refusal(body, token="x" * 64) == "InvalidToken"


def test_revoking_the_users_tokens_ends_the_credential(make_user) -> None:
    user = make_user()
    body = issue(issue_access_token(user)).json()
    user_revoke_tokens(user_id=user.pk)
    assert refusal(body) == "ExpiredToken"
    # Credentials obtained after the revocation, with a new login, work. Tokens carry whole
    # seconds, so the revocation is moved a few seconds back (the old credential with it).
    S3Credential.objects.update(created_at=timezone.now() - timedelta(seconds=10))
    type(user).objects.filter(pk=user.pk).update(
        tokens_valid_after=timezone.now() - timedelta(seconds=5))
    assert refusal(body) == "ExpiredToken"
    fresh = issue(issue_token_pair(user)["access"]).json()
    assert refusal(fresh) is None


def test_logging_out_ends_the_credentials_of_that_login(make_user) -> None:
    user = make_user()
    pair, other_login = issue_token_pair(user), issue_token_pair(user)
    mine, kept = issue(pair["access"]).json(), issue(other_login["access"]).json()
    assert Client().post("/api/auth/logout/", {"refresh": pair["refresh"]},
                         content_type="application/json").status_code == 204
    assert refusal(mine) == "ExpiredToken"
    assert refusal(kept) is None


def test_an_inactive_or_deleted_user_ends_the_credential(make_user) -> None:
    user, other = make_user(), make_user()
    body, gone = issue(issue_access_token(user)).json(), issue(issue_access_token(other)).json()
    user_set_active(user_id=user.pk, active=False)
    assert refusal(body) == "InvalidAccessKeyId"
    other.delete()
    assert refusal(gone) == "InvalidAccessKeyId"


# --- revocation ------------------------------------------------------------------------------


def revoke(token: str, body: dict) -> Any:
    return Client().post("/api/credentials/revoke", body, content_type="application/json",
                         headers={"Authorization": f"Bearer {token}"})


def test_revoke_one_credential(make_user) -> None:
    token = issue_access_token(make_user())
    one, two = issue(token).json(), issue(token).json()
    reply = revoke(token, {"access_key_id": one["access_key_id"]})
    assert reply.status_code == 200 and reply.json() == {"revoked": 1}
    assert refusal(one) == "InvalidAccessKeyId"
    assert refusal(two) is None
    assert revoke(token, {"access_key_id": one["access_key_id"]}).status_code == 404


def test_revoke_all_of_the_callers_credentials_only(make_user) -> None:
    token, stranger = issue_access_token(make_user()), issue_access_token(make_user())
    mine = [issue(token).json() for _ in range(3)]
    theirs = issue(stranger).json()
    reply = revoke(token, {"all": True})
    assert reply.json() == {"revoked": 3}
    assert [refusal(c) for c in mine] == ["InvalidAccessKeyId"] * 3
    assert refusal(theirs) is None


def test_revoke_never_touches_another_users_credential(make_user) -> None:
    theirs = issue(issue_access_token(make_user())).json()
    reply = revoke(issue_access_token(make_user()), {"access_key_id": theirs["access_key_id"]})
    assert reply.status_code == 404
    assert reply.json()["code"] == "credential.not_found"
    assert refusal(theirs) is None


@pytest.mark.parametrize("body", [{}, {"all": False}, {"all": True, "access_key_id": "RTCAX"}])
def test_revoke_needs_exactly_one_target(make_user, body) -> None:
    token = issue_access_token(make_user())
    creds = issue(token).json()
    reply = revoke(token, body)
    assert reply.status_code == 400
    assert reply.json()["code"] == "invalid_request"
    assert refusal(creds) is None


def test_purge_deletes_expired_credentials_only(make_user) -> None:
    token = issue_access_token(make_user())
    old, live = issue(token).json(), issue(token).json()
    S3Credential.objects.filter(access_key_id=old["access_key_id"]).update(
        expires_at=timezone.now() - timedelta(minutes=1))
    assert credentials_purge_expired() == 1
    assert list(S3Credential.objects.values_list("access_key_id", flat=True)) == [
        live["access_key_id"]]


# --- the admin -------------------------------------------------------------------------------


@pytest.fixture
def staff(make_user) -> Client:
    client = Client()
    client.force_login(make_user(is_staff=True, is_superuser=True))
    return client


def test_admin_lists_and_revokes(staff, make_user) -> None:
    user = make_user()
    token = issue_access_token(user)
    one, two = issue(token).json(), issue(token).json()
    page = staff.get("/admin/storage/s3credential/")
    assert page.status_code == 200
    assert one["access_key_id"] in page.content.decode()
    assert one["secret_access_key"] not in page.content.decode()
    pk = S3Credential.objects.get(access_key_id=one["access_key_id"]).pk
    staff.post("/admin/storage/s3credential/", {"action": "revoke", "_selected_action": [pk]})
    assert refusal(one) == "InvalidAccessKeyId"
    assert refusal(two) is None
    staff.post("/admin/storage/s3credential/",
               {"action": "revoke_all_of_users", "_selected_action": [pk]})
    assert refusal(two) == "InvalidAccessKeyId"


def test_admin_cannot_add_credentials(staff) -> None:
    assert staff.get("/admin/storage/s3credential/add/").status_code == 403
