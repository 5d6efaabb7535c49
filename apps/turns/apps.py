from django.apps import AppConfig


class TurnsConfig(AppConfig):
    name = "apps.turns"
    label = "turns"
    verbose_name = "Turns"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.turns import checks  # noqa: F401 - registers the Redis eviction check
