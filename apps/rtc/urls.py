from django.urls import path

from .views import RtcResultView

urlpatterns = [
    path("api/rtc/<uuid:rtc_id>/result", RtcResultView.as_view(), name="rtc-result"),
]
