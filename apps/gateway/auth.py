"""Connection authentication: the access JWT of ``connect`` and ``refresh``."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model


@dataclass(frozen=True)
class Identity:
    user_id: int
    exp: float  # 0 when the token does not expire
    device_id: str = ""


class TokenRejected(Exception):
    def __init__(self, *, expired: bool) -> None:
        self.expired = expired
        super().__init__("token expired" if expired else "invalid token")


def authenticate(token: object) -> Identity:
    """Verify an access token (no database access); raise ``TokenRejected``."""
    from apps.accounts.tokens import TokenExpired, TokenInvalid, decode_access_token

    if not isinstance(token, str) or not token:
        raise TokenRejected(expired=False)
    try:
        claims = decode_access_token(token)
        user_id = int(claims["sub"])
    except TokenExpired:
        raise TokenRejected(expired=True) from None
    except (TokenInvalid, KeyError, TypeError, ValueError):
        raise TokenRejected(expired=False) from None
    return Identity(
        user_id=user_id,
        exp=float(claims.get("exp") or 0),
        device_id=str(claims.get("device_id") or ""),
    )


def user_is_active(user_id: int) -> bool:
    return get_user_model().objects.filter(pk=user_id, is_active=True).exists()
