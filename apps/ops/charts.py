"""A server-rendered SVG bar chart (no script, no library): tokens per day, input and output
side by side. Values are numbers and labels are dates, yet every text is escaped anyway."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from django.utils.safestring import SafeString, mark_safe

SERIES = (("input", "#1D4ED8", "input tokens"), ("output", "#FCA311", "output tokens"))


def _short(n: float) -> str:
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def tokens_by_day(days: Sequence[dict[str, Any]], *, width: int = 960,
                  height: int = 240) -> SafeString:
    left, bottom, top = 56, 28, 12
    plot_w, plot_h = width - left - 8, height - bottom - top
    peak = max([max(d["input"], d["output"]) for d in days] + [1])
    slot = plot_w / max(1, len(days))
    bar = max(1.0, slot * 0.8 / len(SERIES))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="100%" role="img" aria-label="tokens per day" class="usage-chart">',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{width - 8}" y2="{top + plot_h}" '
        'stroke="#9CA3AF"/>',
    ]
    for frac in (0.5, 1.0):
        y = top + plot_h * (1 - frac)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - 8}" y2="{y:.1f}" '
                     'stroke="#E5E7EB"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
                     f'fill="#6B7280">{escape(_short(peak * frac))}</text>')
    label_every = max(1, len(days) // 10)
    for i, day in enumerate(days):
        x0 = left + i * slot + slot * 0.1
        for j, (key, colour, name) in enumerate(SERIES):
            h = plot_h * day[key] / peak
            tip = escape(f"{day['day']:%Y-%m-%d}: {day[key]:,} {name}")
            parts.append(
                f'<rect x="{x0 + j * bar:.1f}" y="{top + plot_h - h:.1f}" width="{bar:.1f}" '
                f'height="{h:.1f}" fill="{colour}" data-day="{day["day"]:%Y-%m-%d}" '
                f'data-series="{key}"><title>{tip}</title></rect>'
            )
        if i % label_every == 0:
            parts.append(f'<text x="{x0 + bar:.1f}" y="{height - 10}" text-anchor="middle" '
                         f'font-size="11" fill="#6B7280">{day["day"]:%m-%d}</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - built above from escaped text and numbers
