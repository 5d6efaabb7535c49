"""HTTP interface of accounts: token pair, refresh, the public JWKS and ``me`` (protocol §2)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView
from rest_framework_simplejwt import views as jwt_views

from .keys import get_keyring
from .serializers import (
    AccessOutputSerializer,
    ErrorOutputSerializer,
    JwksSerializer,
    MeOutputSerializer,
    TokenObtainPairSerializer,
    TokenPairOutputSerializer,
    TokenRefreshSerializer,
)

JWKS_MAX_AGE = 300  # seconds; verifiers refetch on an unknown kid anyway


@extend_schema_view(
    post=extend_schema(
        tags=["auth"],
        operation_id="auth_token",
        responses={
            200: TokenPairOutputSerializer,
            400: ErrorOutputSerializer,
            401: ErrorOutputSerializer,
            429: ErrorOutputSerializer,
        },
    )
)
class TokenObtainPairView(jwt_views.TokenObtainPairView):
    """POST ``{email, password}`` -> ``{access, refresh}``; throttled per client ("auth" rate)."""

    serializer_class = TokenObtainPairSerializer
    throttle_classes = (ScopedRateThrottle,)
    throttle_scope = "auth"


@extend_schema_view(
    post=extend_schema(
        tags=["auth"],
        operation_id="auth_token_refresh",
        responses={200: AccessOutputSerializer, 401: ErrorOutputSerializer},
    )
)
class TokenRefreshView(jwt_views.TokenRefreshView):
    """POST ``{refresh}`` -> ``{access}``."""

    serializer_class = TokenRefreshSerializer


class JwksView(APIView):
    """GET the JWK Set of every key that still verifies; public and cacheable."""

    authentication_classes = ()
    permission_classes = (AllowAny,)
    renderer_classes = (JSONRenderer,)

    @extend_schema(tags=["auth"], operation_id="jwks", responses=JwksSerializer, auth=[])
    def get(self, request: Request) -> Response:
        document = get_keyring().jwks()
        body = json.dumps(document, sort_keys=True).encode()
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        headers = {"Cache-Control": f"public, max-age={JWKS_MAX_AGE}", "ETag": etag}
        if etag in request.headers.get("If-None-Match", ""):
            return Response(status=304, headers=headers)
        return Response(document, headers=headers)


class MeView(APIView):
    """GET ``{id, email}`` of the user the access token belongs to."""

    @extend_schema(
        tags=["auth"],
        operation_id="auth_me",
        responses={200: MeOutputSerializer, 401: ErrorOutputSerializer},
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        user = request.user
        return Response(MeOutputSerializer({"id": user.pk, "email": user.email}).data)
