"""Admin of temporary S3 credentials: see who holds what until when, and revoke."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from .credentials import credential_revoke, credentials_revoke_all
from .models import S3Credential


@admin.register(S3Credential)
class S3CredentialAdmin(admin.ModelAdmin):
    list_display = ("access_key_id", "user", "kind", "created_at", "expires_at", "revoked_at")
    list_filter = ("kind", ("revoked_at", admin.EmptyFieldListFilter))
    search_fields = ("access_key_id", "user__email")
    ordering = ("-created_at",)
    readonly_fields = ("access_key_id", "user", "family", "kind", "created_at", "expires_at",
                       "revoked_at", "revoked_reason")
    exclude = ("session_token_hash",)
    actions = ("revoke", "revoke_all_of_users")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # credentials are issued by the API only: their secret is shown once

    @admin.action(description="Revoke the selected credentials", permissions=("change",))
    def revoke(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        count = sum(
            credential_revoke(user_id=user_id, access_key_id=key, reason="revoked by an operator")
            for key, user_id in queryset.values_list("access_key_id", "user_id")
        )
        self.message_user(request, f"Revoked {count} credential(s).", messages.SUCCESS)

    @admin.action(description="Revoke every credential of their users (and their presigned "
                              "URLs)", permissions=("change",))
    def revoke_all_of_users(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        users = set(queryset.values_list("user_id", flat=True))
        count = sum(credentials_revoke_all(user_id=u, reason="revoked by an operator")
                    for u in users)
        self.message_user(request, f"Revoked {count} credential(s) of {len(users)} user(s).",
                          messages.SUCCESS)
