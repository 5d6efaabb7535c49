"""The object store on an S3 service through boto3: AWS S3, MinIO, Aliyun OSS, any S3 API.

The one module of the project that imports boto3 (house rule 14). ``ENDPOINT_URL`` picks the
service (empty: AWS), ``ADDRESSING_STYLE`` path/virtual/auto (MinIO usually wants ``path``,
Aliyun OSS ``virtual``), ``REGION`` the signing region. Without ``ACCESS_KEY_ID`` boto3's own
chain (environment, instance role) finds the credentials.

- Timeouts on connect and read; botocore's ``standard`` retry mode retries only transient
  failures (throttling, 5xx, dropped connections), a few times with jittered backoff.
- Checksums only when the operation requires them: boto3 >= 1.36 otherwise adds CRC32
  trailers that MinIO and Aliyun OSS versions in the field refuse. Integrity is kept by
  Content-MD5 on every put and part instead.
- A body is spooled (in memory up to 8 MiB, then a temporary file) before it is sent, so a
  body whose reader raises (a bad signature found at EOF) never reaches the bucket, a retry
  can resend it, and its MD5 is known first.
- Errors become the ``StoreError`` classes of ``base``; a missing bucket, refused credentials
  and an unreachable endpoint are ``StoreUnavailable``.
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, BinaryIO

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from ..base import (
    CHUNK_SIZE,
    BadDigest,
    DeleteFailure,
    EntityTooSmall,
    InvalidArgument,
    InvalidPart,
    InvalidPartOrder,
    InvalidRange,
    ListPage,
    NoSuchKey,
    NoSuchUpload,
    ObjectBody,
    ObjectInfo,
    ObjectStore,
    PartInfo,
    StoreError,
    StoreUnavailable,
    check_key,
)
from .common import (
    DEFAULT_CONTENT_TYPE,
    check_completion,
    check_part_number,
    check_range,
    clean_metadata,
    copy_body,
    normalize_etag,
)

SPOOL_MEMORY = 8 * 1024 * 1024
CONNECT_TIMEOUT = 5
READ_TIMEOUT = 60
HEALTH_TIMEOUT = 3
MAX_ATTEMPTS = 3
MAX_POOL = 32  # Daphne's sync views and the worker's loaders share one client
_MAX_DELETE = 1000  # DeleteObjects takes at most this many keys

_ERRORS: dict[str, type[StoreError]] = {
    "NoSuchKey": NoSuchKey,
    "404": NoSuchKey,  # HEAD answers have no body, hence no code
    "NotFound": NoSuchKey,
    "NoSuchUpload": NoSuchUpload,
    "InvalidPart": InvalidPart,
    "InvalidPartOrder": InvalidPartOrder,
    "InvalidRange": InvalidRange,
    "BadDigest": BadDigest,
    "InvalidDigest": BadDigest,
    "EntityTooSmall": EntityTooSmall,
    "InvalidArgument": InvalidArgument,
    # The bucket or our own credentials: the store as a whole is out of service.
    "NoSuchBucket": StoreUnavailable,
    "AccessDenied": StoreUnavailable,
    "AllAccessDisabled": StoreUnavailable,
    "InvalidAccessKeyId": StoreUnavailable,
    "SignatureDoesNotMatch": StoreUnavailable,
    "ExpiredToken": StoreUnavailable,
    "InvalidToken": StoreUnavailable,
    "AuthorizationHeaderMalformed": StoreUnavailable,
    "PermanentRedirect": StoreUnavailable,
    "ServiceUnavailable": StoreUnavailable,
    "SlowDown": StoreUnavailable,
    "InternalError": StoreUnavailable,
}


def _translate(exc: Exception, what: str) -> StoreError:
    """The ``StoreError`` for a boto3/botocore exception."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or "")
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 500)
        message = str(error.get("Message") or code or "error")
        cls = _ERRORS.get(code)
        if cls is None and status in (401, 403):
            cls = StoreUnavailable
        if cls is not None:
            return cls(f"{what}: {message}")
        other = StoreError(f"{what}: {message}")
        other.code, other.status = code or "InternalError", status
        return other
    # BotoCoreError: no connection, a timeout, no credentials, a broken stream.
    return StoreUnavailable(f"{what}: {type(exc).__name__}")


