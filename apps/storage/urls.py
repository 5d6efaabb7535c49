"""HTTP routes of apps.storage, included at the site root: the two JSON APIs and every path
under ``/s3`` (one view: S3 names its operations by method, path and query)."""

from django.urls import path, re_path

from . import views
from .s3.views import s3_endpoint

urlpatterns = [
    path("api/credentials/temporary", views.TemporaryCredentialsView.as_view(),
         name="credentials-temporary"),
    path("api/credentials/revoke", views.RevokeCredentialsView.as_view(),
         name="credentials-revoke"),
    path("api/presigned-url", views.PresignedUrlView.as_view(), name="presigned-url"),
    re_path(r"^s3(?:/[\s\S]*)?$", s3_endpoint, name="s3"),
]
