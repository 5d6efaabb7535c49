"""The image functions the pool runs (called here in-process): orientation, the size bound, the
quality ladder, every format, and the refusals."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from apps.attachments.imaging import (
    ImageRefused,
    Limits,
    base64_length,
    process_image,
    process_svg,
)
from apps.attachments.sniff import IMAGE, OTHER, SVG, TEXT, sniff
from tests.attachments import samples
from tests.attachments.samples import BLUE, RED, encode, halves, noise


def _decoded(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    assert img.format == "JPEG"
    return img.convert("RGB")


def _close(pixel: tuple[int, ...], colour: tuple[int, int, int]) -> bool:
    return all(abs(a - b) < 40 for a, b in zip(pixel, colour, strict=False))


def _run(data: bytes, limits: Limits | None = None):
    found = sniff(data)
    assert found.kind == IMAGE
    return process_image(data, found.pil_format, limits or Limits())


def test_exif_orientation_6_arrives_rotated() -> None:
    result = _run(samples.jpeg_with_orientation(6))  # stored 400x200, shown turned clockwise
    img = _decoded(result.jpeg)
    assert img.size == (200, 400) == (result.width, result.height)
    assert (result.source_width, result.source_height) == (400, 200)
    assert _close(img.getpixel((100, 50)), RED) and _close(img.getpixel((100, 350)), BLUE)
    assert "exif" not in img.info or Image.Exif().get(0x0112) is None  # nothing left to rotate


def test_images_are_fitted_within_2000_keeping_their_aspect() -> None:
    result = _run(encode(halves((5000, 1250)), "PNG"))
    assert (result.width, result.height) == (2000, 500)
    assert _decoded(result.jpeg).size == (2000, 500)
    small = _run(encode(halves((300, 100)), "PNG"))
    assert (small.width, small.height) == (300, 100)  # never enlarged
    thumb = Image.open(io.BytesIO(result.thumbnail))
    assert thumb.format == "JPEG" and thumb.size == (256, 64)


def test_the_quality_ladder_takes_the_first_quality_under_the_bound() -> None:
    img = noise((2000, 2000))
    sizes = {q: base64_length(len(encode(img, "JPEG", quality=q))) for q in (80, 60, 40, 20)}
    bound = (sizes[60] + sizes[40]) // 2  # 80 and 60 are too big, 40 fits
    result = _run(encode(img, "PNG"), Limits(max_base64=bound))
    assert result.quality == 40
    assert base64_length(len(result.jpeg)) <= bound
    assert len(base64.b64encode(result.jpeg)) <= bound
    assert (result.width, result.height) == (2000, 2000)  # the ladder alone was enough


def test_past_quality_20_the_image_is_scaled_down_until_it_fits() -> None:
    img = noise((1500, 1000))
    bound = base64_length(len(encode(img, "JPEG", quality=20))) // 4
    result = _run(encode(img, "PNG"), Limits(max_base64=bound))
    assert result.quality == 20
    assert base64_length(len(result.jpeg)) <= bound
    assert result.width < 1500 and result.height < 1000
    assert abs(result.width / result.height - 1.5) < 0.01


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "TIFF", "WEBP", "JPEG"])
def test_every_raster_format_is_decoded(fmt: str) -> None:
    data = encode(halves((64, 32)), fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    result = _run(data)
    img = _decoded(result.jpeg)
    assert img.size == (64, 32)
    assert _close(img.getpixel((8, 16)), RED) and _close(img.getpixel((56, 16)), BLUE)


def test_a_gif_gives_its_first_frame() -> None:
    img = _decoded(_run(samples.two_frame_gif()).jpeg)
    assert _close(img.getpixel((20, 15)), RED)


def test_transparency_is_flattened_onto_white() -> None:
    rgba = Image.new("RGBA", (20, 20), (0, 0, 0, 0))
    img = _decoded(_run(encode(rgba, "PNG")).jpeg)
    assert _close(img.getpixel((10, 10)), (255, 255, 255))


def test_a_decompression_bomb_is_refused_from_its_header() -> None:
    bomb = samples.png_claiming(100_000, 100_000)
    with pytest.raises(ImageRefused, match=r"too many pixels \(10,000,000,000\)"):
        _run(bomb)
    with pytest.raises(ImageRefused, match="too many pixels"):
        _run(samples.png_claiming(8000, 7000), Limits(max_pixels=50_000_000))


def test_pillows_bomb_warning_is_an_error() -> None:
    # 1600 pixels: past the limit of 1000 but under Pillow's own error threshold (2x)
    with pytest.raises(ImageRefused, match="decompression bomb"):
        _run(encode(Image.new("RGB", (40, 40)), "PNG"), Limits(max_pixels=1000))


def test_a_truncated_image_is_refused() -> None:
    with pytest.raises(ImageRefused, match="truncated or corrupt"):
        _run(samples.truncated_jpeg())


def test_a_broken_header_is_refused() -> None:
    with pytest.raises(ImageRefused, match="truncated or corrupt"):
        _run(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)


@pytest.mark.parametrize(("data", "kind", "label"), [
    (samples.EPS, OTHER, "EPS"),
    (samples.PSD, OTHER, "Photoshop"),
    (samples.PDF, OTHER, "PDF"),
    (b"PK\x03\x04" + b"\x00" * 30, OTHER, "ZIP"),
    ("\ufeffhello".encode("utf-16"), OTHER, "UTF-16"),
    (b"\x00\x01\x02binary", OTHER, "binary"),
    (b"BMW is a car, not a bitmap", TEXT, "text"),
    ("caf\xe9 au lait".encode("latin-1"), TEXT, "text"),  # text; UTF-8 is checked later
    (samples.SVG_OK, SVG, "SVG"),
    (b"<svg><rect/></svg>", SVG, "SVG"),
    (b"<html><body><svg></svg></body></html>", TEXT, "text"),
])
def test_magic_bytes_decide_the_type(data: bytes, kind: str, label: str) -> None:
    found = sniff(data)
    assert found.kind == kind and label in found.label


def test_svg_is_rasterised_at_its_size_scaled_up_when_small() -> None:
    result = process_svg(samples.SVG_OK, Limits())  # 40x20 with the standard DOCTYPE
    img = _decoded(result.jpeg)
    assert img.size == (512, 256)
    assert _close(img.getpixel((100, 128)), RED) and _close(img.getpixel((400, 128)), BLUE)


def test_an_svg_with_huge_dimensions_is_fitted() -> None:
    result = process_svg(samples.SVG_HUGE, Limits())
    assert (result.width, result.height) == (2000, 1000)


def test_svg_entities_are_refused() -> None:
    with pytest.raises(ImageRefused, match="DTD or entities"):
        process_svg(samples.SVG_LAUGHS, Limits())


def test_an_svg_use_bomb_is_refused_before_rendering() -> None:
    with pytest.raises(ImageRefused, match="expand to more than"):
        process_svg(samples.svg_use_bomb(), Limits())
    loop = (b'<svg xmlns="http://www.w3.org/2000/svg"><g id="a"><use href="#b"/></g>'
            b'<g id="b"><use href="#a"/></g></svg>')
    with pytest.raises(ImageRefused, match="loop"):
        process_svg(loop, Limits())


def test_svg_external_references_and_script_are_stripped(tmp_path) -> None:
    from apps.attachments.svg import sanitize

    blue = tmp_path / "blue.png"
    Image.new("RGB", (20, 20), BLUE).save(blue)
    # resvg would draw a file named by an absolute path: what reaches it must name nothing
    clean = sanitize(samples.svg_with_external(str(blue)[: -len("/blue.png")]), max_side=2000)
    for gone in (str(tmp_path), "script", "foreignObject", "onload", "@import", "fetch"):
        assert gone not in clean.markup
    direct = (f'<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20">'
              f'<rect width="20" height="20" fill="red"/>'
              f'<image href="{blue}" width="20" height="20"/></svg>').encode()
    img = _decoded(process_svg(direct, Limits()).jpeg)
    assert _close(img.getpixel((10, 10)), RED)  # the file was not drawn over the red


def test_svg_fragments_and_data_images_are_kept() -> None:
    from apps.attachments.svg import sanitize

    pixel = base64.b64encode(encode(Image.new("RGB", (1, 1), BLUE), "PNG")).decode()
    markup = (f'<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20"><defs>'
              f'<linearGradient id="g"><stop offset="0" stop-color="red"/></linearGradient>'
              f'</defs><rect width="20" height="20" fill="url(#g)"/>'
              f'<image href="data:image/png;base64,{pixel}" width="10" height="10"/></svg>')
    clean = sanitize(markup.encode(), max_side=2000)
    assert "url(#g)" in clean.markup and f"data:image/png;base64,{pixel}" in clean.markup
    img = _decoded(process_svg(markup.encode(), Limits()).jpeg)
    assert _close(img.getpixel((100, 100)), BLUE) and _close(img.getpixel((400, 400)), RED)


def test_svg_data_uris_of_svg_are_not_followed() -> None:
    from apps.attachments.svg import sanitize

    inner = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg"/>').decode()
    markup = (f'<svg xmlns="http://www.w3.org/2000/svg"><image '
              f'href="data:image/svg+xml;base64,{inner}"/></svg>').encode()
    assert "data:image/svg" not in sanitize(markup, max_side=2000).markup


def test_broken_svg_is_refused() -> None:
    with pytest.raises(ImageRefused, match="not well-formed"):
        process_svg(b"<svg xmlns='http://www.w3.org/2000/svg'><rect></svg>", Limits())
    with pytest.raises(ImageRefused, match="nests deeper"):
        process_svg(b"<svg>" + b"<g>" * 300 + b"</g>" * 300 + b"</svg>", Limits())
