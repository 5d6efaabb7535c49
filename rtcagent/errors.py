"""Domain errors with wire codes.

Services raise these; the gateway maps them to Centrifuge error replies in exactly one place
(``apps.gateway.protocol.error_reply``) and the HTTP views to DRF responses. The Centrifuge
``message`` starts with the string code, e.g. ``session.not_found: session 1f… not found``; when
there are details they follow as one JSON object after `` | ``.
"""

from __future__ import annotations

from typing import Any


class RtcError(Exception):
    """Base class: an application error with a numeric code (400-1999) and a string slug."""

    code: int = 400
    slug: str = "invalid_request"
    temporary: bool = False

    def __init__(
        self, message: str = "", *, slug: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        if slug is not None:
            self.slug = slug
        self.message = message or self.slug.replace("_", " ").replace(".", " ")
        self.details = details
        super().__init__(self.message)


class InvalidRequest(RtcError):
    code, slug = 400, "invalid_request"


class PermissionDenied(RtcError):
    code, slug = 403, "permission_denied"


class NotFound(RtcError):
    """A resource that does not exist, or is not the caller's (never tell which)."""

    code, slug = 404, "not_found"

    def __init__(self, entity: str, entity_id: object = "") -> None:
        text = f"{entity} {entity_id} not found" if entity_id != "" else f"{entity} not found"
        super().__init__(text, slug=f"{entity}.not_found")


class MethodNotFound(RtcError):
    code, slug = 104, "method_not_found"  # the Centrifuge reference code for an unknown method


class ClientIdConflict(RtcError):
    code, slug = 409, "client_id_conflict"


class InvalidState(RtcError):
    """A state-machine transition that is not allowed from the current status."""

    code, slug = 422, "invalid_state"


class RateLimited(RtcError):
    code, slug, temporary = 429, "rate_limited", True


class Unavailable(RtcError):
    code, slug, temporary = 503, "unavailable", True
