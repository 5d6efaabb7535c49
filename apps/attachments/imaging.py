"""Image work, run inside the process pool (``pool.py``): decode, orient, fit, compress.

Plain functions of bytes to bytes with no Django, so a pool process imports only Pillow,
resvg and defusedxml. The steps for a raster image:

1. Open with the one format the magic bytes named (``Image.open(..., formats=[...])``), so a
   file never gets decoded as something it did not claim to be by its signature.
2. Refuse more than ``max_pixels`` before decoding (Pillow's ``DecompressionBombWarning`` is an
   error here too), and truncated data (``LOAD_TRUNCATED_IMAGES`` stays off).
3. Apply the EXIF orientation (``ImageOps.exif_transpose``), flatten transparency onto white,
   fit within ``max_side`` x ``max_side`` keeping the aspect ratio.
4. JPEG quality ladder 80, 60, 40, 20: the first whose base64 is at most ``max_base64`` wins;
   past 20 the image is scaled down until it fits.
5. A thumbnail of at most ``thumb_side`` pixels for the conversation view.

SVG is sanitised (``svg.py``) and rasterised by resvg at its render size, then goes through the
same steps from 3 on.
"""

from __future__ import annotations

import io
import math
import re
import warnings
from dataclasses import dataclass

from PIL import Image, ImageFile, ImageOps

from .svg import SvgRefused, sanitize

QUALITIES = (80, 60, 40, 20)
THUMB_QUALITY = 75


class ImageRefused(ValueError):
    """The image cannot be used; the message says why in words the user reads."""


@dataclass(frozen=True)
class Limits:
    max_side: int = 2000
    max_base64: int = 5 * 1024 * 1024
    max_pixels: int = 50_000_000
    thumb_side: int = 256


@dataclass(frozen=True)
class ImageResult:
    jpeg: bytes
    thumbnail: bytes
    width: int  # of ``jpeg``
    height: int
    quality: int  # the ladder's step that fitted
    source_width: int  # as decoded, before orientation and fitting
    source_height: int


def base64_length(n: int) -> int:
    return 4 * math.ceil(n / 3)


def configure(max_pixels: int) -> None:
    """Pillow's global guards, set in each pool process (and by direct callers)."""
    Image.MAX_IMAGE_PIXELS = max_pixels
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    warnings.simplefilter("error", Image.DecompressionBombWarning)


def _flatten(img: Image.Image) -> Image.Image:
    """RGB for JPEG: transparency onto white, 16-bit and float greys scaled to 8 bits."""
    if img.mode in ("I;16", "I;16B", "I;16L", "I;16N"):
        img = img.convert("I")
    if img.mode == "I":
        img = img.point(lambda v: v * (1 / 256)).convert("L")
    elif img.mode == "F":
        img = img.convert("L")
    if img.mode == "P" or img.mode in ("LA", "PA", "RGBa", "La"):
        img = img.convert("RGBA")
    if img.mode == "RGBA":
        background = Image.new("RGB", img.size, (255, 255, 255))
        background.paste(img, mask=img.getchannel("A"))
        return background
    return img if img.mode == "RGB" else img.convert("RGB")


def _jpeg(img: Image.Image, quality: int) -> bytes:
    out = io.BytesIO()
    img.save(out, "JPEG", quality=quality, optimize=False)
    return out.getvalue()


def compress(img: Image.Image, limits: Limits) -> tuple[bytes, int, Image.Image]:
    """The quality ladder; then smaller and smaller at the lowest quality until it fits."""
    for quality in QUALITIES:
        data = _jpeg(img, quality)
        if base64_length(len(data)) <= limits.max_base64:
            return data, quality, img
    while True:
        ratio = math.sqrt(limits.max_base64 / base64_length(len(data))) * 0.9
        size = (max(1, int(img.width * ratio)), max(1, int(img.height * ratio)))
        img = img.resize(size, Image.Resampling.LANCZOS)
        data = _jpeg(img, QUALITIES[-1])
        if base64_length(len(data)) <= limits.max_base64 or size == (1, 1):
            return data, QUALITIES[-1], img


def _finish(img: Image.Image, limits: Limits, source: tuple[int, int]) -> ImageResult:
    img = _flatten(img)
    img.thumbnail((limits.max_side, limits.max_side), Image.Resampling.LANCZOS)
    data, quality, img = compress(img, limits)
    thumb = img.copy()
    thumb.thumbnail((limits.thumb_side, limits.thumb_side), Image.Resampling.LANCZOS)
    return ImageResult(data, _jpeg(thumb, THUMB_QUALITY), img.width, img.height, quality,
                       *source)


def process_image(data: bytes, pil_format: str, limits: Limits) -> ImageResult:
    """A raster image (``pil_format`` as sniffed) made ready for the model."""
    configure(limits.max_pixels)
    try:
        with Image.open(io.BytesIO(data), formats=[pil_format]) as img:
            width, height = img.size
            if width * height > limits.max_pixels:
                raise ImageRefused(_bomb(width * height, limits))
            if pil_format == "JPEG":
                # Decode at a reduced DCT scale when the image is over twice the bound: what
                # Pillow's thumbnail() does itself (reducing_gap 2.0), which it cannot once
                # exif_transpose has decoded the image.
                scale = min(1.0, limits.max_side / max(width, height))
                img.draft(None, (math.ceil(width * scale * 2), math.ceil(height * scale * 2)))
            img.load()  # the first frame of an animation; raises on truncated data
            oriented = ImageOps.exif_transpose(img)
            return _finish(oriented, limits, (width, height))
    except ImageRefused:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        # raised by Image.open from the header, before any pixel is decoded
        found = re.search(r"\((\d+) pixels\)", str(exc))
        raise ImageRefused(_bomb(int(found.group(1)) if found else 0, limits)) from None
    except MemoryError:
        raise ImageRefused("the image needs more memory than allowed to decode") from None
    except (OSError, SyntaxError, ValueError, EOFError, IndexError, KeyError) as exc:
        # Pillow's ways of saying "broken": truncated streams, bad headers, bad EXIF
        raise ImageRefused(f"the image is truncated or corrupt ({_short(exc)})") from None


def process_svg(data: bytes, limits: Limits) -> ImageResult:
    """An SVG, sanitised, rasterised by resvg, then as any image."""
    import resvg_py

    configure(limits.max_pixels)
    try:
        clean = sanitize(data, max_side=limits.max_side)
    except SvgRefused as exc:
        raise ImageRefused(str(exc)) from None
    try:
        png = resvg_py.svg_to_bytes(svg_string=clean.markup, width=clean.width,
                                    height=clean.height)
    except (ValueError, MemoryError) as exc:
        raise ImageRefused(f"the SVG could not be rendered ({_short(exc)})") from None
    with Image.open(io.BytesIO(png), formats=["PNG"]) as img:
        img.load()
        return _finish(img, limits, (clean.width, clean.height))


def _bomb(pixels: int, limits: Limits) -> str:
    size = f" ({pixels:,})" if pixels else ""
    return (f"the image has too many pixels{size}: at most {limits.max_pixels:,} are accepted "
            "(refused as a possible decompression bomb)")


def _short(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0][:120]
