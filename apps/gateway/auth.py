"""Connection authentication: the access JWT of ``connect`` and ``refresh``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Identity:
    user_id: int
    exp: float  # 0 when the token does not expire
    device_id: str = ""
    iat: float = 0.0  # when the token was issued (checked against the user's revocation)
    fid: str | None = None  # the refresh-token family (claim ``fid``), None for tokens without


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
        sub = claims["sub"]
        if not isinstance(sub, str | int) or isinstance(sub, bool):
            raise TypeError("sub")
        user_id = int(sub)
        if user_id <= 0 or user_id > 2**63 - 1:
            raise ValueError("sub")
        iat = float(claims.get("iat") or 0)
        fid = claims.get("fid")
        if fid is not None and not isinstance(fid, str):
            raise TypeError("fid")
    except TokenExpired:
        raise TokenRejected(expired=True) from None
    except (TokenInvalid, KeyError, TypeError, ValueError):
        raise TokenRejected(expired=False) from None
    return Identity(
        user_id=user_id,
        exp=float(claims.get("exp") or 0),
        device_id=str(claims.get("device_id") or ""),
        iat=iat,
        fid=fid,
    )


def identity_valid(identity: Identity) -> bool:
    """The token's user still exists, is active and has not revoked the token, and the token's
    refresh-token family (logout, reuse, RFC 7009) is not revoked (one read). The consumer asks
    this at connect, refresh and every ping tick, which is how a revoked family's sockets close
    (3500) while the user's other families keep theirs."""
    from apps.accounts.selectors import user_token_valid

    return user_token_valid(
        user_id=identity.user_id, issued_at=identity.iat, family_id=identity.fid
    )


def identities_valid(identities: list[Identity]) -> list[bool]:
    """``identity_valid`` for many connections at once, in two reads whatever their number (the
    process-wide tick of ``apps.gateway.ticks``). The same rule as
    ``apps.accounts.selectors.user_token_valid``: the user exists and is active, the token was
    issued at or after ``tokens_valid_after``, and its family (when it names one) is the user's
    and not revoked; a family id that is not a UUID is refused."""
    import uuid

    from django.contrib.auth import get_user_model

    from apps.accounts.models import TokenFamily

    if not identities:
        return []
    users = dict(get_user_model().objects.filter(
        pk__in={i.user_id for i in identities}, is_active=True
    ).values_list("pk", "tokens_valid_after"))
    fids: dict[str, uuid.UUID | None] = {}
    for i in identities:
        if i.fid is not None and i.fid not in fids:
            try:
                fids[i.fid] = uuid.UUID(i.fid)
            except (TypeError, ValueError, AttributeError):
                fids[i.fid] = None
    wanted = {f for f in fids.values() if f is not None}
    live = dict(TokenFamily.objects.filter(pk__in=wanted, revoked_at__isnull=True)
                .values_list("pk", "user_id")) if wanted else {}
    out = []
    for i in identities:
        ok = i.user_id in users
        if ok and i.fid is not None:
            fid = fids[i.fid]
            ok = fid is not None and live.get(fid) == i.user_id
        if ok and users[i.user_id] is not None:
            ok = i.iat >= users[i.user_id].timestamp()
        out.append(ok)
    return out
