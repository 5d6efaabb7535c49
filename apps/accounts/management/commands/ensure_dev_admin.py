"""``manage.py ensure_dev_admin``: make sure a development admin login exists and say what it is."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.accounts.services import DevAdminConflict, dev_admin_ensure


class Command(BaseCommand):
    help = (
        "Create admin@localhost with a random password (saved in var/dev-admin.txt) when no "
        "superuser exists; otherwise print where the admin login is. Development only."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEBUG:
            raise CommandError(
                "ensure_dev_admin only runs with DJANGO_DEBUG on (it stores a password in a "
                "file); use `manage.py createsuperuser` in production"
            )
        try:
            login = dev_admin_ensure(var_dir=settings.VAR_DIR)
        except DevAdminConflict as exc:
            raise CommandError(str(exc)) from exc
        if login.password:
            self.stdout.write(f"Admin login: {login.email} / {login.password}")
            state = "created, password saved in" if login.created else "stored in"
            self.stdout.write(f"({state} {login.path})")
        elif login.stale:
            self.stdout.write(
                f"Admin login: {login.email} (the password in {login.path} no longer works; "
                f"reset it with `python manage.py changepassword {login.email}`)"
            )
        else:
            names = ", ".join(login.superusers)
            first = login.superusers[0] if login.superusers else "<email>"
            self.stdout.write(
                f"A superuser already exists ({names}); its password is not stored in "
                f"{login.path}. Reset it with `python manage.py changepassword {first}`."
            )