def _etag(value: str) -> str:
    return normalize_etag(value or "")


def _spool(
    body: BinaryIO | bytes, length: int | None, content_md5: str | None
) -> tuple[Any, int, str]:
    """The whole body in a spooled temporary file, rewound: (file, size, base64 MD5)."""
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)
    try:
        size, hex_md5 = copy_body(body, length, spool.write, content_md5)
        spool.seek(0)
    except BaseException:
        spool.close()
        raise
    return spool, size, base64.b64encode(bytes.fromhex(hex_md5)).decode()


class _BodyChunks(Iterator[bytes]):
    """A response body read ``CHUNK_SIZE`` at a time; errors while streaming are StoreErrors,
    and ``close`` releases the connection."""

    def __init__(self, body: Any) -> None:
        self._body = body
        self._chunks = body.iter_chunks(CHUNK_SIZE)

    def __next__(self) -> bytes:
        try:
            return next(self._chunks)
        except StopIteration:
            self.close()
            raise
        except (BotoCoreError, OSError) as exc:
            self.close()
            raise StoreUnavailable(f"reading an object: {type(exc).__name__}") from exc

    def close(self) -> None:
        self._body.close()


def _content_range(value: str | None) -> tuple[int, int] | None:
    """(first byte, total size) of a ``Content-Range: bytes a-b/total`` header."""
    if not value or not value.startswith("bytes "):
        return None
    span, _, total = value[6:].partition("/")
    return int(span.partition("-")[0]), int(total)


