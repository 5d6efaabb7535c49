"""SigV4 for the /s3/ endpoint: the published vectors, botocore as a reference signer, refusals.

The generic AWS suite ("aws-sig-v4-test-suite", service ``service``) is checked with the
path-normalising switch where its normalize-path vectors need it; everything else runs the way
S3 signs (the path as sent). The S3 examples come from the S3 API reference.
"""

from __future__ import annotations

import hashlib
import io
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import boto3
import pytest
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest, AWSResponse
from botocore.config import Config
from botocore.credentials import Credentials

from apps.storage import sigv4
from apps.storage.sigv4 import SignatureError

SUITE_SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
SUITE_TIME = datetime(2015, 8, 30, 12, 36, tzinfo=UTC)
SUITE_SCOPE = "20150830/us-east-1/service/aws4_request"
SUITE_TOKEN = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"
STS_TOKEN = (
    "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPf"
    "IeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7W"
    "Z0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8F"
    "DrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA=="
)
S3_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
S3_TIME = datetime(2013, 5, 24, tzinfo=UTC)
UNRESERVED = "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
HOST = "example.amazonaws.com"
DATE = {"x-amz-date": "20150830T123600Z"}
FORM = {"content-type": "application/x-www-form-urlencoded", "content-length": "13"}
FORM_UTF8 = {
    "content-type": "application/x-www-form-urlencoded; charset=utf8",
    "content-length": "13",
}

