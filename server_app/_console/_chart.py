"""The console's alignment curves as inline SVG, drawn on the server (no script, no external
file): each panel shows the raw per-step trace, thin, under its trailing moving average."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sdk.curves import moving_average
from sdk.wire import AlignmentStep

__all__ = ["Curve", "alignment_svg", "latest_run", "step_curve"]

_W, _H, _PAD_L, _PAD_R, _PAD_T, _PAD_B = 420, 200, 52, 12, 26, 30


@dataclass(frozen=True)
class Curve:
    """One quantity per step: ``steps``, its ``raw`` values (NaN where not logged) and their
    moving ``average``, all the same length."""

    name: str
    steps: list[int]
    raw: np.ndarray
    average: np.ndarray


def latest_run(progress: Sequence[AlignmentStep]) -> list[AlignmentStep]:
    """The steps of the run that reported last, in step order (each run counts from 1)."""
    if not progress:
        return []
    run = max(progress, key=lambda s: s.at).run
    return sorted((s for s in progress if s.run == run), key=lambda s: s.step)


def step_curve(steps: Sequence[AlignmentStep], field: str, window: int | None = None) -> Curve:
    """``field`` (``reward``, ``kl`` or ``loss``) of ``steps`` with its moving average."""
    values = [getattr(s, field) for s in steps]
    raw = np.asarray([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    return Curve(field, [s.step for s in steps], raw, moving_average(values, window))


def _tick(value: float) -> str:
    return f"{value:.3g}"


def _panel(curve: Curve, title: str, x0: float) -> list[str]:
    """One panel's SVG elements, offset ``x0`` to the right."""
    out = [f'<g transform="translate({x0:g},0)">',
           f'<rect x="0" y="0" width="{_W}" height="{_H}" fill="#ffffff" stroke="#d0d7de"/>',
           f'<text x="{_W / 2:g}" y="17" text-anchor="middle" font-size="13" '
           f'fill="#24292f">{html.escape(title)}</text>']
    finite = np.isfinite(curve.raw)
    if not finite.any():
        out += [f'<text x="{_W / 2:g}" y="{_H / 2:g}" text-anchor="middle" font-size="12" '
                'fill="#57606a">not reported yet</text>', "</g>"]
        return out
    xs = np.asarray(curve.steps, dtype=np.float64)
    lo, hi = float(np.nanmin(curve.raw)), float(np.nanmax(curve.raw))
    if math.isclose(lo, hi):
        lo, hi = lo - 0.5, hi + 0.5
    x_lo, x_hi = float(xs.min()), float(xs.max())
    x_span = x_hi - x_lo or 1.0
    inner_w, inner_h = _W - _PAD_L - _PAD_R, _H - _PAD_T - _PAD_B

    def point(x: float, y: float) -> str:
        px = _PAD_L + (x - x_lo) / x_span * inner_w
        py = _PAD_T + (hi - y) / (hi - lo) * inner_h
        return f"{px:.1f},{py:.1f}"

    def line(ys: np.ndarray, colour: str, width: float, css: str) -> str:
        pts = " ".join(point(x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(y))
        return (f'<polyline class="{css}" points="{pts}" fill="none" stroke="{colour}" '
                f'stroke-width="{width:g}"/>')

    out += [f'<line x1="{_PAD_L}" y1="{_H - _PAD_B}" x2="{_W - _PAD_R}" y2="{_H - _PAD_B}" '
            'stroke="#8c959f"/>',
            f'<line x1="{_PAD_L}" y1="{_PAD_T}" x2="{_PAD_L}" y2="{_H - _PAD_B}" '
            'stroke="#8c959f"/>',
            f'<text x="{_PAD_L - 4}" y="{_PAD_T + 4}" text-anchor="end" font-size="11" '
            f'fill="#57606a">{_tick(hi)}</text>',
            f'<text x="{_PAD_L - 4}" y="{_H - _PAD_B}" text-anchor="end" font-size="11" '
            f'fill="#57606a">{_tick(lo)}</text>',
            f'<text x="{_PAD_L}" y="{_H - 12}" font-size="11" fill="#57606a">step '
            f'{x_lo:g}</text>',
            f'<text x="{_W - _PAD_R}" y="{_H - 12}" text-anchor="end" font-size="11" '
            f'fill="#57606a">step {x_hi:g}</text>',
            line(curve.raw, "#9ecbff", 1.2, "raw"),
            line(curve.average, "#0550ae", 2.4, "average"), "</g>"]
    return out


def alignment_svg(steps: Sequence[AlignmentStep], window: int | None = None) -> str:
    """Reward and KL per step of ``steps`` (one run), each raw (light) under its moving
    average (dark), as one ``<svg>`` element whose text is escaped."""
    reward, kl = step_curve(steps, "reward", window), step_curve(steps, "kl", window)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * _W + 16}" height="{_H}" '
             f'viewBox="0 0 {2 * _W + 16} {_H}" role="img" aria-label="alignment curves">',
             *_panel(reward, "mean reward per step (raw, moving average)", 0),
             *_panel(kl, "KL to the reference per step (raw, moving average)", _W + 16),
             "</svg>"]
    return "\n".join(parts)
