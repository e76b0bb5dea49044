"""A comparison's report (dew.bench.analysis.comparison): Markdown, aligned text or JSON.

Text: the first line (`headline`: the outcome in plain words, or what these two records
cannot show and what would), the header (the records, the host's drift, the noise assumed
and where it came from), the stack differences, one line per row (the figures, the
timing's ratio with its 95% interval, the other ratios, the p after Holm, the detectable
change and the repeats a side the target change would need, whether both sides ran the
same compiled program, the verdict), the notes, and the verdict's line, which says
plainly what the comparison could not have detected. JSON (`as_json`): one object with the
same content for machines (the site, CI); its fields are listed in docs/reproducing.md.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from dew.bench.analysis import judge
from dew.bench.analysis.comparison import Comparison, RowComparison
from dew.bench.analysis.judge import EXIT_CODES
from dew.bench.analysis.kinds import KINDS
from dew.bench.analysis.tables import (
    MISSING,
    describe,
    level,
    num,
    table,
    terminal_table,
    terminal_width,
    wrapped,
)
from dew.bench.record.schema import BenchmarkRun

VERDICTS = ("faster", "slower", "same", "undecided", "failed in this run")
DESIGN = (
    "design: two records made at different times (not interleaved): the whole run's shift and "
    "each row's own run level are assumed from the history, not cancelled"
)
INTERLEAVES = " (nox -s ab interleaves)"
AGAINST = (
    "; against the shift: the row's ratio over the whole run's shift (the median of the "
    "rows' ratios), which its faster/slower judges; `same` needs its whole change shown "
    "inside the band"
)


def _ratio_text(ratio: float | None) -> str:
    if ratio is None:
        return MISSING
    return f"{ratio:.3f} ({(ratio - 1) * 100:+.1f}%)"


def shown_estimate(row: RowComparison, rate: bool) -> tuple[float, float, float] | None:
    """The timing ratio the verdict judged, of the repeats' geometric means, and its 95%
    interval, in the field's own direction (a `rate`, samples/s, inverts); None without
    one. The row's own figures are medians, whose ratio can differ when the repeats are
    skewed."""
    if row.difference is None:
        return None
    diff = row.difference
    if rate:
        return 1 / diff.ratio, 1 / diff.high, 1 / diff.low
    return diff.ratio, diff.low, diff.high


def _directed(ratios: tuple[float, float, float], rate: bool) -> tuple[float, float, float]:
    ratio, low, high = ratios
    return (1 / ratio, 1 / high, 1 / low) if rate else (ratio, low, high)


def changes(row: RowComparison, cmp: Comparison) -> dict[str, Any]:
    """The row's three figures of change, the one its verdict judged first: `against_shift`
    (its ratio over the whole run's shift, 3 rows or more), `total` (the ratio of the
    repeats' geometric means) each with its 95% interval, and `median_ratio` (of the rows'
    own figures, medians of their repeats); in the field's own direction."""
    rate = cmp.rate
    total = shown_estimate(row, rate)
    whole = None if total is None else {"ratio": total[0], "interval": list(total[1:])}
    if row.relative is None:
        parts = {"total": whole, "against_shift": None}
    else:
        ratio, low, high = _directed(row.relative, rate)
        against = {"ratio": ratio, "interval": [low, high]}
        parts = ({"against_shift": against, "total": whole} if row.against_shift
                 else {"total": whole, "against_shift": against})  # fmt: skip
    return {**parts, "median_ratio": row.ratios.get(cmp.timing)}


def _percent(fraction: float | None) -> str:
    return MISSING if fraction is None else f"{fraction:.0%}"


def _repeats_text(row: RowComparison, target: float) -> str:
    if row.detect is None:
        return MISSING
    n = row.detect.repeats_for(target)
    return f"never (floor {row.detect.floor:.0%})" if n is None else str(n)


def noise_line(cmp: Comparison) -> str | None:
    if cmp.noise is None:
        return None
    n = cmp.noise.pooled
    return (f"noise assumed: process {level(n.process)} ({n.process_df:g} df), a row's run "
            f"level {level(n.run)} ({n.run_df:g} df), the whole run's shift {level(n.shift)} "
            f"({n.shift_df:g} df), from {cmp.noise.source}")  # fmt: skip


def shift_line(cmp: Comparison) -> str | None:
    if cmp.shift is None:
        return None
    level = cmp.noise.pooled.shift if cmp.noise else 0.0
    return cmp.shift.line(level)


