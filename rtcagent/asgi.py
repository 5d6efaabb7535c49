"""ASGI entry point: HTTP through Django, WebSocket ``/connection/websocket`` through Channels."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rtcagent.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from apps.gateway.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # The Origin check lives in the consumer: it must answer with a protocol-level close
        # (never an HTTP 403 at the handshake, which the official clients retry forever).
        "websocket": URLRouter(websocket_urlpatterns),
    }
)
