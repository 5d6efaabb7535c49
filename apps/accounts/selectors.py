"""Reads about accounts shared by every entry point (HTTP, the gateway, refresh)."""

from __future__ import annotations

from django.contrib.auth import get_user_model


def user_token_valid(*, user_id: int, issued_at: float) -> bool:
    """The user exists, is active, and a token issued at ``issued_at`` (``iat``, epoch seconds)
    was not revoked (``tokens_valid_after``). One indexed read."""
    row = (
        get_user_model()
        .objects.filter(pk=user_id, is_active=True)
        .values_list("pk", "tokens_valid_after")
        .first()
    )
    if row is None:
        return False
    valid_after = row[1]
    return valid_after is None or issued_at >= valid_after.timestamp()
