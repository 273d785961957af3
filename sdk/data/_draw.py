"""PIL drawing primitives shared by the synthetic categories (no font files needed)."""

from __future__ import annotations

from functools import lru_cache

from PIL import Image, ImageDraw, ImageFont

__all__ = ["COLORS", "Box", "blank", "draw_shape", "draw_text_centered", "font"]

# Saturated, well-separated colours: a tiny vision encoder tells them apart after a minute.
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (230, 200, 30),
    "purple": (140, 50, 170),
    "orange": (245, 130, 20),
    "black": (0, 0, 0),
    "white": (255, 255, 255),
}

Box = tuple[float, float, float, float]  # (left, top, right, bottom) in pixels


def blank(size: int, color: tuple[int, int, int] = (255, 255, 255)) -> Image.Image:
    """A square RGB canvas."""
    return Image.new("RGB", (size, size), color)


@lru_cache(maxsize=64)
def font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """Pillow's bundled font at ``size`` px (Pillow >= 10.1 scales it without a font file)."""
    return ImageFont.load_default(size=max(6, size))


def draw_shape(draw: ImageDraw.ImageDraw, shape: str, box: Box, fill: tuple[int, int, int]) -> None:
    """Draw a filled ``circle``, ``square`` or ``triangle`` inside ``box``."""
    left, top, right, bottom = box
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    elif shape == "triangle":
        draw.polygon([((left + right) / 2, top), (right, bottom), (left, bottom)], fill=fill)
    else:
        raise ValueError(f"unknown shape {shape!r}")


def draw_text_centered(
    draw: ImageDraw.ImageDraw,
    text: str,
    center: tuple[float, float],
    size: int,
    fill: tuple[int, int, int] = (0, 0, 0),
) -> None:
    """Draw ``text`` so that its ink box is centred on ``center``."""
    draw.text(center, text, font=font(size), fill=fill, anchor="mm")
