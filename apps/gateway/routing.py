from django.urls import path

from .consumer import GatewayConsumer

websocket_urlpatterns = [
    path("connection/websocket", GatewayConsumer.as_asgi()),
]
