"""Who sent a ``/s3/`` request and what it may touch.

Order, as S3: parse the signature (no secret needed), find the credential (unknown:
``InvalidAccessKeyId``), verify the signature with its derived secret, and only then tell its
holder that the credential expired or was revoked (``credentials.credential_check``). Server-held
credentials (presign, service) are honoured only in the query form for a GET, HEAD or PUT of one
object. Every key a request names must pass the key rules and lie under the principal's prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from rtcagent.conf import rtc_setting

from .. import sigv4
from ..credentials import (
    Principal,
    check_key,
    credential_check,
    credential_lookup,
    credential_secret,
    key_in_prefix,
)
from ..presign import REGION
from .errors import S3Error, access_denied
from .request import S3Request

_SERVER_HELD_OPERATIONS = frozenset({"GetObject", "HeadObject", "PutObject"})


@dataclass(frozen=True)
class Caller:
    principal: Principal
    signed: sigv4.SignedRequest
    signing_key: bytes


def authenticate(req: S3Request, *, now: datetime) -> Caller:
    signed = sigv4.parse(req.method, req.raw_path, req.raw_query, req.headers)
    record = credential_lookup(signed.access_key_id)
    if record is None:
        raise S3Error("InvalidAccessKeyId",
                      "The AWS Access Key Id you provided does not exist in our records.", 403,
                      detail={"AWSAccessKeyId": signed.access_key_id})
    key = sigv4.verify(
        signed, secret_key=credential_secret(record.access_key_id), method=req.method,
        raw_path=req.raw_path, raw_query=req.raw_query, headers=req.headers, now=now,
        max_skew=int(rtc_setting("S3_CLOCK_SKEW")), region=REGION, service="s3",
    )
    principal = credential_check(record, session_token=signed.session_token, now=now)
    if principal.kind != "client" and not (
        signed.presigned and req.operation in _SERVER_HELD_OPERATIONS
    ):
        raise access_denied("This credential only signs presigned URLs of one object.")
    return Caller(principal, signed, key)


def authorize_key(principal: Principal, key: str) -> str:
    """``key`` if the principal may name it: ``InvalidArgument`` for a key no one may name,
    ``AccessDenied`` outside the principal's prefix."""
    check_key(key)
    if not key_in_prefix(key, principal.prefix):
        raise access_denied(f"Access Denied: keys of this credential start with "
                            f"{principal.prefix}")
    return key


def authorize_prefix(principal: Principal, prefix: str) -> None:
    """A listing may only look under the principal's prefix."""
    if principal.prefix is None or not prefix.startswith(principal.prefix):
        raise access_denied(f"Access Denied: list with a prefix that starts with "
                            f"{principal.prefix}")
