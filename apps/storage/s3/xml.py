"""S3's XML: building response bodies and reading request bodies (``defusedxml``: no DTDs,
entities or external references)."""

from __future__ import annotations

import xml.etree.ElementTree as ET  # builds documents only; parsing is defusedxml's
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from defusedxml import ElementTree as SafeET
from defusedxml.common import DefusedXmlException

from .errors import malformed_xml

NS = "http://s3.amazonaws.com/doc/2006-03-01/"
_DECLARATION = b'<?xml version="1.0" encoding="UTF-8"?>\n'


def timestamp(moment: datetime) -> str:
    """S3's ISO 8601 form: ``2026-01-02T03:04:05.000Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + \
        f"{moment.microsecond // 1000:03d}Z"


def element(tag: str, *, namespaced: bool = True) -> ET.Element:
    return ET.Element(tag, {"xmlns": NS} if namespaced else {})


def add(parent: ET.Element, tag: str, text: object = None) -> ET.Element:
    """A child of ``parent`` with ``text`` (booleans as S3 writes them)."""
    child = ET.SubElement(parent, tag)
    if isinstance(text, bool):
        child.text = "true" if text else "false"
    elif text is not None:
        child.text = str(text)
    return child


def add_all(parent: ET.Element, fields: Mapping[str, object]) -> None:
    """One child per field whose value is not None, in order."""
    for tag, value in fields.items():
        if value is not None:
            add(parent, tag, value)


def to_bytes(root: ET.Element) -> bytes:
    return _DECLARATION + ET.tostring(root, encoding="utf-8", xml_declaration=False)


def error_body(code: str, message: str, *, resource: str, request_id: str,
               detail: Mapping[str, str] | None = None) -> bytes:
    root = element("Error", namespaced=False)
    add_all(root, {"Code": code, "Message": message, **dict(detail or {}),
                   "Resource": resource, "RequestId": request_id})
    return to_bytes(root)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse(body: bytes, root_tag: str) -> ET.Element:
    """The document in ``body``, whose root must be ``root_tag`` (any namespace), with every
    namespace dropped from the tags; ``MalformedXML`` otherwise."""
    try:
        root = SafeET.fromstring(body, forbid_dtd=True)
    except (ET.ParseError, DefusedXmlException, ValueError):
        raise malformed_xml() from None
    for node in root.iter():
        node.tag = _local(node.tag)
    if root.tag != root_tag:
        raise malformed_xml()
    return root


def children(node: ET.Element, tag: str) -> Iterable[ET.Element]:
    return (child for child in node if child.tag == tag)


def text_of(node: ET.Element, tag: str) -> str | None:
    child = next(iter(children(node, tag)), None)
    return None if child is None else (child.text or "")
