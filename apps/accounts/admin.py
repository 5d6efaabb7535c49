"""Admin for the email-login user."""

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest

from .models import (
    Device,
    ExternalIdentity,
    OAuthClient,
    OAuthProvider,
    TrustedIssuer,
    User,
)
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


# --- token exchange: trusted issuers, identities, devices, clients --------------------------

# An address typed without a scheme is https (the endpoints must be, localhost aside), not
# Django 5's http default, which Django 6 changes.
HTTPS_URLS = {models.URLField: {"assume_scheme": "https"}}


@admin.register(TrustedIssuer)
class TrustedIssuerAdmin(admin.ModelAdmin):
    formfield_overrides = HTTPS_URLS
    list_display = ("issuer", "jwks_uri", "enabled", "merge_by_email", "max_token_minutes")
    list_filter = ("enabled",)
    search_fields = ("issuer",)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        from .issuers import IssuerConfig, jwks_cache_clear

        jwks_cache_clear(IssuerConfig.from_mapping({"issuer": obj.issuer,
                                                    "jwks_uri": obj.jwks_uri}))


@admin.register(ExternalIdentity)
class ExternalIdentityAdmin(admin.ModelAdmin):
    list_display = ("subject", "issuer", "user", "email", "last_seen_at")
    search_fields = ("subject", "issuer", "email", "user__email")
    raw_id_fields = ("user",)


@admin.register(Device)
class DeviceAdmin(admin.ModelAdmin):
    list_display = ("device_id", "user", "created_at", "last_seen_at")
    search_fields = ("device_id", "user__email")
    raw_id_fields = ("user",)


@admin.register(OAuthClient)
class OAuthClientAdmin(admin.ModelAdmin):
    formfield_overrides = HTTPS_URLS
    list_display = ("name", "client_id", "public", "auth_method", "is_active", "created_at")
    readonly_fields = ("client_id", "auth_method")
    fields = ("name", "client_id", "public", "auth_method", "jwks_uri", "jwks", "grants",
              "redirect_uris", "is_active")

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        from .clients import oauth_client_create

        if change:
            super().save_model(request, obj, form, change)
            return
        client, secret = oauth_client_create(
            name=obj.name, public=obj.public, redirect_uris=obj.redirect_uris,
            grants=obj.grants or None, jwks_uri=obj.jwks_uri or None, jwks=obj.jwks or None,
        )  # a JWKS (URI or inline) makes a private_key_jwt client, without a secret
        obj.pk, obj.client_id = client.pk, client.client_id
        note = f" Its secret (shown once): {secret}" if secret else ""
        self.message_user(request, f"Client id: {client.client_id}.{note}", messages.WARNING)


@admin.register(OAuthProvider)
class OAuthProviderAdmin(TrustedIssuerAdmin):
    """Saving forgets the provider's cached JWKS, as for a trusted issuer. A plain OAuth2
    provider (e.g. GitHub) has a userinfo endpoint instead of an issuer and JWKS."""

    list_display = ("name", "label", "issuer", "userinfo_endpoint", "enabled", "merge_by_email")
    search_fields = ("name", "label", "issuer", "userinfo_endpoint")