# name, method, target, extra headers, signed headers, body, canonical query, hash of the
# canonical request (last line of the string to sign), signature.
# fmt: off
SUITE = [
    ("get-vanilla", "GET", "/", {}, "", b"", "",
     "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-vanilla-empty-query-key", "GET", "/?Param1=value1", {}, "", b"", "Param1=value1",
     "1e24db194ed7d0eec2de28d7369675a243488e08526e8c1c73571282f7c517ab",
     "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb"),
    ("get-vanilla-query-order-key", "GET", "/?Param1=value2&Param1=Value1", {}, "", b"",
     "Param1=Value1&Param1=value2",
     "704b4cef673542d84cdff252633f065e8daeba5f168b77116f8b1bcaf3d38f89",
     "eedbc4e291e521cf13422ffca22be7d2eb8146eecf653089df300a15b2382bd1"),
    ("get-vanilla-query-order-key-case", "GET", "/?Param2=value2&Param1=value1", {}, "", b"",
     "Param1=value1&Param2=value2",
     "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0",
     "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
    ("get-vanilla-query-order-value", "GET", "/?Param1=value2&Param1=value1", {}, "", b"",
     "Param1=value1&Param1=value2",
     "c968629d70850097a2d8781c9bf7edcb988b04cac14cca9be4acc3595f884606",
     "5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694"),
    ("get-vanilla-query-unreserved", "GET", f"/?{UNRESERVED}={UNRESERVED}", {}, "", b"",
     f"{UNRESERVED}={UNRESERVED}",
     "c30d4703d9f799439be92736156d47ccfb2d879ddf56f5befa6d1d6aab979177",
     "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"),
    ("get-vanilla-utf8-query", "GET", "/?\u1234=bar", {}, "", b"", "%E1%88%B4=bar",
     "eb30c5bed55734080471a834cc727ae56beb50e5f39d1bff6d0d38cb192a7073",
     "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"),
    ("get-unreserved", "GET", f"/{UNRESERVED}", {}, "", b"", "",
     "6a968768eefaa713e2a6b16b589a8ea192661f098f37349f4e2c0082757446f9",
     "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"),
    ("get-utf8", "GET", "/\u1234", {}, "", b"", "",
     "2a0a97d02205e45ce2e994789806b19270cfbbb0921b278ccf58f5249ac42102",
     "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"),
    ("get-header-value-trim", "GET", "/", {"my-header1": " value1", "my-header2": ' "a   b   c"'},
     "my-header1;my-header2", b"", "",
     "a726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7",
     "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"),
    # Repeated headers arrive joined by commas, as Django hands them over.
    ("get-header-key-duplicate", "GET", "/", {"my-header1": "value2,value2,value1"}, "my-header1",
     b"", "", "dc7f04a3abfde8d472b0ab1a418b741b7c67174dad1551b4117b15527fbe966c",
     "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"),
    ("get-header-value-order", "GET", "/", {"my-header1": "value4,value1,value3,value2"},
     "my-header1", b"", "", "31ce73cd3f3d9f66977ad3dd957dc47af14df92fcd8509f59b349e9137c58b86",
     "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01"),
    ("post-vanilla", "POST", "/", {}, "", b"", "",
     "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87",
     "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"),
    ("post-header-key-sort", "POST", "/", {"my-header1": "value1"}, "my-header1", b"", "",
     "9368318c2967cf6de74404b30c65a91e8f6253e0a8659d6d5319f1a812f87d65",
     "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c"),
    ("post-header-value-case", "POST", "/", {"my-header1": "VALUE1"}, "my-header1", b"", "",
     "d51ced243e649e3de6ef63afbbdcbca03131a21a7103a1583706a64618606a93",
     "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d"),
    ("post-vanilla-query", "POST", "/?Param1=value1", {}, "", b"", "Param1=value1",
     "9d659678c1756bb3113e2ce898845a0a79dbbc57b740555917687f1b3340fbbd",
     "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"),
    ("post-x-www-form-urlencoded", "POST", "/", FORM, "content-type", b"Param1=value1", "",
     "42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281",
     "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"),
    ("post-x-www-form-urlencoded-parameters", "POST", "/", FORM_UTF8, "content-type",
     b"Param1=value1", "", "2e1cf7ed91881a30569e46552437e4156c823447bf1781b921b5d486c568dd1c",
     "1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d39fa77a6fe"),
    ("post-sts-header-before", "POST", "/", {"x-amz-security-token": STS_TOKEN},
     "x-amz-security-token", b"", "",
     "c237e1b440d4c63c32ca95b5b99481081cb7b13c7e40434868e71567c1a882f6",
     "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead"),
    ("get-vanilla-with-session-token", "GET", "/", {"x-amz-security-token": SUITE_TOKEN},
     "x-amz-security-token", b"", "",
     "067b36aa60031588cea4a4cde1f21215227a047690c72247f1d70b32fbbfad2b",
     "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"),
]

# The normalize-path group: raw path, canonical path, signature.
NORMALIZE = [
    ("get-relative", "/example/..", "/",
     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-relative-relative", "/example1/example2/../..", "/",
     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-slash", "//", "/", "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-slash-dot-slash", "/./", "/",
     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-slash-pointless-dot", "/./example", "/example",
     "ef75d96142cf21edca26f06005da7988e4f8dc83a165a80865db7089db637ec5"),
    ("get-slashes", "//example//", "/example/",
     "9a624bd73a37c9a373b5312afbebe7a714a789de108f0bdfe846570885f57e84"),
    ("get-space", "/example space/", "/example%20space/",
     "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741"),
]
# fmt: on


def _suite_headers(extra: dict[str, str]) -> dict[str, str]:
    return {"host": HOST, **DATE, **extra}


def _signed(extra_signed: str) -> tuple[str, ...]:
    return tuple(sorted(["host", "x-amz-date", *filter(None, extra_signed.split(";"))]))


@pytest.mark.parametrize(
    ("name", "method", "target", "extra", "signed", "body", "query", "creq_hash", "signature"),
    SUITE,
    ids=[case[0] for case in SUITE],
)
def test_suite_vector_canonical_request_and_signature(
    name: str,
    method: str,
    target: str,
    extra: dict,
    signed: str,
    body: bytes,
    query: str,
    creq_hash: str,
    signature: str,
) -> None:
    path, _, raw_query = target.partition("?")
    headers = _suite_headers(extra)
    signed_headers = _signed(signed)
    creq = sigv4.canonical_request(
        method, path, raw_query, headers, signed_headers, hashlib.sha256(body).hexdigest()
    )
    lines = creq.split("\n")
    assert lines[2] == query
    assert lines[-2] == ";".join(signed_headers)
    # Both path modes agree on these vectors: none of them has a dot or empty segment.
    assert creq == sigv4.canonical_request(
        method,
        path,
        raw_query,
        headers,
        signed_headers,
        hashlib.sha256(body).hexdigest(),
        normalize_path=True,
    )
    sts = sigv4.string_to_sign("20150830T123600Z", SUITE_SCOPE, creq)
    assert sts == f"AWS4-HMAC-SHA256\n20150830T123600Z\n{SUITE_SCOPE}\n{creq_hash}"
    key = sigv4.signing_key(SUITE_SECRET, "20150830", "us-east-1", "service")
    assert sigv4.sign(key, sts) == signature


@pytest.mark.parametrize(
    ("name", "method", "target", "extra", "signed", "body", "query", "creq_hash", "signature"),
    SUITE,
    ids=[case[0] for case in SUITE],
)
def test_suite_vector_verifies_as_a_request(
    name: str,
    method: str,
    target: str,
    extra: dict,
    signed: str,
    body: bytes,
    query: str,
    creq_hash: str,
    signature: str,
) -> None:
    """parse + verify accept each vector sent as a client would: the path and query
    percent-encoded on the wire, the payload hash in x-amz-content-sha256 (unsigned there)."""
    path, _, raw_query = target.partition("?")
    wire_path = sigv4.canonical_uri(path)
    wire_query = "&".join(
        f"{quote(n, safe='-_.~')}={quote(v, safe='-_.~')}"
        for n, v in parse_qsl(raw_query, keep_blank_values=True)
    )
    headers = _suite_headers(extra)
    headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/{SUITE_SCOPE}, "
        f"SignedHeaders={';'.join(_signed(signed))}, Signature={signature}"
    )
    req = sigv4.parse(method, wire_path, wire_query, headers)
    assert (req.access_key_id, req.region, req.service) == ("AKIDEXAMPLE", "us-east-1", "service")
    assert req.amz_date == SUITE_TIME
    assert req.session_token == extra.get("x-amz-security-token")
    for raw in (wire_path, path):  # the raw path as sent, or already decoded: the same
        key = sigv4.verify(
            req,
            secret_key=SUITE_SECRET,
            method=method,
            raw_path=raw,
            raw_query=wire_query,
            headers=headers,
            now=SUITE_TIME,
            service="service",
        )
        assert key == sigv4.signing_key(SUITE_SECRET, "20150830", "us-east-1", "service")
    with pytest.raises(SignatureError) as caught:
        sigv4.verify(
            req,
            secret_key=SUITE_SECRET.replace("w", "W"),
            method=method,
            raw_path=wire_path,
            raw_query=wire_query,
            headers=headers,
            now=SUITE_TIME,
            service="service",
        )
    assert caught.value.code == "SignatureDoesNotMatch"