def comparison(
    cmp: Comparison,
    run: BenchmarkRun,
    ref: BenchmarkRun,
    fmt: str = "md",
    width: int = 0,
    lead: str = "",
) -> str:
    """The report ("md", "text", or "terminal": text fitted to `width` columns, default this
    terminal's): stack, rows, notes, verdict; `lead` opens the headline (a partial side)."""
    style = "md" if fmt == "md" else "aligned"
    h = "### " if fmt == "md" else ""
    width = width or terminal_width()

    def render(headers, body, drops=()) -> str:
        if fmt == "terminal":  # fitted: `drops` left out first, then long values shortened
            return terminal_table(list(headers), [list(cells) for cells in body], width, drops)
        return table(headers, body, style)

    design = DESIGN + (INTERLEAVES if _ab_runs(cmp) else "")
    header_lines = [design, cmp.host_line, noise_line(cmp), shift_line(cmp)]
    out = [
        f"{'## ' if fmt == 'md' else ''}Comparison (noise band ±{cmp.band:g}%)",
        "",
        f"**{lead}{headline(cmp)}**" if fmt == "md" else lead + headline(cmp),
        "",
        f"- run: {cmp.run_label} ({describe(run)})",
        f"- reference: {cmp.reference_label} ({describe(ref)})",
        *[f"- {line}" for line in header_lines if line],
        "",
        f"{h}Stack differences",
        "",
    ]
    if cmp.stack:
        stack = [(d.what, d.run, d.reference) for d in cmp.stack]
        out.append(render(("what", "run", "reference"), stack))
    else:
        out.append("none recorded\n")
    if cmp.not_recorded:
        out.append(f"Recorded on one side only: {', '.join(cmp.not_recorded)}.\n")
    timing = cmp.column(cmp.timing)
    target = f"n for {cmp.target:.0%}"
    headers = ["row", f"{timing} run", f"{timing} ref"]
    headers += [f"{cmp.column(f)} ratio" for f in cmp.fields]
    shifted = cmp.shift is not None
    headers += ["against the shift"] if shifted else []
    headers += ["p (Holm)", "MDE", target]
    compiled = any(r.compiled for r in cmp.rows)  # step rows with fingerprints on both sides
    headers += ["compiled", "verdict"] if compiled else ["verdict"]
    body = []
    for r in cmp.rows:
        if r.run is None:  # listed in one line below the table
            continue
        b = getattr(r.reference, cmp.timing) if r.reference else None
        ratios = [_ratio_text(r.ratios.get(f)) for f in cmp.fields]
        estimate = shown_estimate(r, cmp.rate)
        if estimate is not None:  # the ratio the interval and the verdict are about
            ratio, low, high = estimate
            ratios[0] = f"{_ratio_text(ratio)} [{low:.3f}, {high:.3f}]"
        p = MISSING if r.adjusted_p is None else f"{r.adjusted_p:.3g}"
        mde = _percent(r.detect.mde if r.detect else None)
        if shifted:
            rel = r.relative
            ratios.append(MISSING if rel is None else
                          f"{_ratio_text(rel[0])} [{rel[1]:.3f}, {rel[2]:.3f}]")  # fmt: skip
        body.append([r.label, num(getattr(r.run, cmp.timing), 2), num(b, 2), *ratios, p, mde,
                     _repeats_text(r, cmp.target),
                     *([r.compiled or MISSING] if compiled else []), r.verdict])  # fmt: skip
    # On a narrow terminal the least read columns go first; the row, its timing ratio with
    # its interval and its verdict stay.
    drops = [*(f"{cmp.column(f)} ratio" for f in cmp.fields[1:]), "compiled", target,
             f"{timing} ref", f"{timing} run", "p (Holm)", "against the shift", "MDE"]  # fmt: skip
    out += [f"{h}Rows", "", render(headers, body, drops)]
    out.append(
        f"Ratios are run / reference; with an interval, the {timing} ratio is that of the "
        f"repeats' geometric means and the interval its 95% interval (the repeats and the run "
        f"level){AGAINST if shifted else ''}; "
        f"MDE: the smallest change the row would call with 80% "
        f"power; {target}: repeats a side for an MDE of {cmp.target:.0%}"
        + (
            "; compiled: whether both sides ran the same compiled program (the fingerprints "
            "of the optimized HLO: docs/conventions.md).\n"
            if compiled
            else ".\n"
        )
    )
    absent = [r.label for r in cmp.rows if r.run is None]
    if absent:
        out.append(f"Reference rows not in this run: {', '.join(absent)}.\n")
    notes = grouped_notes(cmp.rows)
    if notes:
        out += ["Notes:", *notes, ""]
    out += [f"{h}Verdict", "", summary(cmp), ""]
    if fmt == "terminal":  # a table is one entry of several lines, fitted already
        out = [entry if "\n" in entry.rstrip("\n") else
               wrapped(entry, width, "  " if entry.startswith("- ") else "")[:-1]
               + "\n" * entry.endswith("\n") for entry in out]  # fmt: skip
    return "\n".join(out)


