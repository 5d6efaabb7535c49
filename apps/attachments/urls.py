"""HTTP routes of apps.attachments."""

from django.urls import path

from .views import FileThumbnailView

urlpatterns = [
    path("api/files/<uuid:file_id>/thumbnail", FileThumbnailView.as_view(),
         name="file-thumbnail"),
]
