"""``manage.py ensure_dev_admin``: one development admin, created once, never changed after."""

from __future__ import annotations

import re
import stat
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db

LOGIN = re.compile(r"^Admin login: (?P<email>\S+) / (?P<password>\S+)$")


@pytest.fixture
def var_dir(settings: Any, tmp_path: Path) -> Path:
    settings.DEBUG = True
    settings.VAR_DIR = tmp_path / "var"
    settings.VAR_DIR.mkdir()
    return settings.VAR_DIR


def run() -> list[str]:
    out = StringIO()
    call_command("ensure_dev_admin", stdout=out)
    return out.getvalue().splitlines()


def test_creates_admin_with_random_password_saved_privately(var_dir: Path) -> None:
    lines = run()
    match = LOGIN.match(lines[0])
    assert match is not None, lines
    assert match["email"] == "admin@localhost"
    password = match["password"]
    assert len(password) >= 20
    admin = get_user_model().objects.get()
    assert (admin.email, admin.is_superuser, admin.is_staff) == ("admin@localhost", True, True)
    assert admin.check_password(password)
    stored = var_dir / "dev-admin.txt"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert stored.read_text() == f"admin@localhost\n{password}\n"
    assert str(stored) in lines[1]


def test_printed_login_works_on_the_token_endpoint(var_dir: Path, client: Any) -> None:
    match = LOGIN.match(run()[0])
    assert match is not None
    response = client.post(
        "/api/auth/token/",
        {"email": match["email"], "password": match["password"]},
        content_type="application/json",
    )
    assert response.status_code == 200
    assert set(response.json()) == {"access", "refresh"}


def test_second_run_changes_nothing_and_prints_the_stored_login(var_dir: Path) -> None:
    first = run()
    admin = get_user_model().objects.get()
    stored = (var_dir / "dev-admin.txt").read_text()
    second = run()
    assert second[0] == first[0]
    assert "stored in" in second[1]
    again = get_user_model().objects.get()
    assert (again.pk, again.password, again.last_login) == (admin.pk, admin.password, None)
    assert (var_dir / "dev-admin.txt").read_text() == stored
    assert run()[0] == first[0]
    assert get_user_model().objects.count() == 1


def test_existing_superuser_is_reported_and_nothing_is_created(var_dir: Path) -> None:
    get_user_model().objects.create_superuser("boss@example.com", "pw-boss")
    lines = run()
    assert len(lines) == 1
    assert "boss@example.com" in lines[0]
    assert "changepassword" in lines[0]
    assert not lines[0].startswith("Admin login:")
    assert list(get_user_model().objects.values_list("email", flat=True)) == ["boss@example.com"]
    assert not (var_dir / "dev-admin.txt").exists()


def test_stored_login_of_a_deleted_admin_is_not_printed(var_dir: Path) -> None:
    run()
    get_user_model().objects.all().delete()
    get_user_model().objects.create_superuser("boss@example.com", "pw-boss")
    stored = (var_dir / "dev-admin.txt").read_text()
    lines = run()
    assert "boss@example.com" in lines[0]
    assert stored.split("\n")[1] not in "\n".join(lines)
    assert (var_dir / "dev-admin.txt").read_text() == stored


def test_changed_password_is_reported_as_stale_without_change(var_dir: Path) -> None:
    run()
    admin = get_user_model().objects.get()
    admin.set_password("changed-by-hand")
    admin.save()
    lines = run()
    assert lines == [
        f"Admin login: admin@localhost (the password in {var_dir / 'dev-admin.txt'} no longer "
        "works; reset it with `python manage.py changepassword admin@localhost`)"
    ]
    assert get_user_model().objects.get().check_password("changed-by-hand")


def test_refuses_to_run_with_debug_off(var_dir: Path, settings: Any) -> None:
    settings.DEBUG = False
    with pytest.raises(CommandError, match="DJANGO_DEBUG"):
        run()
    assert get_user_model().objects.count() == 0
    assert not (var_dir / "dev-admin.txt").exists()


def test_refuses_to_promote_an_ordinary_admin_at_localhost(var_dir: Path) -> None:
    get_user_model().objects.create_user("admin@localhost", "pw")
    with pytest.raises(CommandError, match="not a superuser"):
        run()
    assert get_user_model().objects.get().is_superuser is False
    assert not (var_dir / "dev-admin.txt").exists()