@pytest.mark.parametrize(
    ("name", "raw_path", "canonical", "signature"), NORMALIZE, ids=[case[0] for case in NORMALIZE]
)
def test_normalize_path_vectors_only_with_the_generic_switch(
    name: str, raw_path: str, canonical: str, signature: str
) -> None:
    headers = _suite_headers({})
    creq = sigv4.canonical_request(
        "GET",
        raw_path,
        "",
        headers,
        ("host", "x-amz-date"),
        sigv4.EMPTY_SHA256,
        normalize_path=True,
    )
    assert creq.split("\n")[1] == canonical
    key = sigv4.signing_key(SUITE_SECRET, "20150830", "us-east-1", "service")
    assert sigv4.sign(key, sigv4.string_to_sign("20150830T123600Z", SUITE_SCOPE, creq)) == signature
    # S3 signs the path as sent: no dot segments removed, no slashes merged.
    s3_path = sigv4.canonical_request(
        "GET", raw_path, "", headers, ("host", "x-amz-date"), sigv4.EMPTY_SHA256
    ).split("\n")[1]
    assert s3_path == raw_path.replace(" ", "%20")


def test_s3_mode_encodes_once_and_keeps_escapes_as_sent() -> None:
    assert sigv4.canonical_uri("/s3/b/a%20b%2Bc") == "/s3/b/a%20b%2Bc"
    assert sigv4.canonical_uri("/s3/b/a b+c") == "/s3/b/a%20b%2Bc"
    assert sigv4.canonical_uri("/s3/b/dir%2Fkey") == "/s3/b/dir%2Fkey"  # an encoded slash stays
    assert sigv4.canonical_uri("/s3/b/\u00fc") == "/s3/b/%C3%BC"
    assert sigv4.canonical_uri("") == "/"
    assert sigv4.canonical_query("b=2&a=1&X-Amz-Signature=x", exclude_signature=True) == "a=1&b=2"
    assert sigv4.canonical_query("delete&uploads=") == "delete=&uploads="
    assert sigv4.canonical_query("prefix=a%2fb+c") == "prefix=a%2Fb%2Bc"


def test_query_form_vector_with_session_token() -> None:
    """aws-c-auth's get-vanilla-with-session-token, query form (generic service: the payload
    is the empty body's hash)."""
    query = (
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F20150830%2Fus-east-1%2F"
        "service%2Faws4_request&X-Amz-Date=20150830T123600Z&X-Amz-SignedHeaders=host&"
        f"X-Amz-Expires=3600&X-Amz-Security-Token={SUITE_TOKEN}&X-Amz-Signature=ignored"
    )
    creq = sigv4.canonical_request(
        "GET", "/", query, {"host": HOST}, ("host",), sigv4.EMPTY_SHA256, presigned=True
    )
    assert "X-Amz-Signature" not in creq
    assert creq.split("\n")[2].startswith("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=")
    key = sigv4.signing_key(SUITE_SECRET, "20150830", "us-east-1", "service")
    assert sigv4.sign(key, sigv4.string_to_sign("20150830T123600Z", SUITE_SCOPE, creq)) == (
        "7ff2b50b376cb4d151970630573d6291dc128cc5c2a12ffb237f73cc53f67b6c"
    )


# --- the S3 API reference's examples ---------------------------------------------------------

S3_HOST = "examplebucket.s3.amazonaws.com"


def _s3_example(
    method: str, path: str, query: str, headers: dict[str, str], signed: str, signature: str
) -> None:
    headers = {"host": S3_HOST, "x-amz-date": "20130524T000000Z", **headers}
    headers["authorization"] = (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
        f"SignedHeaders={signed},Signature={signature}"
    )
    req = sigv4.parse(method, path, query, headers)
    key = sigv4.verify(
        req,
        secret_key=S3_SECRET,
        method=method,
        raw_path=path,
        raw_query=query,
        headers=headers,
        now=S3_TIME + timedelta(minutes=14),
    )
    assert key == sigv4.signing_key(S3_SECRET, "20130524", "us-east-1", "s3")


def test_s3_example_get_object_with_range() -> None:
    _s3_example(
        "GET",
        "/test.txt",
        "",
        {"range": "bytes=0-9", "x-amz-content-sha256": sigv4.EMPTY_SHA256},
        "host;range;x-amz-content-sha256;x-amz-date",
        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
    )


def test_s3_example_put_object() -> None:
    body_hash = hashlib.sha256(b"Welcome to Amazon S3.").hexdigest()
    assert body_hash == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"
    _s3_example(
        "PUT",
        "/test%24file.text",
        "",
        {
            "date": "Fri, 24 May 2013 00:00:00 GMT",
            "x-amz-storage-class": "REDUCED_REDUNDANCY",
            "x-amz-content-sha256": body_hash,
        },
        "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
        "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
    )


