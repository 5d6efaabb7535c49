"""The JSON parser of every DRF view: orjson, then ``rtcagent.jsonsafety.check_json``.

Why not DRF's parser: the standard library decoder recurses, so a body nested a few thousand
levels raised ``RecursionError`` (an HTML 500) before any view code ran. orjson refuses more than
1024 levels with a decode error, and ``check_json`` then refuses what could be read but never
stored or sent back out (deeper than ``MAX_JSON_DEPTH``, NUL characters). Both become a DRF
``ParseError``: 400 with a JSON body, before the view sees the data.

orjson is also stricter than the standard library where the database is too: lone surrogates
and ``NaN``/``Infinity`` are refused (DRF's ``STRICT_JSON`` refused the constants already).
"""

from __future__ import annotations

from typing import IO, Any

import orjson
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, get_encoding
from rest_framework.renderers import JSONRenderer

from rtcagent.errors import InvalidRequest
from rtcagent.jsonsafety import check_json

_UTF8 = {"utf-8", "utf8"}


class JSONParser(BaseParser):
    """``application/json`` bodies; ``unchecked_keys`` are top-level members left to the view
    (a value with its own policy, such as a tool's result, see ``ToolResultJSONParser``)."""

    media_type = "application/json"
    renderer_class = JSONRenderer
    unchecked_keys: tuple[str, ...] = ()

    def parse(
        self,
        stream: IO[bytes],
        media_type: str | None = None,
        parser_context: dict[str, Any] | None = None,
    ) -> Any:
        encoding = get_encoding(parser_context or {})  # refuses non-text codecs (bz2, ...)
        try:
            raw = stream.read()
            data = orjson.loads(raw if encoding.lower() in _UTF8 else raw.decode(encoding))
        except (orjson.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        checked = data
        if self.unchecked_keys and isinstance(data, dict):
            checked = {k: v for k, v in data.items() if k not in self.unchecked_keys}
        try:
            check_json(checked, what="body")
        except InvalidRequest as exc:
            raise ParseError(exc.message) from None
        return data


class ToolResultJSONParser(JSONParser):
    """The body of ``POST /api/rtc/{id}/result``: ``result`` is the tool's output, which the
    service keeps or turns into a failed call with a reason for the model (NUL replaced, too deep
    or too large refused), exactly as for ``v1.rtc.submit_result``; the rest is checked here."""

    unchecked_keys = ("result",)
