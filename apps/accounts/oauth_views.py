"""``POST /oauth2/token``: a thin DRF adapter over the grant registry (``apps.accounts.oauth``).

It parses the form body (RFC 6749 §3.2: ``application/x-www-form-urlencoded`` only),
authenticates the client, hands the parameters to the handler of ``grant_type`` and maps
``OAuthError`` to ``{"error", "error_description"}`` with ``Cache-Control: no-store``.
Grants live in their own modules, imported here so that they register.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.parsers import FormParser
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from . import exchange, pkce  # noqa: F401 - importing registers their grants
from .clients import client_authenticate
from .oauth import InvalidRequest, OAuthError, TokenRequest, grant_dispatch
from .throttles import OAuthThrottled

NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_SINGLE = ("grant_type", "subject_token", "subject_token_type", "requested_token_type",
           "audience", "resource", "scope", "actor_token", "actor_token_type", "client_id",
           "client_secret", "client_assertion", "client_assertion_type")


def _error(exc: OAuthError, *, basic: bool) -> Response:
    body = {"error": exc.code}
    if exc.description:
        body["error_description"] = exc.description
    headers = dict(NO_STORE)
    if exc.status == 401:
        headers["WWW-Authenticate"] = 'Basic realm="oauth2"' if basic else "Basic"
    return Response(body, status=exc.status, headers=headers)


class TokenView(OAuthThrottled, APIView):
    """The OAuth2 token endpoint; one handler per ``grant_type``; throttled per client
    (``oauth`` rate, ``apps.accounts.throttles``)."""

    authentication_classes = ()
    permission_classes = (AllowAny,)
    parser_classes = (FormParser,)
    renderer_classes = (JSONRenderer,)

    @extend_schema(tags=["oauth2"], operation_id="oauth2_token", auth=[], request=None,
                   responses={200: dict, 400: dict, 401: dict, 429: dict, 503: dict})
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        basic = request.headers.get("Authorization", "").lower().startswith("basic ")
        try:
            if request.content_type.split(";")[0].strip() != "application/x-www-form-urlencoded":
                raise InvalidRequest("the body must be application/x-www-form-urlencoded")
            data = request.data
            for name in _SINGLE:  # RFC 6749 §3.2: parameters must not be repeated
                if len(data.getlist(name)) > 1:
                    raise InvalidRequest(f"{name} is repeated")
            form = {name: data.get(name, "") for name in data}
            grant_type = form.get("grant_type", "")
            if not grant_type:
                raise InvalidRequest("grant_type is required")
            client, basic = client_authenticate(
                authorization=request.headers.get("Authorization", ""), form=form,
                token_url=request.build_absolute_uri("/oauth2/token"),
            )
            result = grant_dispatch(TokenRequest(client=client, params=form), grant_type)
        except OAuthError as exc:
            return _error(exc, basic=basic)
        return Response(result, headers=NO_STORE)
