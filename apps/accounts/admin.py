"""Admin for the email-login user."""

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from .models import User
from .services import user_revoke_tokens, user_set_active


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    ordering = ("email",)
    list_display = ("email", "is_staff", "is_active", "date_joined")
    search_fields = ("email", "first_name", "last_name")
    fieldsets = (
        (None, {"fields": ("email", "password")}),
        ("Personal info", {"fields": ("first_name", "last_name")}),
        (
            "Permissions",
            {"fields": ("is_active", "is_staff", "is_superuser", "groups", "user_permissions")},
        ),
        ("Important dates", {"fields": ("last_login", "date_joined")}),
    )
    add_fieldsets = ((None, {"classes": ("wide",), "fields": ("email", "password1", "password2")}),)
    actions = ("revoke_tokens", "deactivate", "force_disconnect")

    @admin.action(description="Revoke all tokens (and close their connections)",
                  permissions=("change",))
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        count = sum(user_revoke_tokens(user_id=pk) for pk in queryset.values_list("pk", flat=True))
        self.message_user(request, f"Revoked the tokens of {count} user(s); they must log in "
                                   "again.", messages.SUCCESS)

    @admin.action(description="Deactivate (and close their connections)",
                  permissions=("change",))
    def deactivate(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        ids = list(queryset.exclude(pk=request.user.pk).values_list("pk", flat=True))
        count = sum(user_set_active(user_id=pk, active=False) for pk in ids)
        self.message_user(request, f"Deactivated {count} user(s).", messages.SUCCESS)

    @admin.action(description="Force-disconnect their sockets (3503: no reconnect until reload)",
                  permissions=("change",))
    def force_disconnect(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        from apps.gateway.events import disconnect_user
        from apps.gateway.protocol import DISCONNECT_FORCE

        ids = list(queryset.values_list("pk", flat=True))
        for pk in ids:
            disconnect_user(pk, reason="disconnected by an operator", code=DISCONNECT_FORCE)
        self.message_user(request, f"Closed the sockets of {len(ids)} user(s).", messages.SUCCESS)