def test_s3_example_get_bucket_lifecycle_and_list_objects() -> None:
    empty = {"x-amz-content-sha256": sigv4.EMPTY_SHA256}
    _s3_example(
        "GET",
        "/",
        "lifecycle",
        empty,
        "host;x-amz-content-sha256;x-amz-date",
        "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
    )
    _s3_example(
        "GET",
        "/",
        "max-keys=2&prefix=J",
        empty,
        "host;x-amz-content-sha256;x-amz-date",
        "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
    )


EXAMPLE_PRESIGNED_QUERY = (
    "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1"
    "%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
    "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
)


def _verify_example_presign(now: datetime, headers: dict[str, str] | None = None) -> bytes:
    headers = {"host": S3_HOST, **(headers or {})}
    req = sigv4.parse("GET", "/test.txt", EXAMPLE_PRESIGNED_QUERY, headers)
    assert req.presigned and req.expires_in == 86400
    assert req.payload_hash == sigv4.UNSIGNED_PAYLOAD
    return sigv4.verify(
        req,
        secret_key=S3_SECRET,
        method="GET",
        raw_path="/test.txt",
        raw_query=EXAMPLE_PRESIGNED_QUERY,
        headers=headers,
        now=now,
    )


def test_s3_example_presigned_url_until_it_expires() -> None:
    assert _verify_example_presign(S3_TIME + timedelta(seconds=86400))
    with pytest.raises(SignatureError) as caught:
        _verify_example_presign(S3_TIME + timedelta(seconds=86401))
    assert (caught.value.code, caught.value.status, caught.value.message) == (
        "AccessDenied",
        403,
        "Request has expired",
    )
    assert caught.value.detail["X-Amz-Expires"] == "86400"
    with pytest.raises(SignatureError) as caught:
        _verify_example_presign(S3_TIME - timedelta(minutes=16))
    assert (caught.value.code, caught.value.message) == ("AccessDenied", "Request is not valid yet")


def test_presigned_url_refuses_unsigned_amz_headers() -> None:
    """A presigned PUT shared with someone must not become a copy or carry extra metadata."""
    with pytest.raises(SignatureError) as caught:
        _verify_example_presign(S3_TIME, {"x-amz-copy-source": "/rtc-agent/user-other/secret"})
    assert caught.value.code == "AccessDenied"
    assert caught.value.detail["HeadersNotSigned"] == "x-amz-copy-source"
    # Headers outside x-amz-* (what browsers add) do not matter.
    assert _verify_example_presign(S3_TIME, {"user-agent": "curl/8", "accept": "*/*"})


# --- botocore as the reference signer --------------------------------------------------------

ACCESS_KEY = "RTCAKIDTEST0001"
SECRET = "s3cr3t/with+chars=="
TOKEN = "session-token-of-the-user"
ENDPOINT = "http://testserver:8000"


def _wire(request: Any) -> tuple[str, str, str, dict[str, str], bytes]:
    """What a server sees of a botocore request: method, raw path, raw query, lower-cased
    headers (with the Host the HTTP client adds), body."""
    parts = urlsplit(request.url)
    headers = {
        name.lower(): value.decode() if isinstance(value, bytes) else value
        for name, value in request.headers.items()
    }
    headers.setdefault("host", parts.netloc)
    body = request.body or b""
    if hasattr(body, "read"):
        body = body.read()
    if isinstance(body, str):
        body = body.encode()
    return request.method, parts.path, parts.query, headers, body


def _botocore_sign(
    method: str,
    url: str,
    *,
    body: bytes = b"",
    headers: dict | None = None,
    query_auth: bool = False,
    expires: int = 3600,
) -> tuple:
    credentials = Credentials(ACCESS_KEY, SECRET, TOKEN)
    request = AWSRequest(method=method, url=url, data=body, headers=headers or {})
    if query_auth:
        S3SigV4QueryAuth(credentials, "s3", "us-east-1", expires=expires).add_auth(request)
    else:
        S3SigV4Auth(credentials, "s3", "us-east-1").add_auth(request)
    return _wire(request.prepare())


def _check(
    method: str,
    path: str,
    query: str,
    headers: dict[str, str],
    *,
    now: datetime | None = None,
    secret: str = SECRET,
) -> sigv4.SignedRequest:
    req = sigv4.parse(method, path, query, headers)
    sigv4.verify(
        req,
        secret_key=secret,
        method=method,
        raw_path=path,
        raw_query=query,
        headers=headers,
        now=now or req.amz_date,
        region="us-east-1",
    )
    return req


def _refused(
    code: str, method: str, path: str, query: str, headers: dict[str, str], **kwargs: Any
) -> SignatureError:
    with pytest.raises(SignatureError) as caught:
        _check(method, path, query, headers, **kwargs)
    assert caught.value.code == code, caught.value.message
    return caught.value


