from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "apps.sessions"
    label = "agent_sessions"
    verbose_name = "Sessions"
    default_auto_field = "django.db.models.BigAutoField"