def grouped_notes(rows: list[RowComparison]) -> list[str]:
    """One line per note, naming every row it is about (the same cause once, not a line
    per row), in the order the notes first appear."""
    by_note: dict[str, list[str]] = {}
    for row in rows:
        for note in row.notes:
            by_note.setdefault(note, []).append(row.label)
    return [f"- {', '.join(labels)}: {note}" for note, labels in by_note.items()]


def summary(cmp: Comparison) -> str:
    """The verdict's line: the outcome, the tally, what changed, and what could not be seen
    or would decide."""
    counted = cmp.counted
    outcome = cmp.outcome
    if not counted:  # nothing was held against anything: no verdict either way
        return (
            f"{outcome}: nothing compared: no row of the run has a comparable reference row "
            "(another model, preset or device; see the rows' verdicts)"
        )
    tally = {word: sum(r.verdict == word for r in counted) for word in VERDICTS}
    line = f"{outcome}: {len(counted)} comparable rows: " + ", ".join(
        f"{count} {verdict}" for verdict, count in tally.items() if count
    )
    line += f" (band ±{cmp.band:g}%, alpha {cmp.alpha:g} after Holm-Bonferroni)"
    if cmp.shift is not None and cmp.shift.word in ("faster", "slower"):
        line += f"; the whole run {cmp.shift.word} ({(cmp.shift.ratio - 1) * 100:+.1f}%)"
    outside = [r for r in counted if r.changed]
    if outside:
        line += "; " + "; ".join(
            f"{r.label} {r.verdict}"
            + (
                f" ({r.judged[0] - 1:+.1%}{' against the shift' if r.against_shift else ''})"
                if r.difference is not None
                else ""
            )  # fmt: skip
            for r in outside
        )
    if outcome == "REPRODUCED":
        return line + f". Every row shown within ±{cmp.band:g}% (its 90% interval)"
    if cmp.detectable is not None:
        line += (f". This comparison could not detect a change of less than "
                 f"{cmp.detectable:.0%} in every row")  # fmt: skip
        best = min((r.detect.mde for r in counted if r.detect), default=None)
        if best is not None and best < cmp.detectable:
            line += f" ({best:.0%} in its best row)"
    if outcome == "INCONCLUSIVE":
        line += _what_decides(cmp)
    return line


def _what_decides(cmp: Comparison) -> str:
    """What would decide an inconclusive comparison: repeats a side, or interleaved rounds."""
    tested = [r for r in cmp.counted if r.detect is not None]
    if not tested:
        return ""
    needs = [r.detect.repeats_for(cmp.target) for r in tested]
    rounds = [r.rounds for r in tested]
    said = f". To detect {cmp.target:.0%}: "
    if all(n is not None for n in needs):
        said += f"{max(needs)} repeats a side"
    else:
        floor = max(r.detect.floor for r in tested)
        said += f"no number of repeats (the runs' levels alone keep it above {floor:.0%})"
    if all(n is not None for n in rounds) and _ab_runs(cmp):
        said += f", or {max(rounds)} interleaved rounds (nox -s ab: the run levels cancel)"
    return said + "." + _what_shows_same(cmp)


def headline(cmp: Comparison) -> str:
    """The verdict's first line, in words one can act on without the statistics: what
    happened, or why these two records cannot tell and what would; then any repeat that
    stands out from its row's others (dew.bench.analysis.outliers) and what would settle it."""
    line = _verdict_line(cmp)
    if not cmp.outliers:
        return line
    first, more = cmp.outliers[0], len(cmp.outliers) - 1
    return (f"{line} A repeat stands out: {first.words()}"
            + (f" ({more} more in the rows' notes)" if more else "")
            + "; more repeats of that row (`--resume` with a larger --repeats) or `dew ab` "
            "would show whether it recurs.")  # fmt: skip


def _verdict_line(cmp: Comparison) -> str:
    counted, band = cmp.counted, f"{cmp.band:g}%"
    if not counted:
        return "Nothing compared: no row of the run has a comparable reference row."
    if cmp.outcome == judge.REPRODUCED:
        return f"Reproduced: every row within ±{band} of the reference."
    if cmp.outcome == judge.NOT_REPRODUCED:
        changed = [f"{r.label} {r.verdict}" + (f" ({r.judged[0] - 1:+.0%}"
                   f"{' against the rest' if r.against_shift else ''})" if r.difference else "")
                   for r in counted if r.changed]  # fmt: skip
        if cmp.shift is not None and cmp.shift.word in ("faster", "slower"):
            changed.insert(0, f"the whole run {cmp.shift.ratio - 1:+.0%}")
        return f"Not reproduced: {'; '.join(changed)}."
    shown = judge.reach(cmp.counted, cmp.band)
    if shown is not None and shown.smallest > cmp.band / 100:
        rounds = ("no number of `dew ab` rounds would show it" if shown.rounds is None else
                  f"Run `dew ab` with {shown.rounds} rounds to see ±{band}")  # fmt: skip
        if not _ab_runs(cmp):  # no interleaved rounds of these rows: repeats cannot either
            rounds = "No number of repeats would show it: the two runs' levels alone are wider"
        return (f"Can't tell: this host's noise hides changes under {shown.smallest:.0%}, "
                f"more than the ±{band} asked for. {rounds}.")  # fmt: skip
    undecided = len(cmp.undecided)
    more = [] if shown is None else [
        f"{shown.repeats} repeats a side" if shown.repeats else None,
        f"`dew ab` with {shown.rounds} rounds" if shown.rounds and _ab_runs(cmp) else None,
    ]  # fmt: skip
    more = [m for m in more if m]
    return (
        f"Can't tell yet: {undecided} of {len(counted)} rows neither shown within ±{band} "
        "nor beyond it" + (f"; {' or '.join(more)} would decide." if more else ".")
    )