def test_botocore_header_signed_requests_verify() -> None:
    key = "user-3f1c/dir/a b+c ü.txt"
    url = f"{ENDPOINT}/s3/rtc-agent/{quote(key, safe='/~')}"
    method, path, query, headers, _ = _botocore_sign(
        "PUT", url, body=b"hello", headers={"Content-Type": "text/plain", "x-amz-meta-a": "1"}
    )
    req = _check(method, path, query, headers)
    assert (req.access_key_id, req.session_token, req.presigned) == (ACCESS_KEY, TOKEN, False)
    assert req.payload_hash == hashlib.sha256(b"hello").hexdigest()
    assert "x-amz-security-token" in req.signed_headers

    listing = f"{ENDPOINT}/s3/rtc-agent?list-type=2&prefix=user-3f1c%2Fa%20b&max-keys=5"
    _check(*_botocore_sign("GET", listing)[:4])
    _check(*_botocore_sign("POST", f"{ENDPOINT}/s3/rtc-agent?delete", body=b"<Delete/>")[:4])


def test_botocore_header_form_tampering_is_refused() -> None:
    url = f"{ENDPOINT}/s3/rtc-agent/user-3f1c/report.txt?partNumber=1&uploadId=abc"
    method, path, query, headers, _ = _botocore_sign(
        "PUT", url, body=b"data", headers={"Content-Type": "text/plain"}
    )
    _check(method, path, query, headers)
    _refused("SignatureDoesNotMatch", method, path.replace("report", "other"), query, headers)
    _refused(
        "SignatureDoesNotMatch",
        method,
        path,
        query.replace("partNumber=1", "partNumber=2"),
        headers,
    )
    _refused("SignatureDoesNotMatch", method, path, query + "&x=1", headers)
    _refused("SignatureDoesNotMatch", "POST", path, query, headers)
    _refused("SignatureDoesNotMatch", method, path, query, {**headers, "content-type": "text/html"})
    _refused("SignatureDoesNotMatch", method, path, query, {**headers, "host": "evil:8000"})
    _refused("SignatureDoesNotMatch", method, path, query, headers, secret=SECRET + "x")
    # Another payload hash claimed (the body itself is checked by body_reader).
    _refused(
        "SignatureDoesNotMatch",
        method,
        path,
        query,
        {**headers, "x-amz-content-sha256": hashlib.sha256(b"other").hexdigest()},
    )
    req = sigv4.parse(method, path, query, headers)
    error = _refused(
        "RequestTimeTooSkewed",
        method,
        path,
        query,
        headers,
        now=req.amz_date + timedelta(minutes=16),
    )
    assert error.status == 403 and error.detail["MaxAllowedSkewMilliseconds"] == "900000"
    _refused(
        "RequestTimeTooSkewed",
        method,
        path,
        query,
        headers,
        now=req.amz_date - timedelta(minutes=16),
    )
    _check(method, path, query, headers, now=req.amz_date + timedelta(minutes=15))
    _check(method, path, query, headers, now=req.amz_date - timedelta(minutes=15))


def test_signature_mismatch_tells_what_was_signed() -> None:
    method, path, query, headers, _ = _botocore_sign("GET", f"{ENDPOINT}/s3/rtc-agent/user-1/k")
    error = _refused("SignatureDoesNotMatch", method, path, query, headers, secret="wrong")
    assert error.detail["AWSAccessKeyId"] == ACCESS_KEY
    assert error.detail["CanonicalRequest"].startswith("GET\n/s3/rtc-agent/user-1/k\n")
    assert "wrong" not in str(error.detail) and SECRET not in str(error.detail)


def test_botocore_presigned_urls_verify_and_expire() -> None:
    url = f"{ENDPOINT}/s3/rtc-agent/user-3f1c/photo%20%C3%BC.png?response-content-type=image%2Fpng"
    method, path, query, headers, _ = _botocore_sign("GET", url, query_auth=True, expires=600)
    req = _check(method, path, query, headers)
    assert (req.presigned, req.expires_in, req.session_token) == (True, 600, TOKEN)
    assert req.payload_hash == sigv4.UNSIGNED_PAYLOAD
    _check(method, path, query, headers, now=req.amz_date + timedelta(seconds=600))
    error = _refused(
        "AccessDenied", method, path, query, headers, now=req.amz_date + timedelta(seconds=601)
    )
    assert error.message == "Request has expired"
    _refused("SignatureDoesNotMatch", method, path.replace("photo", "photos"), query, headers)
    _refused(
        "SignatureDoesNotMatch", method, path, query.replace("image%2Fpng", "text%2Fhtml"), headers
    )
    _refused(
        "SignatureDoesNotMatch",
        method,
        path,
        query.replace("X-Amz-Expires=600", "X-Amz-Expires=601"),
        headers,
    )
    _refused("SignatureDoesNotMatch", "PUT", path, query, headers)
    _refused("SignatureDoesNotMatch", method, path, query, headers, secret="wrong")


def _boto3_client(region: str, **config: Any) -> Any:
    return boto3.session.Session(
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        aws_session_token=TOKEN,
        region_name=region,
    ).client(
        "s3",
        endpoint_url=f"{ENDPOINT}/s3",
        config=Config(s3={"addressing_style": "path"}, **config),
    )


