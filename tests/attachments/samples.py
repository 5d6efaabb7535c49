"""Files for the attachment tests, made here (no binary fixtures in the repository)."""

from __future__ import annotations

import io
import os
import struct
import zlib

from PIL import Image

RED, BLUE = (255, 0, 0), (0, 0, 255)


def halves(size: tuple[int, int] = (400, 200)) -> Image.Image:
    """Left half red, right half blue: rotations are visible."""
    img = Image.new("RGB", size, RED)
    img.paste(BLUE, (size[0] // 2, 0, size[0], size[1]))
    return img


def encode(img: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **options)
    return out.getvalue()


def jpeg_with_orientation(orientation: int = 6, size: tuple[int, int] = (400, 200)) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(halves(size), "JPEG", quality=95, exif=exif)


def noise(size: tuple[int, int]) -> Image.Image:
    return Image.frombytes("RGB", size, os.urandom(size[0] * size[1] * 3))


def two_frame_gif() -> bytes:
    first, second = Image.new("RGB", (40, 30), RED), Image.new("RGB", (40, 30), BLUE)
    return encode(first, "GIF", save_all=True, append_images=[second], duration=100, loop=0)


def png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` (the data is a 1x1 image's): a
    decompression bomb is refused from the header alone."""
    small = encode(Image.new("L", (1, 1)), "PNG")
    ihdr = struct.pack(">II", width, height) + small[24:29]
    chunk = b"IHDR" + ihdr
    return small[:8] + struct.pack(">I", 13) + chunk + struct.pack(
        ">I", zlib.crc32(chunk)) + small[33:]


def truncated_jpeg() -> bytes:
    data = encode(noise((600, 400)), "JPEG", quality=90)
    return data[: len(data) // 2]


EPS = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nnewpath 0 0 moveto showpage\n"
PSD = b"8BPS\x00\x01" + b"\x00" * 6 + b"\x00\x03" + b"\x00\x00\x00\x10" * 2 + b"\x00\x08\x00\x03"
PDF = b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"

SVG_OK = (b'<?xml version="1.0"?>\n<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" '
          b'"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">\n'
          b'<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20" viewBox="0 0 40 20">'
          b'<rect width="20" height="20" fill="red"/><rect x="20" width="20" height="20" '
          b'fill="blue"/></svg>')

SVG_LAUGHS = (b'<?xml version="1.0"?>\n<!DOCTYPE svg [\n<!ENTITY a "lol">\n'
              + b"".join(b'<!ENTITY %c "&%c;&%c;&%c;&%c;&%c;&%c;&%c;&%c;&%c;&%c;">\n'
                         % ((98 + i,) + (97 + i,) * 10) for i in range(9))
              + b']>\n<svg xmlns="http://www.w3.org/2000/svg"><text>&j;</text></svg>')

SVG_HUGE = (b'<svg xmlns="http://www.w3.org/2000/svg" width="1000000" height="500000" '
            b'viewBox="0 0 2 1"><rect width="1" height="1" fill="red"/>'
            b'<rect x="1" width="1" height="1" fill="blue"/></svg>')


def svg_use_bomb(levels: int = 12, fan: int = 10) -> bytes:
    """<use> fan-out: each level shows the previous one ``fan`` times (fan ** levels nodes)."""
    defs = ['<rect id="l0" width="1" height="1"/>']
    for n in range(1, levels + 1):
        uses = "".join(f'<use href="#l{n - 1}" x="{i}"/>' for i in range(fan))
        defs.append(f'<g id="l{n}">{uses}</g>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="100" height="100"><defs>'
            f'{"".join(defs)}</defs><use href="#l{levels}"/></svg>').encode()


def svg_with_external(href: str) -> bytes:
    """An SVG that points at ``href`` in every way it could: image, use, CSS and a filter."""
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
        'width="20" height="20">'
        f'<style>@import url("{href}/a.css"); rect {{ fill: url({href}/p.svg#p) }}</style>'
        f'<image href="{href}/i.png" width="20" height="20"/>'
        f'<image xlink:href="{href}/j.png" width="20" height="20"/>'
        f'<use href="{href}/u.svg#x"/>'
        f'<rect width="20" height="20" style="fill: url(\'{href}/q.svg#q\')" '
        'onload="alert(1)"/>'
        '<script>fetch("/x")</script>'
        '<foreignObject width="20" height="20"><div xmlns="http://www.w3.org/1999/xhtml">'
        f'<img src="{href}/f.png"/></div></foreignObject>'
        '</svg>'
    ).encode()
