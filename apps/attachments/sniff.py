"""What a file is, from its first bytes: never from its name or the type the client claimed.

An EPS or PSD named ``.png`` and sent as ``image/png`` is still an EPS or a PSD here, and is
skipped. Text has no signature: bytes with no known signature and no NUL are treated as text
(``text.py`` then insists on UTF-8). SVG is text whose first element is ``<svg``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SNIFF_BYTES = 4096  # enough for every signature below and an SVG's prolog

IMAGE, SVG, TEXT, OTHER = "image", "svg", "text", "other"


@dataclass(frozen=True)
class Sniffed:
    kind: str  # image | svg | text | other
    mimetype: str  # what the bytes are ("" when unknown)
    label: str  # for warnings: "a PDF document"
    pil_format: str = ""  # Pillow's name of an image format (the only one it may decode with)


# (signature test, Sniffed): the first that matches wins.
_IMAGES: list[tuple[re.Pattern[bytes], Sniffed]] = [
    (re.compile(rb"\A\xff\xd8\xff"), Sniffed(IMAGE, "image/jpeg", "a JPEG image", "JPEG")),
    (re.compile(rb"\A\x89PNG\r\n\x1a\n"), Sniffed(IMAGE, "image/png", "a PNG image", "PNG")),
    (re.compile(rb"\AGIF8[79]a"), Sniffed(IMAGE, "image/gif", "a GIF image", "GIF")),
    (re.compile(rb"\ARIFF....WEBP", re.S), Sniffed(IMAGE, "image/webp", "a WebP image", "WEBP")),
    (re.compile(rb"\A(II\*\x00|MM\x00\*)"), Sniffed(IMAGE, "image/tiff", "a TIFF image", "TIFF")),
    # "BM" alone starts plenty of text: the DIB header size must be one BMP knows.
    (re.compile(rb"\ABM.{12}(\x0c|\x28|\x34|\x38|\x40|\x6c|\x7c)\x00\x00\x00", re.S),
     Sniffed(IMAGE, "image/bmp", "a BMP image", "BMP")),
]

_OTHERS: list[tuple[re.Pattern[bytes], Sniffed]] = [
    (re.compile(rb"\A%PDF-"), Sniffed(OTHER, "application/pdf", "a PDF document")),
    (re.compile(rb"\A(%!PS-Adobe|\xc5\xd0\xd3\xc6)"),
     Sniffed(OTHER, "application/postscript", "an EPS/PostScript file")),
    (re.compile(rb"\A8BPS"), Sniffed(OTHER, "image/vnd.adobe.photoshop", "a Photoshop (PSD) file")),
    (re.compile(rb"\APK(\x03\x04|\x05\x06|\x07\x08)"),
     Sniffed(OTHER, "application/zip", "a ZIP archive (or an Office document)")),
    (re.compile(rb"\A\x1f\x8b"), Sniffed(OTHER, "application/gzip", "a gzip archive")),
    (re.compile(rb"\A(7z\xbc\xaf\x27\x1c|Rar!\x1a\x07)"),
     Sniffed(OTHER, "application/octet-stream", "an archive")),
    (re.compile(rb"\A\x00\x00\x00.ftyp(heic|heix|mif1|avif|msf1)", re.S),
     Sniffed(OTHER, "image/heic", "a HEIC/AVIF image (not supported; convert it to JPEG)")),
    (re.compile(rb"\A\x00\x00\x00.ftyp", re.S), Sniffed(OTHER, "video/mp4", "a video")),
    (re.compile(rb"\A(\x7fELF|MZ)"), Sniffed(OTHER, "application/octet-stream", "a program")),
    (re.compile(rb"\A(\xff\xfe|\xfe\xff)"),
     Sniffed(OTHER, "text/plain", "UTF-16 text (convert it to UTF-8)")),
    (re.compile(rb"\A\xd0\xcf\x11\xe0"), Sniffed(OTHER, "application/x-ole-storage",
                                                  "an old Office document")),
]

# An SVG's prolog: BOM, XML declaration, comments, processing instructions and a DOCTYPE (which
# the sanitizer then refuses) may come before the root element.
_SVG_ROOT = re.compile(
    rb"\A(?:\xef\xbb\xbf)?\s*(?:<\?xml[^>]*\?>\s*)?(?:(?:<!--.*?-->|<\?[^>]*\?>)\s*)*"
    rb"(?:<!DOCTYPE[^>\[]*(?:\[.*?\])?\s*>\s*)?(?:(?:<!--.*?-->)\s*)*<svg[\s>/]",
    re.S,
)


def sniff(head: bytes) -> Sniffed:
    """Classify a file by its first bytes (at least ``SNIFF_BYTES`` of them when it has them)."""
    for pattern, found in (*_IMAGES, *_OTHERS):
        if pattern.match(head):
            return found
    if _SVG_ROOT.match(head[:SNIFF_BYTES * 16]):
        return Sniffed(SVG, "image/svg+xml", "an SVG image")
    if b"\x00" in head:
        return Sniffed(OTHER, "application/octet-stream", "a binary file of an unknown type")
    return Sniffed(TEXT, "text/plain", "text")
