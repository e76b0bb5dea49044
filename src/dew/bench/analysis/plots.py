"""The one way dew draws a row: its values across records, each with its 95% interval,
published values as reference marks, and changes flagged.

draw(panels, fmt)          one panel per row (or per series of a row), as SVG or PNG bytes
history_svg(series_list)   an architecture page's chart: one panel per device group
comparison_chart(...)      compare --plot's chart: per row, the reference and the run

matplotlib through its object API and the Agg canvas, loaded only when a figure is drawn
(no display, no pyplot). SVG is written deterministically (fixed ids, no date), so the
same records make the same page.
"""

from __future__ import annotations

import dataclasses
import io
import math
import re
from collections.abc import Sequence
from pathlib import Path

from dew.bench.common.files import atomic_write

RUN_COLOR, PUBLISHED_COLOR, CHANGE_COLOR = "#1f5fa8", "#d08a00", "#c0282d"
FIELD_NAMES = {
    "ms_per_step": "ms/step",
    "p50_ms": "p50 ms",
    "samples_per_s": "samples/s",
    "gflop_per_step": "GFLOP/step",
}
INTERVALS = {"ms_per_step": "ms_per_step_ci95", "samples_per_s": "samples_per_s_ci95"}


@dataclasses.dataclass
class Mark:
    """One value of a row in one record."""

    x: str  # its name on the x axis (a date, "run", "reference")
    value: float
    interval: tuple[float, float] | None = None
    published: bool = False  # a reference mark: a published record's value
    flagged: bool = False  # the first run after a flagged change


@dataclasses.dataclass
class Panel:
    title: str
    marks: list[Mark]
    ylabel: str = "ms/step"
    reference: float | None = None  # a published value on this device: a dashed line
    reference_label: str | None = None


def draw(panels: Sequence[Panel], *, fmt: str = "svg", title: str | None = None) -> bytes:
    """The panels in a grid (up to three across), as `fmt` ("svg" or "png") bytes."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    columns = min(3, max(1, len(panels)))
    rows = max(1, math.ceil(len(panels) / columns))
    longest = max((len(p.marks) for p in panels), default=1)
    width = columns * max(3.6, 0.55 * longest + 1.6)
    style = {"svg.hashsalt": "dew", "svg.fonttype": "none", "font.size": 8}
    with matplotlib.rc_context(style):
        fig = Figure(figsize=(width, 2.9 * rows + (0.4 if title else 0)), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(rows, columns, squeeze=False)
        for ax in axes.flat[len(panels) :]:
            ax.set_visible(False)
        for ax, panel in zip(axes.flat, panels, strict=False):
            _draw_panel(ax, panel)
        if title:
            fig.suptitle(title, fontsize=10)
        out = io.BytesIO()
        metadata = {"Date": None} if fmt == "svg" else {"Software": "dew"}
        fig.savefig(out, format=fmt, dpi=120, metadata=metadata)
    return out.getvalue()


def _draw_panel(ax, panel: Panel) -> None:
    xs = list(range(len(panel.marks)))
    ax.plot(xs, [m.value for m in panel.marks], color="#9aa7b8", lw=0.8, zorder=1)
    for x, mark in zip(xs, panel.marks, strict=True):
        color = PUBLISHED_COLOR if mark.published else RUN_COLOR
        if mark.interval is not None:
            low, high = mark.interval
            yerr = [[max(mark.value - low, 0.0)], [max(high - mark.value, 0.0)]]
            ax.errorbar(x, mark.value, yerr=yerr, color=color, capsize=3, lw=1, zorder=2)
        marker = "*" if mark.published else "o"
        ax.plot(x, mark.value, marker, color=color, ms=9 if mark.published else 5, zorder=3)
        if mark.flagged:  # the change lies between this run and the one before
            ax.axvline(x - 0.5, color=CHANGE_COLOR, ls="--", lw=1, zorder=0)
            ax.plot(x, mark.value, "o", mfc="none", mec=CHANGE_COLOR, ms=11, mew=1.5, zorder=4)
        ax.annotate(
            f"{mark.value:.3g}", (x, mark.value), textcoords="offset points", xytext=(0, 6),
            ha="center", fontsize=7,
        )  # fmt: skip
    if panel.reference is not None:
        ax.axhline(panel.reference, color=PUBLISHED_COLOR, ls=":", lw=1.2, zorder=0)
        ax.annotate(
            panel.reference_label or "published", (0, panel.reference), xycoords=("axes fraction",
            "data"), xytext=(2, 3), textcoords="offset points", fontsize=7, color=PUBLISHED_COLOR,
        )  # fmt: skip
    _least_span(ax, panel)
    ax.set_xticks(xs)
    ax.set_xticklabels([m.x for m in panel.marks], rotation=35, ha="right", fontsize=7)
    ax.set_xlim(-0.6, max(len(xs) - 0.4, 0.6))
    ax.set_ylabel(panel.ylabel)
    ax.set_title(panel.title, fontsize=8)
    ax.margins(y=0.2)
    ax.grid(axis="y", color="#e3e7ec", lw=0.6)


def _least_span(ax, panel: Panel, span: float = 0.10) -> None:
    """At least `span` of the values' middle on the y axis: a 1% difference must not fill
    the panel as a 2x one would."""
    values = [m.value for m in panel.marks] + [v for m in panel.marks for v in m.interval or ()]
    if panel.reference is not None:
        values.append(panel.reference)
    if not values:
        return
    low, high = min(values), max(values)
    middle = (low + high) / 2
    if middle > 0 and high - low < span * middle:
        ax.set_ylim(middle * (1 - span * 0.75), middle * (1 + span * 0.75))


def svg_element(data: bytes) -> str:
    """The <svg> element of matplotlib's SVG document, to inline in a page."""
    text = data.decode("utf-8")
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.S)  # RDF: a page needs none
    return text[text.index("<svg") :].strip()


