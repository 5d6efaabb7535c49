"""Presigned URLs of this server's ``/s3/`` endpoint.

* ``presign_for_user`` (``POST /api/presigned-url``): a GET or PUT of one key under the
  caller's prefix, signed with one of the caller's presign credentials, so revoking the user's
  tokens, the login, or all of the user's credentials ends the URL too. A URL never outlives
  its credential: ``expires_in`` is at most ``PRESIGN_MAX_EXPIRES`` and at most
  ``S3_CREDENTIAL_TTL`` (a 400 naming the limit otherwise).
* ``service_presign`` (``LocalStore.presign_get/put``): any key, signed with the service
  credential (its secret derived from ``SECRET_KEY``, never stored), honoured only as a
  presigned GET, HEAD or PUT of that one object. Its base URL is ``RTC_PUBLIC_URL``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from rtcagent.conf import rtc_setting
from rtcagent.errors import InvalidRequest, PermissionDenied

from . import sigv4
from .base import InvalidKey
from .credentials import (
    SERVICE_ACCESS_KEY_ID,
    check_key,
    credential_secret,
    key_in_prefix,
    presign_credential,
    user_prefix,
)
from .models import PendingUpload

REGION = "us-east-1"
OPERATIONS = {"get": "GET", "put": "PUT"}
UPLOADS_DIR = "uploads/"  # the widget's attachments: user-<id>/uploads/<sha-256>.<ext>
# A signed query parameter of service PUT URLs: the content type the object is stored with,
# whatever the uploader's Content-Type header says (SigV4 query URLs sign only the host).
CONTENT_TYPE_PARAM = "x-rtc-content-type"


@dataclass(frozen=True)
class PresignedUrl:
    url: str
    expires_at: datetime


def presign_limit() -> int:
    """The longest ``expires_in`` a user may ask for, in seconds."""
    return min(int(rtc_setting("PRESIGN_MAX_EXPIRES")), int(rtc_setting("S3_CREDENTIAL_TTL")),
               sigv4.MAX_EXPIRES)


def _expires_in(value: int | None) -> int:
    ttl = int(rtc_setting("S3_CREDENTIAL_TTL"))
    most = int(rtc_setting("PRESIGN_MAX_EXPIRES"))
    if value is None:
        return min(int(rtc_setting("PRESIGN_DEFAULT_EXPIRES")), presign_limit())
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidRequest("expires_in must be a whole number of seconds, at least 1",
                             details={"field": "expires_in"})
    if value > most:
        raise InvalidRequest(
            f"expires_in may be at most {most} seconds (PRESIGN_MAX_EXPIRES)",
            details={"field": "expires_in", "max": presign_limit()})
    if value > ttl:
        raise InvalidRequest(
            f"expires_in may be at most {ttl} seconds: a presigned URL never outlives the "
            f"credential that signs it (S3_CREDENTIAL_TTL)",
            details={"field": "expires_in", "max": presign_limit()})
    return value


def presign_for_user(
    *,
    user_id: int,
    family_id: object,
    operation: str,
    key: str,
    expires_in: int | None,
    base_url: str,
    now: datetime | None = None,
) -> PresignedUrl:
    """A URL that GETs or PUTs ``key`` for ``expires_in`` seconds (see the module docstring).
    ``InvalidRequest`` for a bad operation, key or lifetime; ``PermissionDenied`` for a key
    outside the caller's prefix. Nothing is written but, at most, a new presign credential and,
    for a PUT under ``uploads/``, the ``PendingUpload`` row the sweep uses."""
    method = OPERATIONS.get(operation) if isinstance(operation, str) else None
    if method is None:
        raise InvalidRequest("operation must be put or get", details={"field": "operation"})
    try:
        check_key(key)
    except InvalidKey as exc:
        raise InvalidRequest(f"invalid key: {exc}", details={"field": "key"}) from None
    prefix = user_prefix(user_id)
    if not key_in_prefix(key, prefix):
        raise PermissionDenied(f"the key must start with your prefix {prefix}",
                               details={"field": "key", "prefix": prefix})
    seconds = _expires_in(expires_in)
    # SigV4 dates have whole seconds: the URL expires exactly at expires_at.
    now = (now or timezone.now()).replace(microsecond=0)
    credential = presign_credential(user_id=user_id, family_id=family_id, min_life=seconds,
                                    now=now)
    url = sigv4.presign(
        method=method, base_url=base_url, bucket=settings.RTC_S3_BUCKET, key=key,
        access_key_id=credential.access_key_id, secret_key=credential.secret_access_key,
        session_token=None, region=REGION, expires_in=seconds, now=now,
    )
    if method == "PUT" and key.startswith(prefix + UPLOADS_DIR):
        PendingUpload.objects.update_or_create(user_id=user_id, key=key,
                                               defaults={"created_at": now})
    return PresignedUrl(url, now + timedelta(seconds=seconds))


def service_presign(
    method: str, key: str, *, expires_in: int, content_type: str | None = None
) -> str:
    """A URL of this server's ``/s3/`` that GETs, HEADs or PUTs ``key`` (any key, e.g. the
    derived files outside user prefixes) for ``expires_in`` seconds (1..604800). A PUT with
    ``content_type`` stores the object with that type."""
    method = method.upper()
    if method not in ("GET", "HEAD", "PUT"):
        raise ValueError(f"service_presign: {method} is not GET, HEAD or PUT")
    base_url = settings.RTC_PUBLIC_URL
    if not base_url:
        raise ImproperlyConfigured(
            "RTC_PUBLIC_URL is empty: the local object store's presigned URLs point at this "
            "server's /s3/ endpoint and need its public base URL (e.g. https://rtc.example.com)"
        )
    check_key(key)
    extra = {CONTENT_TYPE_PARAM: content_type} if method == "PUT" and content_type else None
    now = timezone.now().replace(microsecond=0)
    return sigv4.presign(
        method=method, base_url=base_url, bucket=settings.RTC_S3_BUCKET, key=key,
        access_key_id=SERVICE_ACCESS_KEY_ID, secret_key=credential_secret(SERVICE_ACCESS_KEY_ID),
        session_token=None, region=REGION, expires_in=expires_in, now=now, extra_query=extra,
    )
