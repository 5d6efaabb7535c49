from django.apps import AppConfig


class TurnsConfig(AppConfig):
    name = "apps.turns"
    label = "turns"
    verbose_name = "Turns"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from apps.turns import checks  # noqa: F401 - registers the Redis eviction check
        from apps.turns.warmup import warm_connection

        connection_created.connect(warm_connection, dispatch_uid="rtcagent.warm_connection")
