"""The user admin keeps working with the email-only user model."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client: Client) -> Client:
    boss = get_user_model().objects.create_superuser("boss@example.com", "pw-boss")
    client.force_login(boss)
    return client


def test_user_changelist_search_and_change_page(staff_client: Client, make_user: Any) -> None:
    user = make_user("listed@example.com")
    response = staff_client.get("/admin/accounts/user/", {"q": "listed"})
    assert response.status_code == 200
    assert b"listed@example.com" in response.content
    assert response.context["cl"].result_count == 1
    assert [u.email for u in response.context["cl"].result_list] == ["listed@example.com"]
    assert staff_client.get(f"/admin/accounts/user/{user.pk}/change/").status_code == 200


def test_admin_add_form_creates_a_user_with_a_lowercased_email(staff_client: Client) -> None:
    response = staff_client.post(
        "/admin/accounts/user/add/",
        {
            "email": "New.Person@Example.COM",
            "password1": "a-long-Passw0rd-here",
            "password2": "a-long-Passw0rd-here",
            "usable_password": "true",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    user = get_user_model().objects.get(email="new.person@example.com")
    assert user.check_password("a-long-Passw0rd-here")
    assert not user.is_staff


def test_admin_add_form_refuses_a_duplicate_email_in_another_case(
    staff_client: Client, make_user: Any
) -> None:
    make_user("taken@example.com")
    response = staff_client.post(
        "/admin/accounts/user/add/",
        {
            "email": "TAKEN@example.com",
            "password1": "a-long-Passw0rd-here",
            "password2": "a-long-Passw0rd-here",
            "usable_password": "true",
        },
    )
    assert response.status_code == 200
    assert get_user_model().objects.filter(email__iexact="taken@example.com").count() == 1
