"""Text attachments: UTF-8 checked, cut on a character boundary, wrapped for the model.

The model sees ``<file_content name="..." type="...">...</file_content>`` appended to the user's
text. Name and type come from the client, so they are XML-escaped: a name holding ``"`` or
``</file_content>`` cannot end the attribute or the element. The body is the user's own file and
is sent as is, except that a literal ``</file_content`` inside it is defused (``<\\/file_content``)
so that the wrapper's end is always the real one.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from html import escape

TAG = "file_content"


class NotUtf8(ValueError):
    """The bytes are not UTF-8 text."""


@dataclass(frozen=True)
class CutText:
    text: str
    truncated: bool
    shown_bytes: int  # UTF-8 bytes of ``text``


def decode_cut(data: bytes, *, total_size: int, max_bytes: int) -> CutText:
    """The text of the first ``max_bytes`` of a file of ``total_size`` bytes (``data`` holds at
    least that much of it, or all of it). A multi-byte character that the cut splits is left
    out whole; any invalid byte before the cut is ``NotUtf8``."""
    truncated = total_size > max_bytes
    part = data[:max_bytes]
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        # final=False keeps an incomplete last character back instead of failing on it
        text = decoder.decode(part, final=not truncated)
    except UnicodeDecodeError as exc:
        raise NotUtf8(f"byte {exc.start} is not UTF-8") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\x00" in text:
        raise NotUtf8("it holds NUL characters")
    return CutText(text, truncated, len(text.encode()))


def wrap(cut: CutText, *, name: str, mimetype: str, total_size: int) -> str:
    """The ``<file_content>`` block the model reads."""
    attrs = f'name="{escape(name, quote=True)}" type="{escape(mimetype, quote=True)}"'
    body = cut.text.replace(f"</{TAG}", f"<\\/{TAG}")
    note = ""
    if cut.truncated:
        attrs += ' truncated="true"'
        note = (f"\n[truncated: the first {cut.shown_bytes} of {total_size} bytes are shown]")
    return f"<{TAG} {attrs}>\n{body}{note}\n</{TAG}>"
