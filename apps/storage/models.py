"""Temporary S3 credentials (``POST /api/credentials/temporary`` and the ones behind presigned
URLs).

A row holds no secret that can be presented: the secret access key is derived from
``SECRET_KEY`` and the access key id (``credentials.credential_secret``), and the session token
is kept as its SHA-256 only. A database leak therefore gives nothing that signs a request.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class S3Credential(models.Model):
    class Kind(models.TextChoices):
        CLIENT = "client", "given to the client"
        PRESIGN = "presign", "held by the server, signs presigned URLs"

    access_key_id = models.CharField(max_length=32, unique=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="s3_credentials"
    )
    # The login (refresh-token family) whose access token asked for it: logging out of that
    # login, or its revocation, ends the credential too. None for tokens without a family.
    family = models.ForeignKey(
        "accounts.TokenFamily", null=True, blank=True, on_delete=models.CASCADE,
        related_name="s3_credentials",
    )
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.CLIENT)
    session_token_hash = models.CharField(max_length=64, blank=True)  # sha256 hex; "" = none
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_reason = models.CharField(max_length=64, blank=True)

    class Meta:
        verbose_name = "S3 credential"
        indexes = [
            models.Index(fields=["user", "kind", "expires_at"], name="s3cred_user_kind_exp_idx"),
            models.Index(fields=["expires_at"], name="s3cred_expiry_idx"),
        ]

    def __str__(self) -> str:
        return self.access_key_id


class PendingUpload(models.Model):
    """An attachment upload that no message has named yet: recorded when the widget asks for a
    presigned PUT under ``user-<id>/uploads/``. The sweep deletes the object of a row older than
    ``UNSENT_UPLOAD_TTL_HOURS`` that no message of the user refers to (a cancelled upload whose
    bytes reached the store, a file attached and never sent), so it stops counting against the
    user's quota; uploads a message refers to stay (they are the user's files)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="pending_uploads"
    )
    key = models.CharField(max_length=1024)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="pending_upload_user_key"),
        ]
        indexes = [models.Index(fields=["created_at"], name="pending_upload_created_idx")]

    def __str__(self) -> str:
        return self.key
