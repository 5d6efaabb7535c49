from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class GatewayConfig(AppConfig):
    name = "apps.gateway"
    label = "gateway"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Each app's rpc.py registers its namespace; duplicates raise here, at start-up.
        autodiscover_modules("rpc")
