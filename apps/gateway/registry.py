"""The RPC registry: method name -> handler.

Each app owns one ``rpc.py`` module per namespace and registers its handlers with
``@rpc("v1.x.y")``; ``GatewayConfig.ready()`` imports every app's ``rpc`` module, and a
duplicate name fails at start-up.

A handler is a *synchronous* function ``(ctx, params) -> dict`` that turns params into one service
call and the result into plain JSON-able data. The consumer runs it in one
``database_sync_to_async`` hop, so a handler may use the ORM and transactions freely. Params
arrive as the decoded ``data`` of the rpc command (``None`` becomes ``{}``); a handler validates
them (DRF serializers via ``apps.gateway.params.validate``) and raises ``rtcagent.errors`` classes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rtcagent.errors import MethodNotFound


@dataclass(frozen=True)
class RpcContext:
    """Who is calling: the authenticated user and the connection/device it came from."""

    user_id: int
    client: str = ""  # connection id; "http" for the HTTP twins
    device_id: str = ""


Handler = Callable[[RpcContext, dict[str, Any]], Any]
_registry: dict[str, Handler] = {}


def rpc(name: str) -> Callable[[Handler], Handler]:
    """Register ``func`` as the handler of RPC method ``name``."""

    def decorator(func: Handler) -> Handler:
        if name in _registry and _registry[name] is not func:
            raise RuntimeError(f"RPC method {name!r} registered twice")
        _registry[name] = func
        return func

    return decorator


def get_handler(name: str) -> Handler:
    try:
        return _registry[name]
    except KeyError:
        raise MethodNotFound(f"unknown method {name!r}") from None


def methods() -> list[str]:
    return sorted(_registry)
