"""Pages and endpoints of the ``<rtc-agent>`` widget (docs/widget.md).

* ``/`` serves the demo page (in debug, or when ``RTC_DEMO_PAGE`` is true): the widget on a
  plain page that logs in with email and password through ``/api/auth/token/``.
* ``POST /api/widget/staff-token`` gives a logged-in staff user (Django session, CSRF-checked)
  a short **admin token** bound to the browser's device id. It is no access token (its ``aud``
  and ``token_type`` differ): the widget floating over the admin exchanges it at
  ``/oauth2/token`` (RFC 8693, public client ``rtcagent-admin``) for the staff user's own access
  token, keeps both in memory only and exchanges again before expiry (docs/auth.md).
"""

from __future__ import annotations

import re

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_POST

from apps.accounts.exchange import admin_token_issue

_DEVICE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


def demo(request: HttpRequest) -> HttpResponse:
    if not getattr(settings, "RTC_DEMO_PAGE", settings.DEBUG):
        raise Http404("the demo page is disabled")
    scripted = getattr(settings, "RTC_MODEL", "").startswith("scripted")
    return render(request, "rtc_agent/demo.html", {"scripted_demo": scripted})


@require_POST
@staff_member_required
def staff_token(request: HttpRequest) -> JsonResponse:
    device_id = request.POST.get("device_id", "")
    if device_id and not _DEVICE.match(device_id):
        body = {"code": "invalid_request", "message": "device_id: invalid"}
        return JsonResponse(body, status=400)
    token = admin_token_issue(user=request.user, device_id=device_id)
    body = {"admin_token": token, "token_type": "urn:ietf:params:oauth:token-type:jwt",
            "expires_in": settings.RTC_ADMIN_TOKEN_SECONDS}
    return JsonResponse(body, headers={"Cache-Control": "no-store"})


urlpatterns = [
    path("", demo, name="rtc_agent_demo"),
    path("api/widget/staff-token", staff_token, name="rtc_agent_staff_token"),
]
