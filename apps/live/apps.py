from django.apps import AppConfig


class LiveConfig(AppConfig):
    """Live calls: realtime channels and the rtchild agents that answer them (``docs/live.md``)."""

    name = "apps.live"
    label = "live"
    verbose_name = "Live calls"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.turns import server_tools

        server_tools.autodiscover()
