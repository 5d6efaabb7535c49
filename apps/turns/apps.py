from django.apps import AppConfig


class TurnsConfig(AppConfig):
    name = "apps.turns"
    label = "turns"
    default_auto_field = "django.db.models.BigAutoField"