# --- the site's chart ---------------------------------------------------------------------


def history_svg(series_list, *, published_labels: dict | None = None) -> str:
    """An architecture page's chart: one panel per series (dew.bench.site.row_history.Series),
    its runs oldest first; published points are reference marks (stars) and a published
    value of the same device is a dotted line; the first run after a change is ringed."""
    panels = []
    for series in series_list:
        marks = [
            Mark(
                point.entry.day.split(" ")[0] if point.entry.published else point.entry.day,
                point.value,
                point.interval,
                published=point.entry.published,
                flagged=series.change_at(index) is not None,
            )
            for index, point in enumerate(series.points)
        ]
        published = [p for p in series.points if p.entry.published]
        reference = published[-1].value if published else None
        label = f"published {reference:.3g}" if reference is not None else None
        panels.append(Panel(series.title, marks, "ms/step", reference, label))
    return svg_element(draw(panels))


# --- compare --plot -------------------------------------------------------------------------


def row_interval(row, field: str) -> tuple[float, float] | None:
    value = getattr(row, INTERVALS.get(field, ""), None)
    return (value[0], value[1]) if value else None


def comparison_chart(path: str | Path, rows, field: str, run_label: str, reference_label: str):
    """compare --plot: per row with both sides, the reference (a reference mark) and the
    run, each with its 95% interval where the row has samples; written atomically as PNG.
    `rows` have .label, .run and .reference (comparison.RowComparison, parity.ParityRow)."""
    name = FIELD_NAMES.get(field, field)
    panels = []
    for r in rows:
        if r.run is None or r.reference is None:
            continue
        a, b = getattr(r.reference, field, None), getattr(r.run, field, None)
        marks = []
        if a is not None:
            marks.append(Mark("reference", a, row_interval(r.reference, field), published=True))
        if b is not None:
            marks.append(Mark("run", b, row_interval(r.run, field)))
        if marks:
            title = r.label
            if a and b is not None:
                title += f": {(b / a - 1) * 100:+.1f}%"
            verdict = getattr(r, "verdict", None)
            panels.append(Panel(f"{title}, {verdict}" if verdict else title, marks, name))
    title = f"{name}: {Path(run_label).stem} against {Path(reference_label).stem} (95% intervals)"
    if not panels:
        panels = [Panel("no row has both sides", [], name)]
    return atomic_write(path, draw(panels, fmt="png", title=title))