def test_boto3_client_requests_verify() -> None:
    """Unmodified boto3 with temporary credentials, path style, against /s3/: what it sends
    (captured before the network) passes parse + verify."""
    sent: list[Any] = []

    class Empty:
        def stream(self, **_: Any) -> Any:
            yield b""

    def capture(request: Any, **_: Any) -> AWSResponse:
        sent.append(_wire(request))
        return AWSResponse(request.url, 200, {}, Empty())

    client = _boto3_client("us-east-1")
    client.meta.events.register("before-send.s3.*", capture)
    client.head_object(Bucket="rtc-agent", Key="user-1/a b.txt")
    client.get_object(Bucket="rtc-agent", Key="user-1/ü+.txt", Range="bytes=0-9")
    client.delete_object(Bucket="rtc-agent", Key="user-1/x")
    client.copy_object(Bucket="rtc-agent", Key="user-1/y", CopySource="rtc-agent/user-1/x y")
    client.list_objects_v2(Bucket="rtc-agent", Prefix="user-1/", Delimiter="/")
    client.delete_objects(Bucket="rtc-agent", Delete={"Objects": [{"Key": "user-1/x"}]})
    assert len(sent) == 6
    for method, path, query, headers, _ in sent:
        _check(method, path, query, headers)


def test_boto3_presigned_urls_are_sigv4_only_when_asked_or_in_a_sigv4_region() -> None:
    """botocore presigns with SigV2 in the old regions that still offered it (us-east-1...)
    unless told ``signature_version="s3v4"``; S3's SigV4-only answer is InvalidRequest."""
    params = {"Bucket": "rtc-agent", "Key": "user-1/up load.bin"}
    for client in (
        _boto3_client("us-east-1", signature_version="s3v4"),
        _boto3_client("eu-central-1"),
    ):
        url = client.generate_presigned_url("put_object", Params=params, ExpiresIn=300)
        parts = urlsplit(url)
        req = sigv4.parse("PUT", parts.path, parts.query, {"host": parts.netloc})
        sigv4.verify(
            req,
            secret_key=SECRET,
            method="PUT",
            raw_path=parts.path,
            raw_query=parts.query,
            headers={"host": parts.netloc},
            now=req.amz_date,
        )
        assert req.presigned and req.session_token == TOKEN
    legacy = _boto3_client("us-east-1").generate_presigned_url(
        "get_object", Params=params, ExpiresIn=300
    )
    parts = urlsplit(legacy)
    with pytest.raises(SignatureError) as caught:
        sigv4.parse("GET", parts.path, parts.query, {"host": parts.netloc})
    assert (caught.value.code, caught.value.status) == ("InvalidRequest", 400)


# --- refusals of parse -----------------------------------------------------------------------


def _parse_error(headers: dict[str, str], query: str = "") -> SignatureError:
    with pytest.raises(SignatureError) as caught:
        sigv4.parse("GET", "/s3/rtc-agent/k", query, {"host": "h", **headers})
    return caught.value


def _auth(
    credential: str = "AK/20150830/us-east-1/s3/aws4_request",
    signed: str = "host;x-amz-date",
    signature: str = "a" * 64,
) -> str:
    return (
        f"AWS4-HMAC-SHA256 Credential={credential}, SignedHeaders={signed}, Signature={signature}"
    )


SCOPE_S3 = "20150830/us-east-1/s3/aws4_request"
GOOD = {"x-amz-date": "20150830T123600Z", "x-amz-content-sha256": sigv4.UNSIGNED_PAYLOAD}


@pytest.mark.parametrize(
    ("headers", "query", "code", "status"),
    [
        ({}, "", "AccessDenied", 403),
        ({"authorization": "AWS AKID:c2lnbmF0dXJl"}, "", "InvalidRequest", 400),
        ({}, "AWSAccessKeyId=AK&Expires=1&Signature=x", "InvalidRequest", 400),
        ({"authorization": "Bearer abc"}, "", "InvalidArgument", 400),
        ({"authorization": "AWS4-ECDSA-P256-SHA256 Credential=x"}, "", "InvalidRequest", 400),
        (
            {"authorization": _auth(), **GOOD},
            "X-Amz-Algorithm=AWS4-HMAC-SHA256",
            "InvalidArgument",
            400,
        ),
        (
            {
                "authorization": f"AWS4-HMAC-SHA256 Credential=AK/{SCOPE_S3}",
                **GOOD,
            },
            "",
            "AuthorizationHeaderMalformed",
            400,
        ),
        (
            {"authorization": _auth(credential="AK/2015/us-east-1/s3/aws4_request"), **GOOD},
            "",
            "AuthorizationHeaderMalformed",
            400,
        ),
        (
            {"authorization": _auth(credential="AK/20150830/us-east-1/s3/aws5_request"), **GOOD},
            "",
            "AuthorizationHeaderMalformed",
            400,
        ),
        (
            {"authorization": _auth(credential="AK/20150831/us-east-1/s3/aws4_request"), **GOOD},
            "",
            "AuthorizationHeaderMalformed",
            400,
        ),
        (
            {"authorization": _auth(signed="x-amz-date"), **GOOD},
            "",
            "AuthorizationHeaderMalformed",
            400,
        ),
        (
            {"authorization": _auth(signed="Host;x-amz-date"), **GOOD},
            "",
            "AuthorizationHeaderMalformed",
            400,
        ),
        ({"authorization": _auth(signature="zz"), **GOOD}, "", "AuthorizationHeaderMalformed", 400),
        (
            {"authorization": _auth(), "x-amz-content-sha256": sigv4.UNSIGNED_PAYLOAD},
            "",
            "AccessDenied",
            403,
        ),
        (
            {
                "authorization": _auth(),
                "x-amz-date": "2015-08-30T12:36:00Z",
                "x-amz-content-sha256": sigv4.UNSIGNED_PAYLOAD,
            },
            "",
            "AccessDenied",
            403,
        ),
        ({"authorization": _auth(), "x-amz-date": "20150830T123600Z"}, "", "InvalidRequest", 400),
        (
            {
                "authorization": _auth(),
                "x-amz-date": "20150830T123600Z",
                "x-amz-content-sha256": "abc",
            },
            "",
            "InvalidArgument",
            400,
        ),
        (
            {
                "authorization": _auth(),
                "x-amz-date": "20150830T123600Z",
                "x-amz-content-sha256": "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD",
            },
            "",
            "InvalidRequest",
            400,
        ),
    ],
    ids=[
        "anonymous",
        "sigv2-header",
        "sigv2-query",
        "bearer",
        "sigv4a",
        "two-mechanisms",
        "missing-components",
        "credential-date",
        "credential-terminal",
        "date-mismatch",
        "host-not-signed",
        "signed-headers-case",
        "signature-not-hex",
        "no-date",
        "bad-date",
        "no-content-sha256",
        "bad-content-sha256",
        "sigv4a-payload",
    ],
)
def test_parse_refuses(headers: dict[str, str], query: str, code: str, status: int) -> None:
    error = _parse_error(headers, query)
    assert (error.code, error.status) == (code, status), error.message


