"""Pages and endpoints of the ``<rtc-agent>`` widget (docs/widget.md).

* ``/`` serves the demo page (in debug, or when ``RTC_DEMO_PAGE`` is true): the widget on a
  plain page that logs in with email and password through ``/api/auth/token/``.
* ``POST /api/widget/staff-token`` gives a logged-in staff user (Django session, CSRF-checked)
  a short access JWT for the widget floating over the admin, bound to the browser's device id.
"""

from __future__ import annotations

import re
from datetime import timedelta

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_POST

from apps.accounts.tokens import issue_access_token

STAFF_TOKEN_LIFETIME = timedelta(minutes=15)
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
    token = issue_access_token(request.user, lifetime=STAFF_TOKEN_LIFETIME, device_id=device_id)
    return JsonResponse({"access": token})


urlpatterns = [
    path("", demo, name="rtc_agent_demo"),
    path("api/widget/staff-token", staff_token, name="rtc_agent_staff_token"),
]
