"""The user model (email login, no username) and the refresh-token families."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.base_user import BaseUserManager
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone


class UserManager(BaseUserManager["User"]):
    use_in_migrations = True

    def _create(self, email: str, password: str | None, **extra: Any) -> User:
        if not email:
            raise ValueError("an email address is required")
        user = self.model(email=self.normalize_email(email).lower(), **extra)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_user(self, email: str, password: str | None = None, **extra: Any) -> User:
        extra.setdefault("is_staff", False)
        extra.setdefault("is_superuser", False)
        return self._create(email, password, **extra)

    def create_superuser(self, email: str, password: str | None = None, **extra: Any) -> User:
        extra.update(is_staff=True, is_superuser=True)
        return self._create(email, password, **extra)


class User(AbstractUser):
    username = None  # type: ignore[assignment]
    email = models.EmailField("email address", unique=True)
    # Tokens issued before this instant are refused everywhere (HTTP, the gateway, refresh).
    tokens_valid_after = models.DateTimeField(null=True, blank=True, editable=False)

    USERNAME_FIELD = "email"
    REQUIRED_FIELDS: list[str] = []

    objects = UserManager()  # type: ignore[misc]

    def clean(self) -> None:
        # Forms (the admin) go through here; the manager lower-cases too, and login matches on it.
        super().clean()
        self.email = (self.email or "").strip().lower()

    def __str__(self) -> str:
        return self.email


class TokenFamily(models.Model):
    """The refresh tokens descended from one login (RFC 9700 §4.14): each refresh uses up one
    token and issues the next in the same family; presenting a used one again, logging out or
    revoking (RFC 7009, the admin) revokes the family, and every access token carrying its id
    (claim ``fid``) stops working at once."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="token_families")
    device_id = models.CharField(max_length=128, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_reason = models.CharField(max_length=32, blank=True)

    class Meta:
        indexes = [models.Index(fields=["user", "created_at"], name="token_family_user_idx")]

    def __str__(self) -> str:
        return str(self.id)


class RefreshTokenRecord(models.Model):
    """One issued refresh token, known by the SHA-256 of its ``jti`` only (never the token):
    a database leak gives nothing that can be presented. ``used_at`` is set by the one
    conditional UPDATE that rotates it, so a token is used at most once."""

    jti_hash = models.CharField(max_length=64, primary_key=True)
    family = models.ForeignKey(
        TokenFamily, on_delete=models.CASCADE, related_name="refresh_tokens"
    )
    issued_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["expires_at"], name="refresh_token_expiry_idx")]

    def __str__(self) -> str:
        return self.jti_hash[:12]


# --- identity from other issuers, devices and OAuth2 clients (docs/auth.md) ------------------


