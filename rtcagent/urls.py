"""HTTP routes (protocol.md §2)."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("i18n/", include("django.conf.urls.i18n")),
    path("", include("apps.accounts.urls")),
    path("", include("apps.gateway.urls")),
    path("", include("apps.rtc.urls")),
    path("api/schema/", SpectacularAPIView.as_view(permission_classes=[]), name="schema"),
]

handler500 = "rtcagent.api_errors.server_error"
