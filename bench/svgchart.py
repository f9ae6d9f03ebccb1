"""Log-log line charts as plain SVG: panels side by side, one shared legend, no scripts or fonts.

Made for the benchmarks page (GitHub shows an SVG through an <img>, so it must stand alone):
both axes logarithmic with ticks at powers of ten, one polyline per series, dashed horizontal
goal lines. Each series' polyline carries `data-name` so tests can find it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from xml.sax.saxutils import escape, quoteattr

# Tableau's ten colours, taken in turn by series that do not name their own.
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
PANEL_WIDTH, PANEL_HEIGHT = 420, 320
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 16, 36, 52
LEGEND_WIDTH, LEGEND_ROW = 210, 20


@dataclass(frozen=True)
class Series:
    name: str
    points: list[tuple[float, float]]  # (x, y); points with x or y <= 0 cannot be drawn and are left out
    color: str = ""  # the palette's next colour when empty


@dataclass(frozen=True)
class Goal:
    label: str
    y: float
    color: str = "#555555"
    dash: str = "6 4"


@dataclass(frozen=True)
class Panel:
    title: str
    series: list[Series]
    goals: list[Goal] = field(default_factory=list)


def decades(values: list[float]) -> tuple[int, int]:
    """The powers of ten that enclose every value (at least one decade apart)."""
    low = math.floor(math.log10(min(values)))
    high = math.ceil(math.log10(max(values)))
    return low, max(high, low + 1)


def loglog_svg(panels: list[Panel], *, x_label: str, y_label: str) -> str:
    """One SVG document: the panels left to right on shared decades, the legend on the right."""
    xs = [x for p in panels for s in p.series for x, y in s.points if x > 0 and y > 0]
    ys = [y for p in panels for s in p.series for x, y in s.points if x > 0 and y > 0]
    ys += [g.y for p in panels for g in p.goals]
    x_range, y_range = decades(xs), decades(ys)
    colors = _colors(panels)
    width = PANEL_WIDTH * len(panels) + LEGEND_WIDTH
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{PANEL_HEIGHT}" '
        f'viewBox="0 0 {width} {PANEL_HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{PANEL_HEIGHT}" fill="#ffffff"/>',
    ]
    for index, panel in enumerate(panels):
        parts += _panel(panel, index * PANEL_WIDTH, x_range, y_range, colors, x_label, y_label)
    parts += _legend(panels, PANEL_WIDTH * len(panels), colors)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _colors(panels: list[Panel]) -> dict[str, str]:
    """One colour per series name, the same in every panel."""
    colors: dict[str, str] = {}
    for series in (s for p in panels for s in p.series):
        if series.name not in colors:
            colors[series.name] = series.color or PALETTE[len(colors) % len(PALETTE)]
    return colors


def _panel(
    panel: Panel,
    left: int,
    x_range: tuple[int, int],
    y_range: tuple[int, int],
    colors: dict[str, str],
    x_label: str,
    y_label: str,
) -> list[str]:
    x0, x1 = left + MARGIN_LEFT, left + PANEL_WIDTH - MARGIN_RIGHT
    y0, y1 = PANEL_HEIGHT - MARGIN_BOTTOM, MARGIN_TOP  # y0 is the bottom: pixels grow downwards

    def at(value: float, lo: float, hi: float, decade: tuple[int, int]) -> float:
        return lo + (hi - lo) * (math.log10(value) - decade[0]) / (decade[1] - decade[0])

    out = [f'<g class="panel" data-title={quoteattr(panel.title)}>']
    out.append(
        f'<text x="{(x0 + x1) / 2:.1f}" y="20" text-anchor="middle" font-weight="bold">{escape(panel.title)}</text>'
    )
    for power in range(x_range[0], x_range[1] + 1):
        x = at(10.0**power, x0, x1, x_range)
        out.append(f'<line x1="{x:.1f}" y1="{y1}" x2="{x:.1f}" y2="{y0}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{x:.1f}" y="{y0 + 16}" text-anchor="middle">{_power_label(power)}</text>')
    for power in range(y_range[0], y_range[1] + 1):
        y = at(10.0**power, y0, y1, y_range)
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{_power_label(power)}</text>')
    out.append(f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none" stroke="#999999"/>')
    out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{y0 + 36}" text-anchor="middle">{escape(x_label)}</text>')
    middle = (y0 + y1) / 2
    out.append(
        f'<text x="{left + 16}" y="{middle:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 {left + 16} {middle:.1f})">{escape(y_label)}</text>'
    )
    for goal in panel.goals:
        y = at(goal.y, y0, y1, y_range)
        out.append(
            f'<line class="goal" x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="{goal.color}" '
            f'stroke-width="1.5" stroke-dasharray="{goal.dash}"><title>{escape(goal.label)}</title></line>'
        )
    for series in panel.series:
        shown = [(x, y) for x, y in series.points if x > 0 and y > 0]
        if not shown:
            continue
        color = colors[series.name]
        pixels = [(at(x, x0, x1, x_range), at(y, y0, y1, y_range)) for x, y in shown]
        coordinates = " ".join(f"{x:.1f},{y:.1f}" for x, y in pixels)
        out.append(
            f'<polyline class="series" data-name={quoteattr(series.name)} points="{coordinates}" '
            f'fill="none" stroke="{color}" stroke-width="2"><title>{escape(series.name)}</title></polyline>'
        )
        out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>' for x, y in pixels]
    out.append("</g>")
    return out


def _legend(panels: list[Panel], left: int, colors: dict[str, str]) -> list[str]:
    goals = {g.label: g for p in panels for g in p.goals}
    out = ['<g class="legend">']
    row = MARGIN_TOP
    for name, color in colors.items():
        out.append(f'<line x1="{left + 8}" y1="{row}" x2="{left + 32}" y2="{row}" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{left + 40}" y="{row + 4}">{escape(name)}</text>')
        row += LEGEND_ROW
    for goal in goals.values():
        out.append(
            f'<line x1="{left + 8}" y1="{row}" x2="{left + 32}" y2="{row}" stroke="{goal.color}" '
            f'stroke-width="1.5" stroke-dasharray="{goal.dash}"/>'
        )
        out.append(f'<text x="{left + 40}" y="{row + 4}">{escape(goal.label)}</text>')
        row += LEGEND_ROW
    out.append("</g>")
    return out


def _power_label(power: int) -> str:
    """10^power as plain text a reader takes in at a glance: 0.01, 0.1, 1, 10, 100, then 10⁴."""
    if -2 <= power <= 3:
        return f"{10.0**power:g}"
    return "10" + str(power).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
