"""HTTP routes of apps.storage."""

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
