from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "apps.sessions"
    label = "agent_sessions"
    default_auto_field = "django.db.models.BigAutoField"