class S3Store(ObjectStore):
    name = "s3"

    def __init__(
        self,
        *,
        bucket: str,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        addressing_style: str = "auto",
    ) -> None:
        if not bucket:
            raise ValueError("RTC_OBJECT_STORE: the s3 backend needs BUCKET")
        self.bucket = bucket
        session = boto3.session.Session(
            aws_access_key_id=access_key_id or None,
            aws_secret_access_key=secret_access_key or None,
            region_name=region or "us-east-1",
        )

        def client(timeout: float, attempts: int) -> Any:
            config = Config(
                connect_timeout=min(timeout, CONNECT_TIMEOUT),
                read_timeout=timeout,
                retries={"mode": "standard", "max_attempts": attempts},
                s3={"addressing_style": addressing_style or "auto"},
                signature_version="s3v4",
                max_pool_connections=MAX_POOL,
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            )
            return session.client("s3", endpoint_url=endpoint_url or None, config=config)

        self._client = client(READ_TIMEOUT, MAX_ATTEMPTS)
        # The readiness probe must answer fast: one attempt, short timeouts.
        self._probe = client(HEALTH_TIMEOUT, 1)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> S3Store:
        return cls(
            bucket=config.get("BUCKET") or "",
            endpoint_url=config.get("ENDPOINT_URL"),
            region=config.get("REGION"),
            access_key_id=config.get("ACCESS_KEY_ID"),
            secret_access_key=config.get("SECRET_ACCESS_KEY"),
            addressing_style=config.get("ADDRESSING_STYLE") or "auto",
        )

    def _call(self, operation: str, what: str, **params: Any) -> Any:
        try:
            return getattr(self._client, operation)(Bucket=self.bucket, **params)
        except (ClientError, BotoCoreError) as exc:
            raise _translate(exc, what) from exc

    # --- objects ---------------------------------------------------------------------------
    def put(
        self,
        key: str,
        body: BinaryIO | bytes,
        *,
        length: int | None = None,
        content_type: str | None = None,
        metadata: dict[str, str] | None = None,
        content_md5: str | None = None,
    ) -> ObjectInfo:
        check_key(key)
        meta = clean_metadata(metadata)
        spool, size, md5 = _spool(body, length, content_md5)
        with spool:
            answer = self._call(
                "put_object", f"put {key!r}", Key=key, Body=spool, ContentLength=size,
                ContentMD5=md5, ContentType=content_type or DEFAULT_CONTENT_TYPE, Metadata=meta,
            )
        return ObjectInfo(
            key=key,
            size=size,
            etag=_etag(answer.get("ETag", "")),
            last_modified=datetime.now(UTC),
            content_type=content_type or DEFAULT_CONTENT_TYPE,
            metadata=meta,
        )

    @staticmethod
    def _info(key: str, answer: dict[str, Any], size: int) -> ObjectInfo:
        return ObjectInfo(
            key=key,
            size=size,
            etag=_etag(answer.get("ETag", "")),
            last_modified=answer["LastModified"].astimezone(UTC),
            content_type=answer.get("ContentType") or DEFAULT_CONTENT_TYPE,
            metadata=dict(answer.get("Metadata") or {}),
        )

    def get(self, key: str, *, start: int | None = None, end: int | None = None) -> ObjectBody:
        check_key(key)
        check_range(start, end)
        params: dict[str, Any] = {"Key": key}
        if start is not None or end is not None:
            first = "" if start is None else str(start)
            last = "" if end is None else str(end)
            params["Range"] = f"bytes={first}-{last}"
        answer = self._call("get_object", f"get {key!r}", **params)
        length = int(answer["ContentLength"])
        span = _content_range(answer.get("ContentRange"))
        first_byte, size = span if span else (0, length)
        return ObjectBody(
            info=self._info(key, answer, size),
            start=first_byte,
            length=length,
            chunks=_BodyChunks(answer["Body"]),
        )

    def head(self, key: str) -> ObjectInfo:
        check_key(key)
        answer = self._call("head_object", f"head {key!r}", Key=key)
        return self._info(key, answer, int(answer["ContentLength"]))

    def delete(self, key: str) -> None:
        check_key(key)
        self._call("delete_object", f"delete {key!r}", Key=key)

    def delete_many(self, keys: Iterable[str]) -> list[DeleteFailure]:
        failures: list[DeleteFailure] = []
        batch: list[str] = []

        def flush() -> None:
            answer = self._call(
                "delete_objects", "delete objects",
                Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
            )
            for error in answer.get("Errors") or []:
                failures.append(DeleteFailure(
                    error.get("Key", ""), error.get("Code", "InternalError"),
                    error.get("Message", ""),
                ))
            batch.clear()

        for key in keys:
            try:
                check_key(key)
            except StoreError as exc:
                failures.append(DeleteFailure(key, exc.code, str(exc)))
                continue
            batch.append(key)
            if len(batch) == _MAX_DELETE:
                flush()
        if batch:
            flush()
        return failures

    def list(
        self,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        max_keys: int = 1000,
        continuation_token: str | None = None,
        start_after: str | None = None,
    ) -> ListPage:
        params: dict[str, Any] = {"Prefix": prefix, "MaxKeys": max(0, min(int(max_keys), 1000))}
        if delimiter:
            params["Delimiter"] = delimiter
        if continuation_token:
            params["ContinuationToken"] = continuation_token
        elif start_after:
            params["StartAfter"] = start_after
        answer = self._call("list_objects_v2", f"list {prefix!r}", **params)
        objects = [
            ObjectInfo(
                key=o["Key"],
                size=int(o["Size"]),
                etag=_etag(o.get("ETag", "")),
                last_modified=o["LastModified"].astimezone(UTC),
            )
            for o in answer.get("Contents") or []
        ]
        prefixes = [p["Prefix"] for p in answer.get("CommonPrefixes") or []]
        truncated = bool(answer.get("IsTruncated"))
        token = answer.get("NextContinuationToken") if truncated else None
        return ListPage(objects, prefixes, truncated, token)

    def copy(
        self,
        source_key: str,
        dest_key: str,
        *,
        metadata: dict[str, str] | None = None,
        content_type: str | None = None,
    ) -> ObjectInfo:
        check_key(source_key)
        check_key(dest_key)
        params: dict[str, Any] = {
            "Key": dest_key,
            "CopySource": {"Bucket": self.bucket, "Key": source_key},
        }
        # S3 refuses to copy an object onto itself unchanged; REPLACE with its own values is
        # the documented way (the local folder allows it, and the two must agree).
        if metadata is not None or content_type is not None or source_key == dest_key:
            # REPLACE takes both from the request: keep the source's for what was not given.
            if metadata is None or content_type is None:
                source = self.head(source_key)
                metadata = source.metadata if metadata is None else metadata
                content_type = content_type or source.content_type
            params.update(MetadataDirective="REPLACE", ContentType=content_type,
                          Metadata=clean_metadata(metadata))
        self._call("copy_object", f"copy {source_key!r} to {dest_key!r}", **params)
        return self.head(dest_key)

    # --- multipart -------------------------------------------------------------------------
    def create_multipart(
        self, key: str, *, content_type: str | None = None, metadata: dict[str, str] | None = None
    ) -> str:
        check_key(key)
        answer = self._call(
            "create_multipart_upload", f"start an upload of {key!r}", Key=key,
            ContentType=content_type or DEFAULT_CONTENT_TYPE, Metadata=clean_metadata(metadata),
        )
        return str(answer["UploadId"])

    def upload_part(
        self, key: str, upload_id: str, part_number: int, body: BinaryIO | bytes,
        *, length: int | None = None,
    ) -> str:
        check_key(key)
        check_part_number(part_number)
        spool, size, md5 = _spool(body, length, None)
        with spool:
            answer = self._call(
                "upload_part", f"upload part {part_number} of {key!r}", Key=key,
                UploadId=upload_id, PartNumber=part_number, Body=spool, ContentLength=size,
                ContentMD5=md5,
            )
        return _etag(answer["ETag"])

    def complete_multipart(
        self, key: str, upload_id: str, parts: list[tuple[int, str]]
    ) -> ObjectInfo:
        check_key(key)
        wanted = check_completion(parts)
        self._call(
            "complete_multipart_upload", f"complete the upload of {key!r}", Key=key,
            UploadId=upload_id,
            MultipartUpload={"Parts": [{"PartNumber": n, "ETag": f'"{e}"'} for n, e in wanted]},
        )
        return self.head(key)

    def abort_multipart(self, key: str, upload_id: str) -> None:
        check_key(key)
        self._call("abort_multipart_upload", f"abort the upload of {key!r}", Key=key,
                   UploadId=upload_id)

    def list_parts(self, key: str, upload_id: str) -> list[PartInfo]:
        check_key(key)
        parts: list[PartInfo] = []
        marker = 0
        while True:
            answer = self._call("list_parts", f"list the parts of {key!r}", Key=key,
                                UploadId=upload_id, PartNumberMarker=marker)
            parts += [
                PartInfo(int(p["PartNumber"]), _etag(p["ETag"]), int(p["Size"]),
                         p["LastModified"].astimezone(UTC))
                for p in answer.get("Parts") or []
            ]
            if not answer.get("IsTruncated"):
                return parts
            marker = int(answer["NextPartNumberMarker"])

    # --- URLs and lifecycle ----------------------------------------------------------------
    def presign_get(self, key: str, *, expires_in: int) -> str:
        check_key(key)
        return str(self._client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_in,
        ))

    def presign_put(
        self, key: str, *, expires_in: int, content_type: str | None = None
    ) -> str:
        check_key(key)
        params = {"Bucket": self.bucket, "Key": key}
        if content_type:
            params["ContentType"] = content_type  # signed: the PUT must send the same type
        return str(self._client.generate_presigned_url(
            "put_object", Params=params, ExpiresIn=expires_in,
        ))

    def health(self) -> None:
        try:
            self._probe.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            raise StoreUnavailable(
                f"bucket {self.bucket!r}: {exc.response.get('Error', {}).get('Code') or 'error'}"
            ) from exc
        except BotoCoreError as exc:
            raise StoreUnavailable(f"bucket {self.bucket!r}: {type(exc).__name__}") from exc

    def close(self) -> None:
        self._client.close()
        self._probe.close()
