from django.apps import AppConfig


class RtcConfig(AppConfig):
    name = "apps.rtc"
    label = "rtc"
    default_auto_field = "django.db.models.BigAutoField"