def _presign_query(**overrides: str) -> str:
    params = {
        "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
        "X-Amz-Credential": "AK/20150830/us-east-1/s3/aws4_request",
        "X-Amz-Date": "20150830T123600Z",
        "X-Amz-Expires": "60",
        "X-Amz-SignedHeaders": "host",
        "X-Amz-Signature": "a" * 64,
        **overrides,
    }
    return "&".join(f"{quote(k)}={quote(v, safe='')}" for k, v in params.items() if v != "-")


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (_presign_query(**{"X-Amz-Expires": "-"}), "requires the X-Amz-Algorithm"),
        (_presign_query(**{"X-Amz-Algorithm": "AWS4-HMAC-SHA1"}), "only supports"),
        (_presign_query(**{"X-Amz-Expires": "604801"}), "less than a week"),
        (_presign_query(**{"X-Amz-Expires": "-5"}), "non-negative"),
        (_presign_query(**{"X-Amz-Expires": "0"}), "at least 1"),
        (_presign_query(**{"X-Amz-Expires": "soon"}), "should be a number"),
        (_presign_query(**{"X-Amz-Date": "yesterday"}), "ISO8601"),
        (_presign_query(**{"X-Amz-Credential": "AK/20150830/us-east-1"}), "X-Amz-Credential"),
        (
            _presign_query(**{"X-Amz-Credential": "AK/20150829/us-east-1/s3/aws4_request"}),
            "Invalid credential date",
        ),
        (_presign_query() + "&X-Amz-Date=20150830T123600Z", "only once"),
    ],
    ids=[
        "missing",
        "algorithm",
        "expires-too-long",
        "expires-negative",
        "expires-zero",
        "expires-text",
        "date",
        "credential",
        "credential-date",
        "duplicate",
    ],
)
def test_parse_refuses_bad_presigned_queries(query: str, message: str) -> None:
    error = _parse_error({}, query)
    assert (error.code, error.status) == ("AuthorizationQueryParametersError", 400)
    assert message in error.message


def test_parse_accepts_the_date_header_and_a_week_long_presign() -> None:
    req = sigv4.parse(
        "GET",
        "/",
        "",
        {
            "host": "h",
            "date": "Sun, 30 Aug 2015 12:36:00 GMT",
            "authorization": _auth(),
            "x-amz-content-sha256": sigv4.UNSIGNED_PAYLOAD,
        },
    )
    assert req.amz_date == SUITE_TIME and req.timestamp == "20150830T123600Z"
    req = sigv4.parse("GET", "/", _presign_query(**{"X-Amz-Expires": "604800"}), {"host": "h"})
    assert req.expires_in == 604800 and req.session_token is None


def test_verify_refuses_another_service_or_region() -> None:
    method, path, query, headers, _ = _botocore_sign("GET", f"{ENDPOINT}/s3/rtc-agent/user-1/k")
    req = sigv4.parse(method, path, query, headers)
    with pytest.raises(SignatureError) as caught:
        sigv4.verify(
            req,
            secret_key=SECRET,
            method=method,
            raw_path=path,
            raw_query=query,
            headers=headers,
            now=req.amz_date,
            region="eu-west-1",
        )
    assert caught.value.code == "AuthorizationHeaderMalformed"
    assert caught.value.detail["Region"] == "eu-west-1"
    with pytest.raises(SignatureError) as caught:
        sigv4.verify(
            req,
            secret_key=SECRET,
            method=method,
            raw_path=path,
            raw_query=query,
            headers=headers,
            now=req.amz_date,
            service="sts",
        )
    assert caught.value.code == "AuthorizationHeaderMalformed"


# --- presign ---------------------------------------------------------------------------------

NOW = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


