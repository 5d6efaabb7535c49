"""Revoked tokens and deactivated users are refused on every HTTP entry point; the admin's
actions revoke and deactivate (sockets are covered in tests/gateway/test_user_revocation.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from apps.accounts.services import user_revoke_tokens, user_set_active
from apps.accounts.tokens import issue_token_pair

pytestmark = pytest.mark.django_db

ME_URL = "/api/auth/me/"
REFRESH_URL = "/api/auth/token/refresh/"


def _me(client: Client, access: str) -> Any:
    return client.get(ME_URL, HTTP_AUTHORIZATION=f"Bearer {access}")


def _refresh(client: Client, refresh: str) -> Any:
    return client.post(REFRESH_URL, {"refresh": refresh}, content_type="application/json")


def _next_second() -> None:
    time.sleep(1.05 - time.time() % 1)  # iat has whole seconds


def test_revoked_tokens_are_refused_and_new_ones_work(client: Client, make_user: Any) -> None:
    user = make_user()
    pair = issue_token_pair(user)
    assert _me(client, pair["access"]).status_code == 200
    assert user_revoke_tokens(user_id=user.pk) is True
    refused = _me(client, pair["access"])
    assert refused.status_code == 401
    assert refused.json()["code"] == "token_revoked"
    again = _refresh(client, pair["refresh"])
    assert again.status_code == 401 and "access" not in again.json()
    _next_second()
    fresh = issue_token_pair(user)
    assert _me(client, fresh["access"]).status_code == 200
    assert _refresh(client, fresh["refresh"]).status_code == 200


def test_a_deactivated_user_is_refused(client: Client, make_user: Any) -> None:
    user = make_user()
    pair = issue_token_pair(user)
    user_set_active(user_id=user.pk, active=False)
    assert _me(client, pair["access"]).status_code == 401
    assert _refresh(client, pair["refresh"]).status_code == 401


def test_revoking_an_unknown_user_says_so() -> None:
    assert user_revoke_tokens(user_id=987654) is False


def test_the_admin_actions_revoke_and_deactivate(client: Client, make_user: Any) -> None:
    boss = get_user_model().objects.create_superuser("boss@example.com", "pw-boss")
    client.force_login(boss)
    alice, bob = make_user(), make_user()
    pair = issue_token_pair(alice)
    page = client.post("/admin/accounts/user/", {
        "action": "revoke_tokens", "_selected_action": [alice.pk]}, follow=True)
    assert b"Revoked the tokens of 1 user(s)" in page.content
    assert _me(client, pair["access"]).status_code == 401
    client.post("/admin/accounts/user/", {
        "action": "deactivate", "_selected_action": [bob.pk, boss.pk]}, follow=True)
    bob.refresh_from_db(), boss.refresh_from_db()
    assert bob.is_active is False
    assert boss.is_active is True  # never yourself


def test_the_admin_actions_are_staff_only(client: Client, make_user: Any) -> None:
    alice = make_user()
    pair = issue_token_pair(alice)
    client.force_login(make_user())  # not staff
    response = client.post("/admin/accounts/user/", {
        "action": "revoke_tokens", "_selected_action": [alice.pk]})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert _me(client, pair["access"]).status_code == 200


def test_view_only_staff_cannot_revoke_or_deactivate(client: Client, make_user: Any) -> None:
    from django.contrib.auth.models import Permission

    viewer = make_user(is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_user"))
    alice = make_user()
    pair = issue_token_pair(alice)
    client.force_login(viewer)
    assert client.get("/admin/accounts/user/").status_code == 200
    for action in ("revoke_tokens", "deactivate"):
        client.post("/admin/accounts/user/", {"action": action, "_selected_action": [alice.pk]})
    alice.refresh_from_db()
    assert alice.is_active is True
    assert _me(client, pair["access"]).status_code == 200
