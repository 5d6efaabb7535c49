"""HTTP routes (protocol.md §2)."""

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.utils.functional import lazy
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView

urlpatterns = [
    # Browsers ask every site for /favicon.ico: a redirect to the static file, resolved per
    # request (its hashed, long-cached name in production).
    path("favicon.ico", RedirectView.as_view(url=lazy(static, str)("favicon.ico"))),
    path("", include("apps.ops.urls")),  # the system and usage pages (admin/...), /metrics
    path("admin/", admin.site.urls),
    path("i18n/", include("django.conf.urls.i18n")),
    path("", include("apps.accounts.urls")),
    path("", include("apps.gateway.urls")),
    path("", include("apps.rtc.urls")),
    path("", include("apps.storage.urls")),  # /api/credentials/temporary, /api/presigned-url, /s3/
    path("", include("apps.attachments.urls")),
    path("", include("apps.memory.urls")),
    path("api/schema/", SpectacularAPIView.as_view(permission_classes=[]), name="schema"),
]

handler500 = "rtcagent.api_errors.server_error"
