"""HTTP interface of accounts: token pair, refresh (rotating), logout, RFC 7009 revocation, the
public JWKS and ``me`` (protocol §2)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework.parsers import FormParser
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView
from rest_framework_simplejwt import views as jwt_views
from rest_framework_simplejwt.exceptions import AuthenticationFailed

from .keys import get_keyring
from .serializers import (
    ErrorOutputSerializer,
    JwksSerializer,
    MeOutputSerializer,
    RefreshInputSerializer,
    TokenObtainPairSerializer,
    TokenPairOutputSerializer,
    TokenRefreshSerializer,
)
from .services import RefreshRefused, refresh_token_logout, token_revoke
from .throttles import OAuthThrottled

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
        responses={200: TokenPairOutputSerializer, 401: ErrorOutputSerializer},
    )
)
class TokenRefreshView(jwt_views.TokenRefreshView):
    """POST ``{refresh}`` -> ``{access, refresh}``; the presented refresh token is used up, and
    presenting it again revokes its whole login (401 ``token_reused``)."""

    serializer_class = TokenRefreshSerializer


class LogoutView(APIView):
    """POST ``{refresh}`` -> 204: the login (refresh-token family) is revoked, its access tokens
    too. The refresh token is the credential, so no ``Authorization`` header is needed (and an
    expired access token does not stand in the way)."""

    authentication_classes = ()
    permission_classes = (AllowAny,)

    def get_authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'  # a refused token is a 401, not DRF's 403 without one

    @extend_schema(
        tags=["auth"],
        operation_id="auth_logout",
        request=RefreshInputSerializer,
        responses={204: None, 400: ErrorOutputSerializer, 401: ErrorOutputSerializer},
        auth=[],
    )
    def post(self, request: Request) -> Response:
        data = RefreshInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            refresh_token_logout(token=data.validated_data["refresh"])
        except RefreshRefused as exc:
            raise AuthenticationFailed(exc.detail, exc.code) from None
        return Response(status=204)


class RevokeView(OAuthThrottled, APIView):
    """RFC 7009 token revocation: POST form ``token`` [, ``token_type_hint``] -> 200, empty.

    An access or a refresh token revokes its whole login (family). Unknown, forged and already
    revoked tokens get the same 200 (§2.2), so the answer tells nothing. Client authentication
    (§2.1): a request that names a client (HTTP Basic or ``client_id``) must authenticate as at
    ``/oauth2/token``, else 401 ``invalid_client`` and nothing is revoked; a request without a
    client is accepted, since whoever holds a token can only end that token's login (the
    widget is a public client). Tokens do not record their client, so a client may revoke any
    token it holds.
    """

    authentication_classes = ()
    permission_classes = (AllowAny,)
    parser_classes = (FormParser,)

    @extend_schema(
        tags=["auth"],
        operation_id="oauth2_revoke",
        request={"application/x-www-form-urlencoded": {"type": "object", "properties": {
            "token": {"type": "string"}, "token_type_hint": {"type": "string"}},
            "required": ["token"]}},
        responses={200: None, 400: None, 429: None},
        auth=[],
    )
    def post(self, request: Request) -> Response:
        from .clients import client_authenticate
        from .oauth import OAuthError

        token = request.data.get("token")
        headers = {"Cache-Control": "no-store"}
        authorization = request.headers.get("Authorization", "")
        form = {k: str(request.data[k]) for k in ("client_id", "client_secret",
                                                  "client_assertion", "client_assertion_type")
                if k in request.data}
        if (authorization.lower().startswith("basic ") or form.get("client_id")
                or form.get("client_assertion") or form.get("client_assertion_type")):
            # §2.1: a client that identifies itself must authenticate as it does at the token
            # endpoint (confidential clients with their secret); a wrong one revokes nothing.
            try:
                client_authenticate(authorization=authorization, form=form,
                                    token_url=request.build_absolute_uri("/oauth2/token"))
            except OAuthError as exc:
                headers["WWW-Authenticate"] = 'Basic realm="oauth2"'
                return Response({"error": exc.code, "error_description": exc.description},
                                status=exc.status, headers=headers)
        if not isinstance(token, str) or not token:
            return Response(
                {"error": "invalid_request", "error_description": "token is required"},
                status=400, headers=headers,
            )
        token_revoke(token=token, token_type_hint=str(request.data.get("token_type_hint", "")))
        return Response(status=200, headers=headers)


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
