"""The parity table: a compile-only run's params and GFLOP/step against a published record.

`python -m dew.bench.analysis.compare_command` prints it, instead of the timing comparison,
when RUN is a compile-only record (settings.compile_only). Against the published small-preset table:

    python tools/benchmark_step.py --preset small --compile-only --json-out parity.json
    python -m dew.bench.analysis.compare_command parity.json \\
        results/published/2026-09-02-rtx4080-6b0f119-small.json

(`--architectures simple_dit causal_transformer` narrows the run.) Against the 2026-09-05
rerun, which kept the caption table in the state (each conditioned count 99,840 higher,
the same GFLOP), the cases say so:

    python tools/benchmark_step.py --preset small --compile-only --json-out parity-0905.json \\
        --cases '[{"architecture": "simple_dit", "condition_in_state": true},
                  {"architecture": "hierarchical_mmdit", "condition_in_state": true},
                  {"architecture": "video_dit", "condition_in_state": true},
                  {"architecture": "causal_transformer", "condition_in_state": true}]'
    python -m dew.bench.analysis.compare_command parity-0905.json \\
        results/published/2026-09-05-rtx4080-9886c20-rerun.json

Rows match as compare's do (`matching.match_rows`): a run row that records
condition_in_state pairs with the published row of its architecture and batch, which
predates that setting. Any record with params and gflop_per_step per row (a replica's
figures written as a record) serves as the reference as well.

Per row: params ours / published, GFLOP/step ours / published, their difference in
percent and our compile seconds. Parity holds (exit 0) when every row with a published
partner has the same params and GFLOP/step within `matching.GFLOP_TOLERANCE` (0.1%); exit 1
otherwise, and when no row has a published partner. A row of ours without a published row
(the architectures the seed's tables never had) is listed with its figures, and a
published row the run did not cover is named below the table; neither decides the exit.
"""

from __future__ import annotations

import dataclasses

from dew.bench.analysis import tables as report
from dew.bench.analysis.kinds.step_kind import STEP
from dew.bench.analysis.matching import GFLOP_TOLERANCE, match_rows, same_gflop
from dew.bench.record.schema import BenchmarkRun, StepRow


@dataclasses.dataclass
class ParityRow:
    label: str
    run: StepRow | None
    reference: StepRow | None
    verdict: str
    counts: bool  # whether this row decides the exit status
    ok: bool = False
    notes: list[str] = dataclasses.field(default_factory=list)


def check(run: BenchmarkRun, reference: BenchmarkRun) -> list[ParityRow]:
    """One ParityRow per row of either record, in compare's order."""
    pairs = match_rows(run.rows, reference.rows, STEP.partner)
    return [_check_row(a, b, note) for a, b, note in pairs]


def _check_row(ours: StepRow | None, published: StepRow | None, note: str | None) -> ParityRow:
    notes = [note] if note else []
    if ours is None:
        return ParityRow(published.label(), None, published, "not in this run", False)
    label = ours.label()
    if ours.status == "failed":
        notes.append(f"error: {ours.error}")
        return ParityRow(label, ours, published, "failed", published is not None, notes=notes)
    if published is None:
        return ParityRow(label, ours, None, "no published row", False, notes=notes)
    if published.status == "failed" or (
        published.params is None and published.gflop_per_step is None
    ):
        return ParityRow(label, ours, published, "no published figures", False, notes=notes)
    problems = []
    for what, a, b in (
        ("batch", ours.key()[1], published.key()[1]),
        ("sample", ours.sample, published.sample),
    ):
        if a is not None and b is not None and a != b:  # another case: its GFLOP differ
            problems.append(f"{what} differs ({a} vs {b})")
    if published.params is not None and ours.params != published.params:
        if ours.params is None:
            problems.append("no params recorded")
        else:
            delta = ours.params - published.params
            problems.append(f"params differ ({delta:+,})")
            ca, cb = ours.condition_params, published.condition_params
            if ca is not None and cb is not None and ca - cb == delta:
                notes.append(
                    f"the {delta:+,} params are all the condition encoder's (condition_params "
                    f"{ca:,} vs {cb:,}): the condition table is in the state on one side only "
                    "(a case's condition_in_state)"
                )
    ga, gb = ours.gflop_per_step, published.gflop_per_step
    if gb is not None and (ga is None or not same_gflop(ga, gb)):
        problems.append("no GFLOP/step recorded" if ga is None else "GFLOP/step differs")
    verdict = "; ".join(problems) or "equal"
    return ParityRow(label, ours, published, verdict, True, not problems, notes)


def passed(rows: list[ParityRow]) -> bool:
    """Parity: some row has a published partner and every such row is equal."""
    counted = [r for r in rows if r.counts]
    return bool(counted) and all(r.ok for r in counted)


def _difference(ours: float | None, published: float | None) -> str:
    if ours is None or published is None or published == 0:
        return report.MISSING
    return f"{(ours / published - 1) * 100:+.3f}%"


def render(
    rows: list[ParityRow],
    run: BenchmarkRun,
    reference: BenchmarkRun,
    run_label: str,
    reference_label: str,
    fmt: str = "md",
) -> str:
    """The parity table ("md" or "text"), the rows left out, the notes and the verdict."""
    style = "md" if fmt == "md" else "aligned"
    h = "### " if fmt == "md" else ""
    tolerance = f"{GFLOP_TOLERANCE * 100:g}%"
    headers = (
        "row",
        "batch",
        "params ours",
        "params published",
        "GFLOP ours",
        "GFLOP published",
        "GFLOP diff",
        "compile s",
        "verdict",
    )
    body = []
    for r in rows:
        if r.run is None:  # named in one line below the table
            continue
        p = r.reference
        body.append(
            [
                r.label,
                report.count(r.run.key()[1]),
                report.count(r.run.params),
                report.count(p.params if p else None),
                report.num(r.run.gflop_per_step, 3),
                report.num(p.gflop_per_step if p else None, 3),
                _difference(r.run.gflop_per_step, p.gflop_per_step if p else None),
                report.num(r.run.compile_s),
                r.verdict,
            ]
        )
    out = [
        f"{'## ' if fmt == 'md' else ''}Parity: params and GFLOP/step (compile-only run)",
        "",
        f"- run: {run_label} ({report.describe(run)})",
        f"- reference: {reference_label} ({report.describe(reference)})",
        "",
        report.table(headers, body, style),
    ]
    absent = [r.label for r in rows if r.run is None]
    if absent:
        out.append(f"Published rows not in this run: {', '.join(absent)}.\n")
    notes = [f"- {r.label}: {n}" for r in rows for n in r.notes]
    if notes:
        out += ["Notes:", *notes, ""]
    counted = [r for r in rows if r.counts]
    equal = [r for r in counted if r.ok]
    word = "PARITY" if passed(rows) else "NO PARITY"
    summary = (
        f"{word}: {len(equal)} of {len(counted)} published rows equal "
        f"(params exact, GFLOP/step within ±{tolerance})"
    )
    if not counted:
        summary += "; no row of this run has a published row with figures"
    summary += "".join(f"; {r.label} {r.verdict}" for r in counted if not r.ok)
    out += [f"{h}Verdict", "", summary, ""]
    return "\n".join(out)
