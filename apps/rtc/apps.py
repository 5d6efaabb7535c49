from django.apps import AppConfig


class RtcConfig(AppConfig):
    name = "apps.rtc"
    label = "rtc"
    verbose_name = "Remote tool calls"
    default_auto_field = "django.db.models.BigAutoField"