def _what_shows_same(cmp: Comparison) -> str:
    """The repeats a side and the interleaved rounds after which a row with no change would
    show its 90% interval inside the band (what REPRODUCED would take), and the narrowest
    band two records like these can show."""
    shown = judge.reach(cmp.counted, cmp.band)
    if shown is None:
        return ""
    said = f" To show every row the same within ±{cmp.band:g}%: "
    if shown.repeats is not None:
        said += f"{shown.repeats} repeats a side"
    else:
        said += (f"no number of repeats (two records like these show no band narrower than "
                 f"±{shown.smallest:.0%}: their run levels alone)")  # fmt: skip
    if not _ab_runs(cmp):
        return said + "."
    rounds = "more than 1000" if shown.rounds is None else str(shown.rounds)
    return said + f", or {rounds} interleaved rounds."


def _ab_runs(cmp: Comparison) -> bool:
    """Whether `dew ab` can run these rows interleaved (the loader's it cannot): only then
    is it suggested."""
    return KINDS[cmp.kind].interleaved


# --- JSON ---------------------------------------------------------------------------------


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def row_json(row: RowComparison, cmp: Comparison) -> dict[str, Any]:
    diff, detect = row.difference, row.detect
    return {
        "label": row.label,
        "run": getattr(row.run, cmp.timing) if row.run else None,
        "reference": getattr(row.reference, cmp.timing) if row.reference else None,
        "judged": None if diff is None else "against_shift" if row.against_shift else "total",
        "changes": changes(row, cmp),
        "repeats": list(diff.repeats) if diff else None,
        "p_holm": row.adjusted_p,
        "verdict": row.verdict,
        "reason": row.why,
        "counts": row.counts,
        "mde": detect.mde if detect else None,
        "mde_floor": detect.floor if detect else None,
        "repeats_for_target": detect.repeats_for(cmp.target) if detect else None,
        "run_noise": row.noise.run if row.noise else None,
        "interleaved_rounds_for_target": row.rounds,
        "one_process": diff.one_draw if diff else None,
        "compiled": row.compiled,
        "ratios": row.ratios,
        "notes": row.notes,
    }


def as_json(cmp: Comparison) -> dict[str, Any]:
    """The comparison as one JSON object (docs/reproducing.md lists the fields)."""
    noise = cmp.noise.pooled if cmp.noise else None
    return {
        "run": cmp.run_label,
        "reference": cmp.reference_label,
        "kind": cmp.kind,
        "timing": cmp.timing,
        "band": cmp.band,
        "alpha": cmp.alpha,
        "target": cmp.target,
        "outcome": cmp.outcome,
        "exit": EXIT_CODES[cmp.outcome],
        "reproduced": cmp.reproduced,
        "headline": headline(cmp),
        "summary": summary(cmp),
        "design": "records",
        "detectable": cmp.detectable,
        "shift": None if cmp.shift is None else {
            "ratio": cmp.shift.ratio, "interval": [cmp.shift.low, cmp.shift.high],
            "p_holm": cmp.shift.p_holm, "verdict": cmp.shift.word, "spread": cmp.shift.spread,
        },
        "noise": None if noise is None else {
            "process": noise.process, "process_df": _finite(noise.process_df),
            "run": noise.run, "run_df": _finite(noise.run_df),
            "shift": noise.shift, "shift_df": _finite(noise.shift_df),
            "source": cmp.noise.source,
            "rows": {label: {"process": n.process, "run": n.run}
                     for label, n in sorted(cmp.noise.rows.items())},
        },
        "outliers": [dataclasses.asdict(outlier) for outlier in cmp.outliers],
        "host_drift": None if cmp.host is None else {
            "ratio": cmp.host.ratio, "interval": [cmp.host.low, cmp.host.high],
        },
        "stack": [{"what": d.what, "run": d.run, "reference": d.reference} for d in cmp.stack],
        "rows": [row_json(row, cmp) for row in cmp.rows],
    }  # fmt: skip
