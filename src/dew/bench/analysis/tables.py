"""Tables of result records: the seed's layout (tab-separated) or Markdown.

step_table(rows, fmt)      the step benchmark's table, columns as in the seed
                           (compile_only=True: the --compile-only columns)
data_table(rows, fmt)      the loader benchmark's table
table(headers, rows, fmt)  any table: "tsv" (the seed's layout), "md", or "aligned"
for_terminal(fmt)          "terminal" on a terminal for --format auto, else the seed's tsv
terminal_table(...)        any table fitted to the terminal (the step table, compare's)
wrapped(text, width)       prose fitted to the terminal

The "terminal" step table fits the terminal's width (shutil.get_terminal_size, COLUMNS):
aligned, each row's warnings as numbered notes under it (one note for the rows it is
about), the columns that do not fit left out and named, and where that is not enough the
longest values shortened in the middle; files and pipes get the seed's tab-separated
layout (or what --format asks). compare's report on a terminal fits the same way.

Figures (a row with its interval, compare --plot, the site) are dew.bench.analysis.plots's;
a comparison's report is dew.bench.analysis.compare_report's.

A row names itself: `row.label()` (dew.bench.record.schema) is the first cell of every table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dew.bench.analysis.matching import same_gflop
from dew.bench.record.schema import BenchmarkRun, DataRow, StepRow
from dew.bench.record.stack import NOT_RECORDED

if TYPE_CHECKING:
    from dew.bench.runtime.phases import ChipRound

FORMATS = ("tsv", "md", "aligned")
# Left out first when a terminal is too narrow: the least read, the row's name never.
NARROW_DROPS = ("sample", "p10 / p50 / p90 ms", "compile s", "params", "peak GiB", "util",
                "work GFLOP", "GFLOP/step", "samples/s", "batch", "work util")  # fmt: skip
MISSING = "—"
COLUMN_NAMES = {  # a record field as a comparison names it
    "ms_per_step": "ms/step",
    "p50_ms": "p50 ms",
    "p95_ms": "p95 ms",
    "samples_per_s": "samples/s",
    "util": "util",
    "peak_gib": "peak GiB",
    "first_batch_s": "first batch s",
    "gflop_per_step": "GFLOP/step",
}

STEP_HEADERS = (
    "architecture",
    "sample",
    "batch",
    "params",
    "ms/step",
    "p10 / p50 / p90 ms",
    "samples/s",
    "GFLOP/step",
    "util",
    "peak GiB",
    "compile s",
)
COMPILE_HEADERS = (
    "architecture",
    "sample",
    "batch",
    "params",
    "GFLOP/step",
    "cost_analysis GFLOP",
    "compiler peak GiB",
    "compile s",
)
DATA_HEADERS = (
    "dataset",
    "batch",
    "image size",
    "grain workers",
    "threads",
    "samples/s",
    "p50 step",
    "p95 step",
    "first batch s",
)


def num(value: float | None, digits: int = 1, suffix: str = "") -> str:
    """`digits` decimals (the seed's figures, no thousands comma); three significant
    digits where those decimals would keep fewer than two (a cpu-smoke 0.0123 GFLOP would
    otherwise print as 0.0)."""
    if value is None:
        return MISSING
    if value != 0 and abs(value) < 10 ** (1 - digits):
        return f"{value:.3g}{suffix}"
    return f"{value:.{digits}f}{suffix}"


def count(value: int | None) -> str:
    return MISSING if value is None else f"{value:,}"


def percent(value: float | None) -> str:
    return MISSING if value is None else f"{value * 100:.1f}%"


def level(fraction: float) -> str:
    """A noise level or a band as a percent: one decimal from 1% up, two significant
    figures below, where a TPU's levels live (0.04%, which one decimal would print as 0)."""
    points = fraction * 100
    if points >= 1 or points == 0:
        return f"{points:.1f}%"
    return "<0.001%" if points < 0.001 else f"{points:.2g}%"


def step_table(rows: Sequence[StepRow], fmt: str = "tsv", *, compile_only: bool = False) -> str:
    body = []
    for row in rows:
        if row.status == "failed":
            body.append(
                [row.label(), row.sample or MISSING, count(row.batch), f"failed: {row.error}"]
            )
            continue
        if compile_only:
            body.append(
                [
                    row.label(),
                    row.sample or MISSING,
                    count(row.batch),
                    count(row.params),
                    num(row.gflop_per_step),
                    num(row.cost_analysis_gflop),
                    num(row.compiler_peak_gib, 2),
                    num(row.compile_s),
                ]
            )
            continue
        percentiles = " / ".join(num(v) for v in (row.p10_ms, row.p50_ms, row.p90_ms))
        body.append(
            [
                row.label(),
                row.sample or MISSING,
                count(row.batch),
                count(row.params),
                num(row.ms_per_step, 2),
                percentiles,
                num(row.samples_per_s),
                num(row.gflop_per_step),
                percent(row.util),
                num(row.peak_gib, 2),
                num(row.compile_s),
            ]
        )
    headers = list(COMPILE_HEADERS if compile_only else STEP_HEADERS)
    headers, body = _work_columns(rows, body, headers, compile_only)
    headers, body = _noise_columns(rows, body, headers, compile_only)
    if fmt == "terminal":
        return terminal_table(headers, body)
    return table(headers, body, fmt)


def for_terminal(fmt: str, otherwise: str = "tsv") -> str:
    """--format auto: "terminal" when stdout is one, else `otherwise` (the seed's "tsv")."""
    import sys

    if fmt != "auto":
        return fmt
    return "terminal" if sys.stdout.isatty() else otherwise


def terminal_width() -> int:
    """This terminal's columns (COLUMNS first), 120 where none is known."""
    import shutil

    return shutil.get_terminal_size((120, 24)).columns


def terminal_table(
    headers: list[str],
    body: list[list[str]],
    width: int | None = None,
    drops: Sequence[str] = NARROW_DROPS,
) -> str:
    """A table for a terminal of `width` columns (default: this one's): warnings as
    numbered notes, the columns of `drops` that would not fit left out in that order, then
    the longest values shortened in the middle; what was left out is said below."""
    width = width or terminal_width()
    headers, body = list(headers), [list(cells) for cells in body]
    notes: dict[str, int] = {}
    if "warnings" in headers:
        at = headers.index("warnings")
        headers[at] = "notes"
        for cells in body:
            if len(cells) > at:
                said = [w for w in cells[at].split("; ") if w]
                refs = [notes.setdefault(w, len(notes) + 1) for w in said]
                cells[at] = " ".join(f"[{n}]" for n in refs)
    dropped: list[str] = []
    for name in drops:  # in order, until it fits
        if _aligned_width(*_without(headers, body, dropped)) <= width:
            break
        if name in headers:
            dropped.append(name)
    for name in reversed(dropped[:]):  # then back what still fits: a wide late drop may
        fewer = [other for other in dropped if other != name]  # have made room enough
        if _aligned_width(*_without(headers, body, fewer)) <= width:
            dropped = fewer
    headers, body = _without(headers, body, dropped)
    shortened = _shorten(headers, body, width)
    text = table(headers, body, "aligned")
    for note, n in notes.items():
        text += wrapped(f"[{n}] {note}", width, "    ")
    if dropped or shortened:
        left = f"left out to fit {width} columns: {', '.join(dropped)}" if dropped else ""
        cut = f"long values shortened to fit {width} columns" if shortened else ""
        said = "; ".join(filter(None, (left, cut)))
        text += wrapped(f"({said}; --format md or the record has them whole)", width)
    return text


def _without(headers: list[str], body: list[list[str]], names: Sequence[str]):
    """The table without the columns `names` (a failed row's spanning error stays)."""
    keep = [at for at, name in enumerate(headers) if name not in names]
    rows = [
        [cells[at] for at in keep if at < len(cells)]
        if len(cells) == len(headers) or not cells[-1].startswith("failed: ")
        else [cells[at] for at in keep if at < len(cells) - 1] + [cells[-1]]
        for cells in body
    ]
    return [headers[at] for at in keep], rows


def _shorten(headers: list[str], body: list[list[str]], width: int) -> bool:
    """Cut the widest column's longest values in the middle (`…`), never the first
    column's, until the table fits `width` or no cut helps; whether any was cut."""
    cut = False
    while _aligned_width(headers, body) > width:
        columns = range(1, len(headers))
        widest = max(columns, key=lambda i: _column_width(headers, body, i), default=None)
        if widest is None:
            return cut
        now = _column_width(headers, body, widest)
        room = max(len(headers[widest]), 8, now - (_aligned_width(headers, body) - width))
        if room >= now:
            return cut
        for cells in body:
            if len(cells) > widest and len(cells[widest]) > room:
                half = (room - 1) // 2
                cells[widest] = cells[widest][:half] + "…" + cells[widest][-(room - 1 - half) :]
                cut = True
    return cut


def _column_width(headers: list[str], body: list[list[str]], at: int) -> int:
    """As the aligned table draws it: a cell past 60 characters overflows (table)."""
    return min(60, max(len(cells[at]) for cells in [headers, *body] if len(cells) > at))


def wrapped(text: str, width: int, indent: str = "") -> str:
    """`text` as lines of at most `width` (a word longer than that stays whole), the lines
    after the first indented by `indent`; with its newline."""
    import textwrap

    lines = textwrap.wrap(text, width, subsequent_indent=indent, break_long_words=False,
                          break_on_hyphens=False)  # fmt: skip
    return "\n".join(lines or [""]) + "\n"


def _aligned_width(headers: list[str], body: list[list[str]]) -> int:
    first = table(headers, body, "aligned").splitlines()[1]  # the rule under the header
    return len(first)


def departs(row: StepRow) -> bool:
    """Whether the row's work count differs from its GFLOP/step (a ragged dot over every
    group, a Mosaic call's stated cost: docs/conventions.md, "work GFLOP")."""
    work, flops = row.work_gflop_per_step, row.gflop_per_step
    return work is not None and (flops is None or not same_gflop(work, flops))


def _work_columns(rows, body, headers, compile_only):
    """The work count and its util beside GFLOP/step and util, when a row's departs from
    its GFLOP/step: a table without such a row is the seed's."""
    if not any(row.status == "ok" and departs(row) for row in rows):
        return headers, body
    at = headers.index("GFLOP/step") + 1
    added = ["work GFLOP"] if compile_only else ["work GFLOP", "util", "work util"]
    headers[at : at + (0 if compile_only else 1)] = added
    for row, cells in zip(rows, body, strict=True):
        if row.status == "ok":
            shown = [num(row.work_gflop_per_step)]
            if not compile_only:
                shown += [percent(row.util), percent(row.work_util)]
            cells[at : at + (0 if compile_only else 1)] = shown
    return headers, body


def _noise_columns(rows, body, headers, compile_only):
    """The interval (when a row has repeats) and the warnings (when a row has any) as
    columns of their own, so that a run of one repeat prints the seed's table unchanged."""
    ok = [row for row in rows if row.status == "ok"]
    if not compile_only and any(row.repeats and len(row.repeats) > 1 for row in ok):
        at = headers.index("ms/step") + 1
        headers.insert(at, "95% interval")
        for row, cells in zip(rows, body, strict=True):
            if row.status == "ok":
                interval = row.ms_per_step_ci95
                shown = f"{num(interval[0], 2)} - {num(interval[1], 2)}" if interval else MISSING
                cells.insert(at, f"{shown} ({len(row.repeats or [])})")
    if any(row_warnings(row) for row in rows):
        headers.append("warnings")
        for row, cells in zip(rows, body, strict=True):
            if row.status == "ok":
                cells.append("; ".join(row_warnings(row)) or "")
    return headers, body


def row_warnings(row: StepRow) -> list[str]:
    """A row's warnings: its own (noise, a busy host, repeats that compiled otherwise), why
    its GFLOP/step is null, the custom calls its GFLOP/step could not count (counted as 0)
    and, under --gpu-check warn, its GPU's slowdowns. The last three are read from the
    row's fields, which every repeat's merge keeps."""
    warnings = list(row.warnings)
    if row.flops_error:
        warnings.append(f"GFLOP/step not counted: {row.flops_error}")
    if row.uncounted_custom_calls:
        calls = ", ".join(f"{target} x{n}" for target, n in row.uncounted_custom_calls.items())
        warnings.append(f"GFLOP/step counts 0 for custom calls it does not know: {calls}")
    if row.gpu is not None and row.gpu.check == "warn" and row.gpu.slowdowns:
        warnings.append("the GPU slowed itself down: " + "; ".join(row.gpu.slowdowns))
    return warnings


def data_table(rows: Sequence[DataRow], fmt: str = "tsv") -> str:
    body = []
    for row in rows:
        if row.status == "failed":
            body.append(
                [row.dataset, count(row.batch), count(row.image_size), f"failed: {row.error}"]
            )
            continue
        body.append(
            [
                row.dataset,
                count(row.batch),
                count(row.image_size),
                count(row.workers),
                count(row.threads),
                num(row.samples_per_s),
                num(row.p50_ms, 2, " ms"),
                num(row.p95_ms, 1, " ms"),
                num(row.first_batch_s, 2),
            ]
        )
    return table(DATA_HEADERS, body, fmt)


def phase_totals(rows: Sequence[StepRow], fmt: str = "tsv") -> str:
    """The line under the step table: where the sweep's time went, summed over its rows'
    processes (dew.bench.runtime.phases), each phase's CPU seconds beside it where every one
    of its kind kept them, and the wall time from the first process start to the last
    phase's end. Empty when no row has phases (records before schema 3)."""
    from dew.bench.runtime.phases import cpu_totals, of_rows, totals

    phases = of_rows(rows)
    if not phases:
        return ""
    sums, cpu = totals(phases), cpu_totals(phases)
    wall = max(p.start + p.seconds for p in phases) - min(p.start for p in phases)
    parts = ", ".join(
        f"{name} {seconds:.1f}" + (f" (CPU {cpu[name]:.1f})" if name in cpu else "")
        for name, seconds in sums.items()
    )
    text = (
        f"phases (s, summed over {len(rows)} rows' processes): {parts}; "
        f"sum {sum(sums.values()):.1f}; wall {wall:.1f} from the first process start"
    )
    return f"# {text}\n" if fmt == "tsv" else f"\n{text}\n"


CHIP_ROUND_HEADERS = ["round", "cases", "open s", "load s", "init s", "timed s", "round s"]


def chip_rounds_table(rounds: Sequence[ChipRound], fmt: str = "tsv") -> str:
    """A record's held-chip rounds (dew.bench.runtime.phases.chip_rounds): the chip's
    opening, the programs' loads side by side (their wall clock), the states put on the
    chip and the windows (summed over the cases), and the round's wall clock."""
    body = [
        [str(r.number), str(r.cases), num(r.open_s), num(r.load_s), num(r.init_s),
         num(r.timed_s), num(r.wall_s)]
        for r in rounds
    ]  # fmt: skip
    return table(CHIP_ROUND_HEADERS, body, fmt)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], fmt: str = "tsv") -> str:
    """Render a table; a short row (a failed one) leaves its last cell to span the rest."""
    if fmt not in FORMATS:
        raise ValueError(f"table format {fmt!r} is not one of: {', '.join(FORMATS)}")
    width = len(headers)
    full = [list(r) + [""] * (width - len(r)) for r in rows]
    if fmt == "tsv":
        return "\n".join("\t".join(r).rstrip("\t") for r in [list(headers), *full]) + "\n"
    if fmt == "md":

        def line(cells):
            return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

        out = [line(headers), "|" + "---|" * width]
        out += [line(r) for r in full]
        return "\n".join(out) + "\n"
    widths = [max(len(str(r[i])) for r in [list(headers), *full]) for i in range(width)]
    # A failed row's long error would widen its column for everyone; let it overflow.
    widths = [min(w, 60) for w in widths]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [list(headers), *full]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


# --- a record in one phrase ---------------------------------------------------------------


def describe(record: BenchmarkRun) -> str:
    """When, on what and at which commit a record was measured, in one phrase."""
    env = record.environment
    device = env.devices.kind if env.devices and env.devices.kind else NOT_RECORDED
    commit = env.code.commit if env.code and env.code.commit else NOT_RECORDED
    return f"{record.created or 'date not recorded'}, {device}, dew {commit}"