class TrustedIssuer(models.Model):
    """An identity provider whose JWTs may be exchanged for ours (RFC 8693), edited in the admin;
    ``RTC_TRUSTED_ISSUERS`` adds more from the environment (``apps.accounts.issuers``)."""

    issuer = models.CharField(max_length=255, unique=True, help_text="exact `iss` of its tokens")
    jwks_uri = models.URLField(max_length=500, help_text="https (http only for localhost)")
    audiences = models.JSONField(default=list, help_text='accepted `aud` values, e.g. ["rtc"]')
    algorithms = models.JSONField(
        default=list, blank=True, help_text="subset of RS256, ES256, EdDSA; empty = all three"
    )
    claims = models.JSONField(
        default=dict, blank=True,
        help_text='claim names: {"subject": "sub", "email": "email", "name": "name", '
                  '"device": "device_id"}',
    )
    merge_by_email = models.BooleanField(
        default=False, help_text="link a new identity to an existing user with the same email"
    )
    max_token_minutes = models.PositiveIntegerField(
        default=15, help_text="cap on the lifetime of the tokens issued for it"
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("issuer",)

    def __str__(self) -> str:
        return self.issuer


class ExternalIdentity(models.Model):
    """A user as another issuer knows them: found by ``(issuer, subject)``, never by email."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="external_identities")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    email = models.CharField(max_length=254, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "external identities"
        constraints = [
            models.UniqueConstraint(fields=("issuer", "subject"), name="external_identity_unique")
        ]

    def __str__(self) -> str:
        return f"{self.subject} @ {self.issuer}"


class Device(models.Model):
    """A browser or app of a user; access tokens bound to it carry its ``device_id``."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="devices")
    device_id = models.CharField(max_length=128)
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("user", "device_id"), name="device_unique_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.device_id} ({self.user_id})"


class OAuthClient(models.Model):
    """A client of ``/oauth2/token``. Only a SHA-256 of the secret is stored (secrets are 256-bit
    random, so a slow hash adds nothing); public clients have none."""

    class Grant(models.TextChoices):
        TOKEN_EXCHANGE = "token-exchange", "token exchange (RFC 8693)"
        AUTHORIZATION_CODE = "authorization-code", "authorization code with PKCE"

    class AuthMethod(models.TextChoices):
        CLIENT_SECRET = "client_secret", "client secret (HTTP Basic or form)"
        PRIVATE_KEY_JWT = "private_key_jwt", "private_key_jwt (RFC 7523 client assertion)"

    client_id = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    public = models.BooleanField(default=False)
    secret_hash = models.CharField(max_length=64, blank=True, default="", editable=False)
    redirect_uris = models.JSONField(default=list, blank=True)
    grants = models.JSONField(default=list, help_text="token-exchange, authorization-code")
    auth_method = models.CharField(
        max_length=32, choices=AuthMethod.choices, default=AuthMethod.CLIENT_SECRET
    )
    jwks_uri = models.URLField(
        max_length=2000, blank=True, default="",
        help_text="private_key_jwt: where the client publishes its public keys (https)",
    )
    jwks = models.JSONField(
        null=True, blank=True, help_text='private_key_jwt: inline public JWKS {"keys": [...]}'
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "OAuth2 client"

    def __str__(self) -> str:
        return f"{self.name} ({self.client_id})"


class AuthorizationCode(models.Model):
    """An OAuth2 authorization code (RFC 6749 §4.1, PKCE RFC 7636), known by the SHA-256 of the
    code only. ``used_at`` is set once, under a row lock, by the exchange that issues tokens;
    ``family`` is the login it started, revoked if the code is presented again (§4.1.2)."""

    code_hash = models.CharField(max_length=64, primary_key=True)
    client_id = models.CharField(max_length=64)
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="authorization_codes")
    redirect_uri = models.CharField(max_length=2000)
    code_challenge = models.CharField(max_length=128)
    device_id = models.CharField(max_length=128, blank=True)
    scope = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    family = models.ForeignKey(
        TokenFamily, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        indexes = [models.Index(fields=["expires_at"], name="authorization_code_expiry_idx")]

    def __str__(self) -> str:
        return self.code_hash[:12]


class OAuthProvider(models.Model):
    """An upstream OAuth2/OIDC provider offered on the ``/oauth2/authorize`` login page, configured
    by its endpoints (``apps.accounts.upstream``); ``RTC_OAUTH_PROVIDERS`` adds more."""

    name = models.SlugField(max_length=64, unique=True, help_text="in /oauth2/callback/<name>")
    label = models.CharField(max_length=200, help_text='button text, e.g. "Google"')
    authorization_endpoint = models.URLField(max_length=500)
    token_endpoint = models.URLField(max_length=500)
    client_id = models.CharField(max_length=255)
    client_secret = models.CharField(max_length=500, blank=True, default="")
    scopes = models.CharField(max_length=500, default="openid email profile")
    issuer = models.CharField(
        max_length=255, blank=True, default="",
        help_text="exact `iss` of its id_tokens; empty for plain OAuth2 (userinfo endpoint)",
    )
    jwks_uri = models.URLField(
        max_length=500, blank=True, default="", help_text="https (http only for localhost)"
    )
    userinfo_endpoint = models.URLField(
        max_length=500, blank=True, default="",
        help_text="plain OAuth2 (no issuer/JWKS, e.g. GitHub): claims from this endpoint",
    )
    algorithms = models.JSONField(
        default=list, blank=True, help_text="subset of RS256, ES256, EdDSA; empty = all three"
    )
    claims = models.JSONField(
        default=dict, blank=True,
        help_text='claim names: {"subject": "sub", "email": "email", "name": "name"}',
    )
    merge_by_email = models.BooleanField(
        default=False, help_text="link a new identity to an existing user with the same email"
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("name",)
        verbose_name = "upstream login provider"

    def __str__(self) -> str:
        return f"{self.label} ({self.name})"

    def clean(self) -> None:
        if not (self.issuer and self.jwks_uri) and not self.userinfo_endpoint:
            raise ValidationError("Set issuer and JWKS URI (OIDC), or a userinfo endpoint.")
