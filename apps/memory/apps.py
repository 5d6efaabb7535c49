from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "apps.memory"
    label = "memory"
    verbose_name = "Memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Each app's tools.py registers its server tools (apps.turns.server_tools); a name taken
        # twice raises here, at start-up.
        from apps.turns import server_tools

        server_tools.autodiscover()
