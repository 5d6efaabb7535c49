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
