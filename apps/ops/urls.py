"""Routes of the operator console's pages (inside /admin/, before the admin's catch-all) and
/metrics."""

from django.urls import path

from . import views

urlpatterns = [
    path("admin/system/", views.system, name="ops_system"),
    path("admin/usage/", views.usage, name="ops_usage"),
    path("metrics", views.metrics_view, name="metrics"),
]
