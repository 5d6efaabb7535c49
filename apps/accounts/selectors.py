"""Reads about accounts shared by every entry point (HTTP, the gateway, refresh)."""

from __future__ import annotations

import uuid

from django.contrib.auth import get_user_model
from django.db.models import Exists, OuterRef

from .models import TokenFamily


def user_token_valid(*, user_id: int, issued_at: float, family_id: object = None) -> bool:
    """The user exists, is active, a token issued at ``issued_at`` (``iat``, epoch seconds)
    was not revoked (``tokens_valid_after``) and, when the token names a refresh-token family
    (its ``fid`` claim, as found in the token: ``None`` when absent), that family belongs to the
    user and is not revoked; a ``fid`` that is not a UUID string is refused. One indexed read."""
    users = get_user_model().objects.filter(pk=user_id, is_active=True)
    if family_id is not None:
        try:
            fid = family_id if isinstance(family_id, uuid.UUID) else uuid.UUID(family_id)  # type: ignore[arg-type]
        except (TypeError, ValueError, AttributeError):
            return False
        live = TokenFamily.objects.filter(pk=fid, user_id=OuterRef("pk"), revoked_at__isnull=True)
        users = users.filter(Exists(live))
    row = users.values_list("pk", "tokens_valid_after").first()
    if row is None:
        return False
    valid_after = row[1]
    return valid_after is None or issued_at >= valid_after.timestamp()
