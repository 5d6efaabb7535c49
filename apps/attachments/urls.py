"""HTTP routes of apps.attachments."""

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
