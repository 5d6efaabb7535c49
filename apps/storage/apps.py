from django.apps import AppConfig


class StorageConfig(AppConfig):
    name = "apps.storage"
    label = "storage"
    verbose_name = "Object storage"
    default_auto_field = "django.db.models.BigAutoField"
