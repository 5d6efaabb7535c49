"""HTTP routes of apps.memory (``views``), included at the site root."""

from django.urls import path

from . import views

urlpatterns = [
    path("api/memories", views.MemoryListView.as_view(), name="memory-list"),
    path("api/memories/export", views.MemoryExportView.as_view(), name="memory-export"),
    path("api/memories/<str:memory_id>", views.MemoryDetailView.as_view(), name="memory-detail"),
    path("api/sessions/<str:session_id>/memories", views.SessionMemoriesView.as_view(),
         name="session-memories"),
]
