from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class GatewayConfig(AppConfig):
    name = "apps.gateway"
    label = "gateway"
    verbose_name = "Gateway"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Each app's rpc.py registers its namespace; duplicates raise here, at start-up.
        autodiscover_modules("rpc")

        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete, post_save

        from . import signals

        user = get_user_model()
        post_save.connect(signals.user_saved, sender=user, dispatch_uid="gateway.user_saved")
        post_delete.connect(signals.user_deleted, sender=user, dispatch_uid="gateway.user_deleted")
