"""What the model sees of a user message with attachments (Chat Completions format).

Without attachments the content stays a plain string. With them:

* text files are ``<file_content name="..." type="...">`` blocks appended to the text;
* skipped files are one line each, ``[Attachment skipped: "name" (type): why]``, so the model
  can tell the user what it could not read;
* images are ``{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,..."}}``
  parts after the text part, in the order of ``files``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .models import Attachment, AttachmentKind, AttachmentStatus
from .text import CutText, wrap

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def _one_line(value: str) -> str:
    return _CONTROL.sub(" ", value).replace('"', "'").strip()


def skipped_note(name: str, mimetype: str, warning: str) -> str:
    kind = f" ({_one_line(mimetype)})" if mimetype else ""
    return f'[Attachment skipped: "{_one_line(name)}"{kind}: {_one_line(warning)}]'


def user_content(
    text: str,
    files: list[dict[str, Any]],
    rows: list[Attachment],
    image_url: Callable[[Attachment], str | None],
) -> str | list[dict[str, Any]]:
    """The ``content`` of the user message: ``text`` plus its ``files`` as processed
    (``rows``; a file with no row is noted as not processed)."""
    by_index = {r.index: r for r in rows}
    blocks: list[str] = []
    images: list[dict[str, Any]] = []
    for index, entry in enumerate(files):
        row = by_index.get(index)
        if row is None:
            name = str((entry.get("extra") or {}).get("name") or entry.get("fileid") or "file")
            blocks.append(skipped_note(name, "", "it has not been processed"))
        elif row.status != AttachmentStatus.READY:
            blocks.append(skipped_note(row.name, row.mimetype, row.warning))
        elif row.kind == AttachmentKind.TEXT:
            cut = CutText(row.text, row.truncated, len(row.text.encode()))
            blocks.append(wrap(cut, name=row.name, mimetype=row.mimetype, total_size=row.size))
        elif row.kind == AttachmentKind.IMAGE:
            url = image_url(row)
            if url is None:
                blocks.append(skipped_note(row.name, row.mimetype,
                                           "the processed image is no longer available"))
            else:
                images.append({"type": "image_url", "image_url": {"url": url}})
    full = "\n\n".join(part for part in (text, *blocks) if part)
    if not images:
        return full
    return [{"type": "text", "text": full}, *images]
