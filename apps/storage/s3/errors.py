"""S3 errors: one exception class with S3's code, message and HTTP status, and the mapping from
the errors of the layers below (signatures, credentials, limits, the store) in one place."""

from __future__ import annotations

from collections.abc import Mapping

from ..base import StoreError
from ..credentials import CredentialRefused
from ..limits import LimitError
from ..sigv4 import SignatureError


class S3Error(Exception):
    """An answer in S3's XML error format. ``detail``: extra elements of the error body."""

    def __init__(
        self, code: str, message: str, status: int = 400, *,
        detail: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status
        self.detail: dict[str, str] = dict(detail or {})


def as_s3_error(exc: BaseException) -> S3Error | None:
    """The S3 error of an exception raised below the view, or None for an unexpected one."""
    if isinstance(exc, S3Error):
        return exc
    if isinstance(exc, SignatureError):
        return S3Error(exc.code, exc.message, exc.status, detail=exc.detail)
    if isinstance(exc, CredentialRefused | LimitError):
        return S3Error(exc.code, exc.message, exc.status)
    if isinstance(exc, StoreError):
        return S3Error(exc.code, str(exc) or exc.code, exc.status)
    return None


def access_denied(message: str = "Access Denied") -> S3Error:
    return S3Error("AccessDenied", message, 403)


def not_implemented(what: str) -> S3Error:
    return S3Error("NotImplemented",
                   f"A header or query you provided implies functionality that is not "
                   f"implemented: {what}.", 501)


def invalid_argument(message: str, *, name: str | None = None,
                     value: str | None = None) -> S3Error:
    detail = {"ArgumentName": name, "ArgumentValue": value or ""} if name else None
    return S3Error("InvalidArgument", message, 400, detail=detail)


def no_such_bucket(bucket: str) -> S3Error:
    return S3Error("NoSuchBucket", "The specified bucket does not exist", 404,
                   detail={"BucketName": bucket})


def malformed_xml() -> S3Error:
    return S3Error("MalformedXML", "The XML you provided was not well-formed or did not validate "
                   "against our published schema.", 400)
