"""DRF authentication: simplejwt's, plus the checks every entry point shares (a ``sub`` that is a
user id, an active user, a token not revoked by ``user_revoke_tokens``, and the token's
refresh-token family ``fid``, when it has one, not revoked by logout, reuse or RFC 7009)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.contrib.rest_framework_simplejwt import SimpleJWTScheme
from rest_framework_simplejwt.authentication import JWTAuthentication
from rest_framework_simplejwt.exceptions import AuthenticationFailed, InvalidToken

from .selectors import user_token_valid
from .tokens import FAMILY_CLAIM


class RevocableJWTAuthentication(JWTAuthentication):
    def get_user(self, validated_token: Any) -> Any:
        user = super().get_user(validated_token)
        try:
            issued_at = float(validated_token.get("iat") or 0)
        except (TypeError, ValueError):
            raise InvalidToken("token has a bad iat") from None
        if not user_token_valid(
            user_id=user.pk, issued_at=issued_at, family_id=validated_token.get(FAMILY_CLAIM)
        ):
            raise AuthenticationFailed("token revoked or user inactive", code="token_revoked")
        return user


class RevocableJWTScheme(SimpleJWTScheme):
    """The OpenAPI description: the same bearer JWT as simplejwt's (``drf-spectacular``
    matches authenticators by exact class)."""

    target_class = "apps.accounts.authentication.RevocableJWTAuthentication"
