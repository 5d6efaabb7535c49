"""The one Django view behind ``/s3/``: parse, authenticate, count, dispatch, answer in S3's
format. Every failure, unknown operations and buckets included, is an S3 XML error with a
request id; nothing secret (signatures, secrets, session tokens, the query) is ever logged."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from ..limits import rate_check
from ..store import get_store
from . import listing, multipart, objects
from .auth import authenticate
from .errors import S3Error, as_s3_error, no_such_bucket
from .http import Ctx, error_response
from .request import parse_request, raw_target

log = logging.getLogger(__name__)

HANDLERS: dict[str, Callable[[Ctx], HttpResponseBase]] = {
    "ListBuckets": listing.list_buckets,
    "HeadBucket": listing.head_bucket,
    "GetBucketLocation": listing.get_bucket_location,
    "ListObjectsV2": listing.list_objects_v2,
    "ListObjects": listing.list_objects_v1,
    "DeleteObjects": listing.delete_objects,
    "PutObject": objects.put_object,
    "GetObject": objects.get_object,
    "HeadObject": objects.head_object,
    "DeleteObject": objects.delete_object,
    "CopyObject": objects.copy_object,
    "CreateMultipartUpload": multipart.create_multipart,
    "UploadPart": multipart.upload_part,
    "CompleteMultipartUpload": multipart.complete_multipart,
    "AbortMultipartUpload": multipart.abort_multipart,
    "ListParts": multipart.list_parts,
}


@csrf_exempt
def s3_endpoint(request: HttpRequest) -> HttpResponseBase:
    request_id = secrets.token_hex(8).upper()
    operation, user_id = "unknown", None
    try:
        req = parse_request(request)
        operation = req.operation
        caller = authenticate(req, now=timezone.now())
        user_id = caller.principal.user_id
        if user_id is not None:
            rate_check(user_id)
        if req.bucket is not None and req.bucket != settings.RTC_S3_BUCKET:
            raise no_such_bucket(req.bucket)
        ctx = Ctx(req, caller, get_store(), request, timezone.now())
        response = HANDLERS[operation](ctx)
    except Exception as exc:
        err = as_s3_error(exc)
        if err is None:
            log.exception("s3 %s failed (user %s, request %s)", operation, user_id, request_id)
            err = S3Error("InternalError",
                          "We encountered an internal error. Please try again.", 500)
        elif err.status >= 500:
            log.warning("s3 %s: %s %s (user %s, request %s)", operation, err.status, err.code,
                        user_id, request_id)
        else:
            log.info("s3 %s refused: %s %s (user %s, request %s)", operation, err.status,
                     err.code, user_id, request_id)
        response = error_response(err, resource=raw_target(request)[0], request_id=request_id,
                                  head=request.method == "HEAD")
    response["x-amz-request-id"] = request_id
    response["x-amz-id-2"] = request_id
    return response
