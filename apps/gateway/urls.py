from django.urls import include, path

from . import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("", include("apps.gateway.widget_views")),  # the <rtc-agent> demo page and staff token
]
