from django.apps import AppConfig


class TasksConfig(AppConfig):
    """Goals, loops and the todo list: the agent's work across turns (``docs/tasks.md``)."""

    name = "apps.tasks"
    label = "tasks"
    verbose_name = "Goals, loops and todos"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.turns import server_tools

        from . import serializers  # noqa: F401 - registers the ``goal`` and ``loop`` entities

        server_tools.autodiscover()