def _presign(**overrides: Any) -> str:
    arguments: dict[str, Any] = {
        "method": "GET",
        "base_url": "http://127.0.0.1:8000",
        "bucket": "rtc-agent",
        "key": "user-3f1c/a b+c/ü #1?.txt",
        "access_key_id": ACCESS_KEY,
        "secret_key": SECRET,
        "session_token": TOKEN,
        "region": "us-east-1",
        "expires_in": 3600,
        "now": NOW,
    }
    arguments.update(overrides)
    return sigv4.presign(**arguments)


def _verify_url(
    url: str,
    method: str = "GET",
    now: datetime = NOW,
    secret: str = SECRET,
    host: str | None = None,
) -> sigv4.SignedRequest:
    # urllib is an unmodified HTTP client: the selector and Host header are what it would send.
    request = urllib.request.Request(url, method=method)  # noqa: S310 (http URLs built here)
    path, _, query = request.selector.partition("?")
    headers = {"host": host or request.host}
    req = sigv4.parse(method, path, query, headers)
    sigv4.verify(
        req,
        secret_key=secret,
        method=method,
        raw_path=path,
        raw_query=query,
        headers=headers,
        now=now,
    )
    return req


def test_presign_makes_urls_verify_accepts() -> None:
    url = _presign()
    assert url.startswith(
        "http://127.0.0.1:8000/s3/rtc-agent/user-3f1c/a%20b%2Bc/%C3%BC%20%231%3F.txt?"
    )
    query = dict(parse_qsl(urlsplit(url).query))
    assert query["X-Amz-Credential"] == f"{ACCESS_KEY}/20260301/us-east-1/s3/aws4_request"
    assert query["X-Amz-SignedHeaders"] == "host"
    assert query["X-Amz-Security-Token"] == TOKEN
    req = _verify_url(url)
    assert (req.presigned, req.expires_in, req.session_token) == (True, 3600, TOKEN)
    _verify_url(url, now=NOW + timedelta(seconds=3600))


def test_presigned_urls_refuse_tampering_and_expiry() -> None:
    url = _presign(method="PUT", expires_in=60)
    _verify_url(url, method="PUT")
    for bad, code in [
        (lambda: _verify_url(url, method="GET"), "SignatureDoesNotMatch"),
        (
            lambda: _verify_url(url.replace("user-3f1c", "user-3f1d"), method="PUT"),
            "SignatureDoesNotMatch",
        ),
        (
            lambda: _verify_url(url.replace("X-Amz-Expires=60", "X-Amz-Expires=600"), method="PUT"),
            "SignatureDoesNotMatch",
        ),
        (lambda: _verify_url(url, method="PUT", secret="other"), "SignatureDoesNotMatch"),
        (lambda: _verify_url(url, method="PUT", host="127.0.0.1:8001"), "SignatureDoesNotMatch"),
        (lambda: _verify_url(url, method="PUT", now=NOW + timedelta(seconds=61)), "AccessDenied"),
    ]:
        with pytest.raises(SignatureError) as caught:
            bad()
        assert caught.value.code == code


def test_presign_host_port_path_prefix_and_extra_query() -> None:
    url = _presign(
        base_url="https://files.example.com:443/app/",
        session_token=None,
        extra_query={"response-content-disposition": 'attachment; filename="a b.txt"'},
    )
    parts = urlsplit(url)
    assert parts.path.startswith("/app/s3/rtc-agent/")
    assert "X-Amz-Security-Token" not in parts.query
    req = _verify_url(url, host="files.example.com")  # a client drops the default port
    assert req.session_token is None
    _verify_url(_presign(base_url="http://[::1]:9000"), host="[::1]:9000")
    with pytest.raises(ValueError, match="expires_in"):
        _presign(expires_in=604801)
    with pytest.raises(ValueError, match="expires_in"):
        _presign(expires_in=0)
    with pytest.raises(ValueError, match="base_url"):
        _presign(base_url="/relative")


def test_presigned_put_works_with_a_plain_http_client_against_a_server(
    live_capture: Callable[[], tuple[str, list[tuple[str, str, dict[str, str], bytes]]]],
) -> None:
    """urllib sends a presigned PUT to a real HTTP server; what arrives verifies."""
    server_url, received = live_capture()
    url = _presign(method="PUT", base_url=server_url)
    request = urllib.request.Request(url, data=b"payload", method="PUT")  # noqa: S310
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 (a local server)
        assert response.status == 200
    ((method, target, headers, body),) = received
    path, _, query = target.partition("?")
    req = sigv4.parse(method, path, query, headers)
    sigv4.verify(
        req,
        secret_key=SECRET,
        method=method,
        raw_path=path,
        raw_query=query,
        headers=headers,
        now=NOW,
    )
    reader = sigv4.body_reader(req, io.BytesIO(body), headers=headers, signing_key=b"")
    assert reader.read() == b"payload"


@pytest.fixture
def live_capture() -> Any:
    """A throwaway HTTP server in a thread that records each request and answers 200."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    received: list[tuple[str, str, dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            headers = {name.lower(): value for name, value in self.headers.items()}
            received.append((self.command, self.path, headers, body))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield lambda: (f"http://127.0.0.1:{server.server_address[1]}", received)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
