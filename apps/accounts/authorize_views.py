"""``GET/POST /oauth2/authorize`` (the local login page of the PKCE flow), ``/oauth2/refresh``
and ``GET /oauth2/providers``.

RFC 6749 §4.1.2.1: while the client or the redirect URI is not established (missing, unknown,
not registered exactly) the answer is an error page and never a redirect; after that, errors go
back to the redirect URI as ``error=...&state=...``. The page's form posts to itself and, on
success, the browser is redirected to the client, so its CSP ``form-action`` names the redirect
URI's origin too (browsers apply ``form-action`` to the redirect after a form submission).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from django.contrib.auth import login
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_protect
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import SimpleRateThrottle
from rest_framework.views import APIView

from . import upstream
from .oauth_views import TokenView
from .pkce import (
    DEVICE_ID,
    REFRESH_TOKEN,
    AuthorizeClient,
    authorization_code_create,
    authorize_client,
    challenge_valid,
    redirect_uri_check,
)

_PARAMS = ("response_type", "client_id", "redirect_uri", "code_challenge",
           "code_challenge_method", "state", "scope", "device_id")


class _Redirectable(Exception):
    """An error sent back to the (verified) redirect URI."""

    def __init__(self, error: str, description: str) -> None:
        self.error = error
        self.description = description
        super().__init__(description)


def _redirect(uri: str, params: dict[str, str]) -> HttpResponseRedirect:
    query = urlencode({k: v for k, v in params.items() if v})
    response = HttpResponseRedirect(uri + ("&" if "?" in uri else "?") + query)
    response["Cache-Control"] = "no-store"
    return response


def _error_page(request: HttpRequest, message: str) -> HttpResponse:
    response = render(request, "oauth2/error.html", {"message": message}, status=400)
    response["Cache-Control"] = "no-store"
    return response


def _validate(query: Any, client: AuthorizeClient) -> dict[str, str]:
    for name in _PARAMS:
        if len(query.getlist(name)) > 1:
            raise _Redirectable("invalid_request", f"{name} is repeated")
    params = {name: query.get(name, "") for name in _PARAMS}
    if params["response_type"] != "code":
        raise _Redirectable("unsupported_response_type", "only response_type=code is supported")
    if not params["code_challenge"]:
        raise _Redirectable("invalid_request", "code_challenge is required (PKCE)")
    if params["code_challenge_method"] != "S256":
        raise _Redirectable("invalid_request", "code_challenge_method must be S256")
    if not challenge_valid(params["code_challenge"]):
        raise _Redirectable("invalid_request", "code_challenge is not an S256 challenge")
    if params["device_id"] and not DEVICE_ID.fullmatch(params["device_id"]):
        raise _Redirectable("invalid_request", "device_id is malformed")
    return params


class _LoginFailures(SimpleRateThrottle):
    """Failed password posts of the login page per client address (the peer, or the client's
    entry of X-Forwarded-For behind ``RTC_NUM_PROXIES`` proxies), at the ``auth`` rate of
    ``/api/auth/token/``. Only failures count; a full window answers 429 without checking."""

    scope = "auth"

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": "oauth2-login", "ident": self.get_ident(request)}


def _login_failures_full(request: HttpRequest) -> bool:
    throttle = _LoginFailures()
    history = throttle.cache.get(throttle.get_cache_key(request, None), [])
    now = throttle.timer()
    return sum(1 for t in history if t > now - throttle.duration) >= throttle.num_requests


def _login_failure_count(request: HttpRequest) -> None:
    _LoginFailures().allow_request(request, None)  # records one failure in the window


@never_cache
@csrf_protect
def authorize(request: HttpRequest) -> HttpResponse:
    """The authorization endpoint: a login (or "continue as") page for accounts of this server,
    then a redirect to the client with a single-use code and the echoed ``state``."""
    query = request.GET
    if len(query.getlist("client_id")) > 1 or len(query.getlist("redirect_uri")) > 1:
        return _error_page(request, "client_id or redirect_uri is repeated.")
    client = authorize_client(query.get("client_id", ""))
    if client is None:
        return _error_page(request, "Unknown client, or it may not use this login.")
    redirect_uri = query.get("redirect_uri", "")
    if not redirect_uri_check(client, redirect_uri):
        return _error_page(request, "The redirect URI is not registered for this client.")
    state = query.get("state", "")
    try:
        params = _validate(query, client)
    except _Redirectable as exc:
        return _redirect(redirect_uri, {"error": exc.error, "error_description": exc.description,
                                        "state": state})
    upstream_answer = _upstream_authorize(request, client, params, redirect_uri)
    if upstream_answer is not None:
        return upstream_answer
    form = AuthenticationForm(request)
    status, throttled = 200, False
    if request.method == "POST":
        if request.POST.get("action") == "cancel":
            return _redirect(redirect_uri, {"error": "access_denied", "state": state})
        if request.POST.get("action") == "continue" and request.user.is_authenticated:
            user = request.user
        elif _login_failures_full(request):
            form = AuthenticationForm(request)
            status, throttled = 429, True
            user = None
        else:
            data = request.POST.copy()
            data["username"] = data.get("username", "").strip().lower()
            form = AuthenticationForm(request, data=data)
            user = form.get_user() if form.is_valid() else None
            if user is not None:
                login(request, user)
            else:
                _login_failure_count(request)
        if user is not None:
            code = authorization_code_create(
                client_id=client.client_id, user=user, redirect_uri=redirect_uri,
                code_challenge=params["code_challenge"], device_id=params["device_id"],
                scope=params["scope"],
            )
            return _redirect(redirect_uri, {"code": code, "state": state})
    elif request.method != "GET":
        return _error_page(request, "Method not allowed.")
    response = render(request, "oauth2/login.html", {
        "client": client, "form": form, "redirect_host": urlsplit(redirect_uri).netloc,
        "current": request.user if request.user.is_authenticated else None,
        "throttled": throttled,
        "upstream": [(p.label, _upstream_start_url(p.name, request.get_full_path()))
                     for p in upstream.providers()],
    }, status=status)
    parts = urlsplit(redirect_uri)
    response._csp_update = {"form-action": [f"{parts.scheme}://{parts.netloc}"]}  # type: ignore[attr-defined]
    return response


class RefreshView(TokenView):
    """``POST /oauth2/refresh``: the original's name for ``grant_type=refresh_token`` on
    ``/oauth2/token`` (form: ``refresh_token``, ``client_id``); same answers and errors."""

    @extend_schema(tags=["oauth2"], operation_id="oauth2_refresh", auth=[], request=None,
                   responses={200: dict, 400: dict, 401: dict})
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        if request.content_type.split(";")[0].strip() == "application/x-www-form-urlencoded":
            form = request.data.copy()
            form.setlist("grant_type", [REFRESH_TOKEN])
            request._full_data = form  # what request.data answers from now on (DRF)
        return super().post(request, *args, **kwargs)


class ProvidersView(APIView):
    """``GET /oauth2/providers``: the login providers of ``/oauth2/authorize``: ``local``
    (accounts of this server) and each upstream OAuth2/OIDC provider (``provider=<name>`` on the
    authorize request goes straight to it)."""

    authentication_classes = ()
    permission_classes = (AllowAny,)
    renderer_classes = (JSONRenderer,)

    @extend_schema(tags=["oauth2"], operation_id="oauth2_providers", auth=[],
                   responses={200: dict})
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        authorize_url = request.build_absolute_uri("/oauth2/authorize")
        return Response({"providers": [
            {"name": "local", "type": "local", "title": "Account on this server",
             "authorize_url": authorize_url},
            *({"name": p.name, "type": "oidc", "title": p.label, "authorize_url": authorize_url,
               "authorize_params": {"provider": p.name}} for p in upstream.providers()),
        ]})


# --- upstream providers (apps.accounts.upstream) ------------------------------------------------


def _upstream_start_url(name: str, next_path: str) -> str:
    return f"/oauth2/upstream/{quote(name)}?" + urlencode({"next": next_path})


def _upstream_authorize(request: HttpRequest, client: AuthorizeClient, params: dict[str, str],
                        redirect_uri: str) -> HttpResponse | None:
    """``provider=<name>`` skips the login page; a request the upstream callback just logged in
    for (the session's one-shot marker) gets its code without a second click."""
    if request.method != "GET":
        return None
    if request.user.is_authenticated and request.session.get(upstream.DONE_KEY) == (
            request.get_full_path()):
        del request.session[upstream.DONE_KEY]
        code = authorization_code_create(
            client_id=client.client_id, user=request.user, redirect_uri=redirect_uri,
            code_challenge=params["code_challenge"], device_id=params["device_id"],
            scope=params["scope"],
        )
        return _redirect(redirect_uri, {"code": code, "state": request.GET.get("state", "")})
    name = request.GET.get("provider", "")
    if name and name != "local":
        if upstream.provider(name) is None:
            return _redirect(redirect_uri, {"error": "invalid_request",
                                            "error_description": "unknown provider",
                                            "state": request.GET.get("state", "")})
        return HttpResponseRedirect(_upstream_start_url(name, request.get_full_path()))
    return None


@never_cache
def upstream_start(request: HttpRequest, name: str) -> HttpResponse:
    """``GET /oauth2/upstream/<name>?next=<an /oauth2/authorize request>``: to the provider."""
    provider = upstream.provider(name)
    next_path = request.GET.get("next", "")
    if provider is None:
        return _error_page(request, "Unknown sign-in provider.")
    if not upstream.next_allowed(next_path):
        return _error_page(request, "The sign-in request is not valid.")
    callback = request.build_absolute_uri(f"/oauth2/callback/{quote(provider.name)}")
    response = HttpResponseRedirect(upstream.start(request.session, provider,
                                                   next_path=next_path, callback_uri=callback))
    response["Cache-Control"] = "no-store"
    return response


@never_cache
def upstream_callback(request: HttpRequest, name: str) -> HttpResponse:
    """``GET /oauth2/callback/<name>?code&state``: verify, log in, continue the authorize
    request. Every refusal is an error page (never a redirect) and writes nothing."""
    provider = upstream.provider(name)
    if provider is None:
        return _error_page(request, "Unknown sign-in provider.")
    try:
        entry = upstream.pop_state(request.session, provider, request.GET.get("state", ""))
        if request.GET.get("error"):
            raise upstream.UpstreamError("The provider did not sign you in.")
        code = request.GET.get("code", "")
        if not code:
            raise upstream.UpstreamError("The provider sent no code.")
        callback = request.build_absolute_uri(f"/oauth2/callback/{quote(provider.name)}")
        user = upstream.complete(provider, entry, code=code, callback_uri=callback)
    except upstream.UpstreamError as exc:
        return _error_page(request, str(exc))
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    request.session[upstream.DONE_KEY] = entry["next"]
    response = HttpResponseRedirect(entry["next"])  # next_allowed: our authorize path only
    response["Cache-Control"] = "no-store"
    return response
