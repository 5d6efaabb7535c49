"""The JSON APIs of object storage (protocol §2): temporary credentials, their revocation and
presigned URLs. Thin: each view validates its body, calls one service and shapes the answer.
The S3-compatible endpoint itself is ``apps.storage.s3.views``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import ParseError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle, UserRateThrottle
from rest_framework.views import APIView

from apps.accounts.tokens import FAMILY_CLAIM
from rtcagent.conf import rtc_setting
from rtcagent.errors import InvalidRequest, NotFound

from .credentials import credential_create, credential_revoke, credentials_revoke_all
from .presign import REGION, presign_for_user
from .serializers import (
    CredentialsOutputSerializer,
    PresignInputSerializer,
    PresignOutputSerializer,
    RevokeInputSerializer,
    RevokeOutputSerializer,
)


def public_base_url(request: Request) -> str:
    """``RTC_PUBLIC_URL``, else this request's own scheme and host."""
    return settings.RTC_PUBLIC_URL or request.build_absolute_uri("/").rstrip("/")


def _family(request: Request) -> Any:
    return request.auth.get(FAMILY_CLAIM) if request.auth is not None else None


def _body(request: Request, serializer_class: type) -> dict[str, Any]:
    try:
        data = request.data
    except ParseError as exc:
        raise InvalidRequest(str(exc.detail)) from None
    serializer = serializer_class(data=data)
    if not serializer.is_valid():
        raise InvalidRequest("invalid body", details=serializer.errors)
    return dict(serializer.validated_data)


def _iso(moment: Any) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class TemporaryCredentialsView(APIView):
    """``POST /api/credentials/temporary``: a new credential for the caller's prefix, living
    ``S3_CREDENTIAL_TTL`` seconds (throttled as the login: the ``auth`` rate, per user)."""

    throttle_classes = (ScopedRateThrottle,)
    throttle_scope = "auth"

    @extend_schema(request=None, responses={200: CredentialsOutputSerializer},
                   tags=["storage"], operation_id="credentials_temporary")
    def post(self, request: Request) -> Response:
        issued = credential_create(user_id=request.user.pk, family_id=_family(request))
        return Response({
            "access_key_id": issued.access_key_id,
            "secret_access_key": issued.secret_access_key,
            "session_token": issued.session_token,
            "expires_at": _iso(issued.expires_at),
            "bucket": settings.RTC_S3_BUCKET,
            "prefix": issued.prefix,
            "endpoint_url": public_base_url(request) + "/s3",
            "region": REGION,
        }, headers={"Cache-Control": "no-store"})


class RevokeCredentialsView(APIView):
    """``POST /api/credentials/revoke``: ``{access_key_id}`` ends one of the caller's
    credentials, ``{all: true}`` every one (and so every URL they presigned)."""

    @extend_schema(request=RevokeInputSerializer, responses={200: RevokeOutputSerializer},
                   tags=["storage"], operation_id="credentials_revoke")
    def post(self, request: Request) -> Response:
        body = _body(request, RevokeInputSerializer)
        if body.get("all"):
            count = credentials_revoke_all(user_id=request.user.pk, reason="revoked by the user")
        else:
            if not credential_revoke(user_id=request.user.pk,
                                     access_key_id=body["access_key_id"],
                                     reason="revoked by the user"):
                raise NotFound("credential", body["access_key_id"])
            count = 1
        return Response({"revoked": count})


class PresignRateThrottle(UserRateThrottle):
    """Presigning counts as S3 requests: ``S3_REQUESTS_PER_MINUTE`` per user (0: off)."""

    scope = "s3-presign"

    def get_rate(self) -> str | None:
        limit = int(rtc_setting("S3_REQUESTS_PER_MINUTE"))
        return f"{limit}/min" if limit > 0 else None


class PresignedUrlView(APIView):
    """``POST /api/presigned-url`` ``{operation: put|get, key, expires_in}`` →
    ``{url, expires_at}``; 400 for a bad key or lifetime, 403 outside the caller's prefix."""

    throttle_classes = (PresignRateThrottle,)

    @extend_schema(request=PresignInputSerializer, responses={200: PresignOutputSerializer},
                   tags=["storage"], operation_id="presigned_url")
    def post(self, request: Request) -> Response:
        body = _body(request, PresignInputSerializer)
        signed = presign_for_user(
            user_id=request.user.pk, family_id=_family(request), operation=body["operation"],
            key=body["key"], expires_in=body.get("expires_in"),
            base_url=public_base_url(request),
        )
        return Response({"url": signed.url, "expires_at": _iso(signed.expires_at)},
                        headers={"Cache-Control": "no-store"})
