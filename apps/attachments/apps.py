from django.apps import AppConfig


class AttachmentsConfig(AppConfig):
    name = "apps.attachments"
    label = "attachments"
    verbose_name = "Attachments"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import serializers  # noqa: F401 - registers the ``file`` Update entity
