"""SVG made safe to rasterise: no DTD, no entities, nothing fetched, no script.

resvg reads any absolute file path an ``<image href>`` names, so what reaches it must reference
nothing outside the document. The steps:

1. Parse with defusedxml, DTDs and entities refused (billion laughs, external entities). The one
   DOCTYPE tolerated is the standard SVG 1.0/1.1 public one without an internal subset, which
   editors still write; it is removed, never read.
2. Drop ``<script>``, ``<foreignObject>`` and other embedding elements, ``on*`` handlers, every
   ``href`` that is not a ``#fragment`` or a ``data:`` raster image, every ``url(...)`` (in
   attributes, ``style`` and ``<style>``) that is not one of those, and CSS ``@import``.
3. Refuse documents too large or too deep, and ``<use>`` graphs that would expand past a node
   budget (the SVG form of billion laughs) or loop.
4. Work out the render size: the intrinsic size (width/height, else viewBox) fitted within the
   image bound; small drawings are scaled up to ``MIN_SIDE`` since vectors lose nothing.

Rendering itself happens in ``imaging.py`` inside the process pool (time and memory limits).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET  # only to serialise and for its types: defusedxml parses
from dataclasses import dataclass

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
MAX_ELEMENTS = 100_000
MAX_DEPTH = 256
MAX_EXPANDED = 500_000  # nodes after <use> and other #references are expanded
MIN_SIDE = 512
DEFAULT_SIZE = (300.0, 150.0)  # CSS's default replaced-element size

_DROP = {"script", "foreignObject", "iframe", "object", "embed", "audio", "video", "canvas",
         "handler", "listener", "discard"}
_SAFE_DATA = re.compile(r"^\s*data:image/(png|jpeg|jpg|gif|webp)[;,]", re.I)
_URL = re.compile(r"url\(\s*(?P<q>['\"]?)(?P<target>.*?)(?P=q)\s*\)", re.I | re.S)
_IMPORT = re.compile(r"@import[^;]*;?", re.I)
_DOCTYPE = re.compile(
    r"<!DOCTYPE\s+svg\s+PUBLIC\s+\"-//W3C//DTD SVG 1\.[01](?: Basic| Tiny)?//EN\"\s+"
    r"\"http://www\.w3\.org/(?:TR/2001/REC-SVG-20010904/DTD/svg10\.dtd|Graphics/SVG/1\.1/DTD/"
    r"svg11(?:-basic|-tiny)?\.dtd)\"\s*>",
)
_LENGTH = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(px|pt|pc|mm|cm|in)?\s*$")
_UNITS = {None: 1.0, "px": 1.0, "pt": 96 / 72, "pc": 16.0, "mm": 96 / 25.4, "cm": 96 / 2.54,
          "in": 96.0}

ET.register_namespace("", SVG_NS)
ET.register_namespace("xlink", XLINK_NS)


class SvgRefused(ValueError):
    """The SVG cannot be rendered safely; the message says why (the user reads it)."""


@dataclass(frozen=True)
class CleanSvg:
    markup: str
    width: int  # render size in pixels
    height: int


def _local(name: str) -> str:
    return name.rsplit("}", 1)[-1]


def _safe_ref(target: str) -> bool:
    return target.strip().startswith("#") or bool(_SAFE_DATA.match(target))


def _clean_css(value: str) -> str:
    value = _IMPORT.sub("", value)
    return _URL.sub(lambda m: m.group(0) if _safe_ref(m.group("target")) else "none", value)


def _length(value: str | None) -> float | None:
    m = _LENGTH.match(value or "")
    if not m:
        return None
    number = float(m.group(1)) * _UNITS[m.group(2)]
    return number if number > 0 else None


def _intrinsic(root: ET.Element) -> tuple[float, float]:
    width, height = _length(root.get("width")), _length(root.get("height"))
    box = re.split(r"[\s,]+", (root.get("viewBox") or "").strip())
    vb: tuple[float, float] | None = None
    if len(box) == 4:
        try:
            vw, vh = float(box[2]), float(box[3])
        except ValueError:
            vw = vh = 0.0
        if vw > 0 and vh > 0:
            vb = (vw, vh)
    if width and height:
        return width, height
    if vb:  # one side given: the other follows the viewBox's aspect
        if width:
            return width, width * vb[1] / vb[0]
        if height:
            return height * vb[0] / vb[1], height
        return vb
    return width or DEFAULT_SIZE[0], height or DEFAULT_SIZE[1]


def render_size(width: float, height: float, max_side: int) -> tuple[int, int]:
    """Fit within ``max_side``; scale small drawings up to ``MIN_SIDE`` on their longer side."""
    longer = max(width, height)
    scale = min(max_side / longer, max(1.0, min(MIN_SIDE, max_side) / longer))
    return max(1, round(width * scale)), max(1, round(height * scale))


def _check_shape(root: ET.Element) -> None:
    """Size and depth, iteratively (a deep document must not exhaust Python's stack)."""
    count = 0
    stack = [(root, 1)]
    while stack:
        el, depth = stack.pop()
        count += 1
        if count > MAX_ELEMENTS:
            raise SvgRefused(f"the SVG has more than {MAX_ELEMENTS} elements")
        if depth > MAX_DEPTH:
            raise SvgRefused(f"the SVG nests deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in el)


def _href(el: ET.Element) -> str:
    return el.get("href") or el.get(f"{{{XLINK_NS}}}href") or ""


def _check_expansion(root: ET.Element) -> None:
    """Refuse reference graphs (``<use href="#a">`` ...) that expand past ``MAX_EXPANDED`` nodes
    or loop. Post-order over elements and their ``#id`` targets, with memoised sizes."""
    by_id = {el.get("id"): el for el in root.iter() if el.get("id")}
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[ET.Element, bool]] = [(root, False)]
    while stack:
        el, done = stack.pop()
        key = id(el)
        if done:
            on_path.discard(key)
            total = 1 + sum(size[id(c)] for c in el)
            ref = _href(el)
            if ref.startswith("#") and ref[1:] in by_id:
                total += size[id(by_id[ref[1:]])]
            if total > MAX_EXPANDED:
                raise SvgRefused(
                    f"the SVG's references expand to more than {MAX_EXPANDED} elements")
            size[key] = total
            continue
        if key in size:
            continue
        if key in on_path:
            raise SvgRefused("the SVG references itself in a loop")
        on_path.add(key)
        stack.append((el, True))
        ref = _href(el)
        children = list(el)
        if ref.startswith("#") and ref[1:] in by_id:
            children.append(by_id[ref[1:]])
        for child in children:
            if id(child) in on_path:
                raise SvgRefused("the SVG references itself in a loop")
            if id(child) not in size:
                stack.append((child, False))


def _strip(root: ET.Element) -> None:
    for parent in list(root.iter()):
        for child in list(parent):
            if _local(child.tag) in _DROP:
                parent.remove(child)
    for el in root.iter():
        if _local(el.tag) == "style" and el.text:
            el.text = _clean_css(el.text)
        for name, value in list(el.attrib.items()):
            local = _local(name)
            if local.lower().startswith("on"):
                del el.attrib[name]
            elif local == "href":
                if not _safe_ref(value):
                    del el.attrib[name]
            elif "url(" in value.lower() or "@import" in value.lower():
                el.attrib[name] = _clean_css(value)


def _namespaced(root: ET.Element) -> None:
    """An ``<svg>`` written without its namespace: put elements in it (resvg requires it)."""
    for el in root.iter():
        if isinstance(el.tag, str) and not el.tag.startswith("{"):
            el.tag = f"{{{SVG_NS}}}{el.tag}"


def sanitize(data: bytes, *, max_side: int) -> CleanSvg:
    """The SVG in ``data`` made safe, with its render size; ``SvgRefused`` otherwise."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SvgRefused("the SVG is not UTF-8") from None
    text = _DOCTYPE.sub("", text, count=1)
    try:
        root = SafeET.fromstring(text, forbid_dtd=True, forbid_entities=True,
                                 forbid_external=True)
    except DefusedXmlException:
        raise SvgRefused("the SVG declares a DTD or entities, which are not allowed") from None
    except ET.ParseError as exc:
        raise SvgRefused(f"the SVG is not well-formed XML ({exc})") from None
    if _local(root.tag) != "svg" or root.tag not in ("svg", f"{{{SVG_NS}}}svg"):
        raise SvgRefused("the file's root element is not <svg>")
    _check_shape(root)
    if root.tag == "svg":
        _namespaced(root)
    _strip(root)
    _check_expansion(root)
    width, height = render_size(*_intrinsic(root), max_side)
    return CleanSvg(ET.tostring(root, encoding="unicode"), width, height)
