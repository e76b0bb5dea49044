"""The A/B table of `nox -s ab`: two stacks timed in paired, interleaved rounds on one host.

    python -m dew.bench.analysis.ab results/runs/<run>/ [--band 5] [--alpha 0.05] [--overwrite]

dew.host.ab_rounds (run_rounds) ran every case once per side per round, each in a fresh
process, alternating which side went first, and left RUN/ab-plan.json and one record per
run under RUN/rounds/. This pairs them: for each case and round, the ratio B / A of ms/step
(below 1: B is faster); then every case together through dew.bench.analysis.judge.paired_arrays,
the function the calibration simulates: the geometric mean of the ratios, its 95%
t-interval over rounds − 1 degrees of freedom and the p of a one-sample t-test on their
logs (the two sides of a round share the host's hour, so the run level cancels and needs
no estimate), the p-values corrected together by Holm-Bonferroni. The verdict:
`faster`/`slower` when the whole interval lies beyond the band (symmetric in log space) AND
the Holm p < alpha; `same` by compare's equivalence test (judge.EQUIVALENCE: the 90%
interval inside the band); else `undecided`, saying why. Each case says what it could have
detected (MDE, 80% power) from its rounds' spread. Unlike a signed-rank test, whose
smallest p at 7 rounds (0.0156) Holm cannot bring under 0.05 for four or more cases, the t
on the logs decides a whole preset's cases at the default rounds when the change is clear.

It writes RUN/a.json and RUN/b.json (one record per side: each case's row with every round
as a repeat), RUN/ab.md (the table) and RUN/ab.png (the ratios with their intervals).
The table ends with compare's three words: NOT REPRODUCED (a case faster or slower),
REPRODUCED (every case shown the same), INCONCLUSIVE. Exit 0, 1 and 3 for them (1 too when
a run failed or left no record); 2 bad input.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import tyro

from dew.bench.analysis import judge, programs, stats
from dew.bench.analysis.kinds.step_kind import STEP
from dew.bench.analysis.tables import table
from dew.bench.common import cli, files
from dew.bench.record.schema import (
    SCHEMA_VERSION,
    BenchmarkRun,
    StepRepeat,
    StepRow,
    read_run,
    write_run,
)

PROG = "dew.bench.analysis.ab"
PLAN = "ab-plan.json"
OUTPUTS = {"A": "a.json", "B": "b.json", "table": "ab.md", "chart": "ab.png"}
MEDIANS = ("ms_per_step", "p10_ms", "p50_ms", "p90_ms", "samples_per_s", "tokens_per_s")


@dataclasses.dataclass(frozen=True)
class Args:
    """Pair the rounds of an A/B run (nox -s ab) into one record per side, the table and
    the chart. Exit 0: REPRODUCED; 1: NOT REPRODUCED, or a run failed; 3: INCONCLUSIVE;
    2: usage."""

    run_dir: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """the A/B run's directory (holds ab-plan.json and rounds/)"""
    band: float | None = None
    """noise band in percent, in (0, 100); default: the run's (nox -s ab --band, 5)"""
    alpha: float | None = None
    """significance level after Holm-Bonferroni; default: the run's (0.05)"""
    overwrite: bool = False
    """replace existing a.json, b.json, ab.md and ab.png"""


@dataclasses.dataclass
class Case:
    """One case (row key) across the rounds: each side's row per round (None: no row)."""

    label: str
    rows: dict[str, dict[int, StepRow]]
    pairs: list[tuple[int, float, float]] = dataclasses.field(default_factory=list)
    result: stats.Paired | None = None
    adjusted_p: float | None = None
    detect: stats.Detectable | None = None
    verdict: str = "undecided"
    why: str | None = None
    compiled: str | None = None  # programs.between(B, A): same program, other kernels, ...
    other_work: str | None = None  # why B's step is not A's (kinds.step_kind's model_difference)

    def median(self, side: str) -> float | None:
        values = [r.ms_per_step for r in self.rows[side].values() if _ok(r)]
        return statistics.median(values) if values else None


def _ok(row: StepRow | None) -> bool:
    return row is not None and row.status == "ok" and bool(row.ms_per_step)


def load(run_dir: Path) -> tuple[dict, dict[str, dict[int, BenchmarkRun]]]:
    """The plan and every run's record by side and round (a run without one is absent)."""
    plan_path = files.check_input_file(run_dir / PLAN, flag="RUN_DIR")
    try:
        plan = json.loads(plan_path.read_text())
        entries = plan["order"]
        plan["sides"]["A"], plan["sides"]["B"]  # noqa: B018 - both sides must be named
    except (ValueError, KeyError, TypeError) as error:
        raise cli.UsageError(f"{plan_path} is not an A/B plan: {cli.one_line(error)}") from None
    records: dict[str, dict[int, list[BenchmarkRun]]] = {"A": {}, "B": {}}
    for entry in entries:
        path = run_dir / "rounds" / entry["record"]
        try:
            record = read_run(path)
        except (OSError, ValueError):  # a run that died before writing (its .log says why)
            continue
        records[entry["side"]].setdefault(entry["round"], []).append(record)
    return plan, records


def cases(records: dict[str, dict[int, list[BenchmarkRun]]]) -> list[Case]:
    """Rows matched by case (row.key()) across the sides and rounds, in first-seen order."""
    found: dict[tuple, Case] = {}
    for side, by_round in records.items():
        for round_, runs in sorted(by_round.items()):
            for record in runs:
                for row in record.rows:
                    case = found.setdefault(row.key(), Case(row.label(), {"A": {}, "B": {}}))
                    case.rows[side][round_] = row
    return list(found.values())


def decide(found: list[Case], band: float, alpha: float) -> None:
    """Pair the rounds, then the verdicts of every case together through
    dew.bench.analysis.judge.paired_arrays (the test the calibration simulates)."""
    for case in found:
        a, b = case.rows["A"], case.rows["B"]
        case.pairs = [(r, a[r].ms_per_step, b[r].ms_per_step) for r in sorted(a)
                      if _ok(a[r]) and _ok(b.get(r))]  # fmt: skip
    tested = [case for case in found if case.pairs]
    if tested:
        logs = np.full((1, len(tested), max(len(c.pairs) for c in tested)), np.nan)
        for k, case in enumerate(tested):
            logs[0, k, : len(case.pairs)] = [math.log(b / a) for _, a, b in case.pairs]
        out = judge.paired_arrays(logs, band=band / 100, alpha=alpha)
    for k, case in enumerate(tested):
        case.result = result = stats.Paired.of(out, k)
        adjusted = float(out["p_holm"][0, k])
        case.adjusted_p = None if math.isnan(adjusted) else adjusted
        if result.rounds < 2:
            case.why = f"{result.rounds} paired round: a verdict needs 2 or more"
            continue
        case.detect = result.detectable(tests=len(tested), band=band / 100, alpha=alpha)
        case.verdict = judge.WORDS[int(out["word"][0, k])]
        case.why = _why(result, case.adjusted_p, band / 100, alpha) \
            if case.verdict == "undecided" else None  # fmt: skip
    for case in found:
        if case.result is None:
            case.verdict, case.why = "no pair", "no round has an ok run on both sides"
        label_work(case)


def _why(result: stats.Paired, adjusted_p: float | None, band: float, alpha: float) -> str:
    """What an undecided case lacks: its interval against the band, or significance."""
    floor, ceiling = stats.band_limits(band)
    shown = f"{result.low:.3f}-{result.high:.3f}"
    if result.low > ceiling or result.high < floor:
        p = "n/a" if adjusted_p is None else f"{adjusted_p:.3g}"
        return f"beyond the band but not significant (Holm p {p} >= {alpha:g})"
    if floor <= result.ratio <= ceiling:
        return (f"inside the band, but its {judge.EQUIVALENCE:.0%} interval is not (95%: "
                f"{shown})")  # fmt: skip
    return f"its interval {shown} reaches into the band"


def label_work(case: Case) -> None:
    """Whether both sides ran one step: the compiled programs (their fingerprints) and,
    when B does other work (another GFLOP/step, params, sample or batch: a changed model),
    why. The verdict stands: it is about the time B takes, whatever B does; the note says
    that it is not the same step's speed."""
    a = next((row for row in case.rows["A"].values() if _ok(row)), None)
    b = next((row for row in case.rows["B"].values() if _ok(row)), None)
    if a is None or b is None:
        return
    case.compiled = programs.between(b, a)
    case.other_work, _ = STEP.model_difference(b, a)


# --- one record per side ------------------------------------------------------------------------


def side_record(side: str, plan: dict, runs: dict[int, list[BenchmarkRun]], found: list[Case]):
    """The side's record: the first run's header (with the outside code of every run: each
    case ran in its own process), each case's row with every round as a repeat and its
    figures the medians over the rounds."""
    ordered = [record for _, group in sorted(runs.items()) for record in group]
    if not ordered:
        return None
    first = ordered[0]
    rows = [_side_row(case.rows[side]) for case in found if case.rows[side]]
    settings = first.settings.model_copy()
    settings.repeats = plan["rounds"]
    seen = {}
    for record in ordered:
        for case in record.settings.cases or []:
            seen.setdefault(json.dumps(case, sort_keys=True), case)
    settings.cases = list(seen.values()) or None
    settings.architectures = sorted({row.architecture for row in rows}) or None
    given = plan["sides"][side]["given"]
    note = (
        f"A/B side {side} ({given}): each case in {plan['rounds']} fresh processes, one a "
        f"round, interleaved with side {'B' if side == 'A' else 'A'} (nox -s ab)"
    )
    return BenchmarkRun(
        schema_version=SCHEMA_VERSION, kind="step", created=first.created,
        command=first.command, settings=settings, environment=_with_all_outside(ordered),
        idle_check=first.idle_check, rows=rows, note=note,
    )  # fmt: skip


def _with_all_outside(ordered: list[BenchmarkRun]):
    environment = ordered[0].environment.model_copy()
    seen = {}
    for record in ordered:
        for item in record.environment.outside_code or []:
            seen.setdefault((item.distribution, item.module), item)
    environment.outside_code = list(seen.values()) or None
    return environment


def _side_row(by_round: dict[int, StepRow]) -> StepRow:
    rows = [by_round[r] for r in sorted(by_round)]
    ok = [row for row in rows if _ok(row)]
    template = (ok or rows)[0].model_dump()
    failed = [row for row in rows if not _ok(row)]
    if ok:
        for name in MEDIANS:
            values = [getattr(row, name) for row in ok if getattr(row, name) is not None]
            template[name] = statistics.median(values) if values else None
        template["compile_s"] = statistics.median([r.compile_s or 0.0 for r in ok])
        repeats = [repeat for row in ok for repeat in _repeats_of(row)]
        template["repeats"] = [repeat.model_dump() for repeat in repeats]
        interval = stats.row_interval([r.ms_per_step for r in repeats])
        template["ms_per_step_ci95"] = list(interval) if interval else None
        template["warnings"] = stats.noise_warnings(
            [r.ms_per_step for r in repeats], [r.synced_ms for r in repeats]
        )
    if failed:
        error = next((row.error for row in failed if row.error), "no record")
        template.update(status="failed", error=f"{len(failed)} of {len(rows)} rounds: {error}")
    return StepRow.model_validate(template)


def _repeats_of(row: StepRow) -> list[StepRepeat]:
    """A round's row as repeats: its own (schema 2), or its figure alone (schema 1)."""
    if row.repeats:
        return list(row.repeats)
    return [StepRepeat(ms_per_step=row.ms_per_step, synced_ms=[], compile_s=row.compile_s)]


# --- the table and the chart ----------------------------------------------------------------------


DESIGN = "paired, interleaved rounds on one host: the run level cancels within a round"


def render(plan: dict, found: list[Case], band: float, alpha: float) -> str:
    sides = plan["sides"]

    def name(side: str) -> str:
        info = sides[side]
        commit = (info.get("commit") or "not labelled")[:7]
        line = f"**{side}** `{info['given']}` ({info['kind']}): commit {commit}, `{info['image']}`"
        outside = [
            f"{item['distribution']} {item['version']}"
            + (f" @ {item['commit'][:7]}" if item.get("commit") else "")
            for item in info.get("outside") or []
        ]
        # a side's own settings, so that one stack against itself says what differs
        env = plan.get("env", {}).get(side, {})
        own = [*plan.get("side_tool", {}).get(side, []), *(f"{k}={v}" for k, v in env.items())]
        line += f"; {' '.join(own)}" if own else ""
        return line + (f"; from outside dew: {', '.join(outside)}" if outside else "")

    rounds = plan["rounds"]
    lines = [
        f"A/B: B against A on ms/step, the geometric mean of the paired per-round ratios B/A "
        f"(below 1: B is faster); {rounds} rounds, every case once per side per round in a "
        "fresh process, the side going first alternating.",
        "",
        f"- design: {DESIGN}",
        f"- {name('A')}",
        f"- {name('B')}",
        "",
    ]
    body = []
    for case in found:
        result = case.result
        body.append([
            case.label, _num(case.median("A")), _num(case.median("B")),
            f"{result.ratio:.3f} ({(result.ratio - 1) * 100:+.1f}%)" if result else "—",
            f"{result.low:.3f}-{result.high:.3f}" if result else "—",
            "—" if case.adjusted_p is None else f"{case.adjusted_p:.3g}",
            "—" if case.detect is None else f"{case.detect.mde:.1%}",
            str(result.rounds if result else 0), case.compiled or "—", case.verdict,
        ])  # fmt: skip
    headers = ["case", "A ms/step", "B ms/step", "B/A", "95% interval", "p (Holm)", "MDE",
               "pairs", "compiled"]  # fmt: skip
    lines.append(table([*headers, "verdict"], body, "md"))
    per_round = [[case.label] + [f"{b / a:.3f}" for _, a, b in case.pairs] for case in found]
    first = [f"r{r} ({'A' if (r - 1) % 2 == 0 else 'B'} first)" for r in range(1, rounds + 1)]
    lines += ["Per-round ratios B/A (the first case's order; it alternates by case):", ""]
    lines.append(table(["case", *first], per_round, "md"))
    notes = [f"- {case.label}: {case.why}" for case in found if case.why]
    notes += [
        f"- {case.label}: B does other work than A ({case.other_work}): the ratio is the time "
        "of another step, not the same step's speed"
        for case in found
        if case.other_work
    ]
    if notes:
        lines += ["Notes:", "", *notes, ""]
    lines.append(summary(found, band, alpha))
    return "\n".join(lines) + "\n"


def outcome(found: list[Case]) -> str:
    """The three words compare uses: NOT REPRODUCED when a case is faster or slower (B does
    not reproduce A), REPRODUCED when every case is shown the same, else INCONCLUSIVE."""
    if any(case.verdict in ("faster", "slower") for case in found):
        return judge.NOT_REPRODUCED
    if found and all(case.verdict == "same" for case in found):
        return judge.REPRODUCED
    return judge.INCONCLUSIVE


def summary(found: list[Case], band: float, alpha: float) -> str:
    counts = {v: sum(1 for c in found if c.verdict == v) for v in ("faster", "slower", "same")}
    other = len(found) - sum(counts.values())
    return (
        f"{outcome(found)}: B against A: {len(found)} cases: {counts['faster']} faster, "
        f"{counts['slower']} slower, {counts['same']} same, {other} undecided (band "
        f"±{band:g}%, alpha {alpha:g} after Holm-Bonferroni)"
    )


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def chart(path: Path, found: list[Case], band: float) -> Path:
    """Each case's ratio B/A (geometric mean) with its 95% interval, the band shaded."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    shown = [case for case in found if case.result is not None]
    fig = Figure(figsize=(max(6.0, 1.2 * len(shown) + 2), 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.axhspan(*stats.band_limits(band / 100), color="0.9", label=f"band ±{band:g}%")
    ax.axhline(1.0, color="0.5", lw=1)
    for x, case in enumerate(shown):
        r = case.result
        ax.errorbar(x, r.ratio, yerr=[[r.ratio - r.low], [r.high - r.ratio]], fmt="o",
                    capsize=4, color="black")  # fmt: skip
        ax.annotate(case.verdict, (x, r.high), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=8)  # fmt: skip
    ax.set_xticks(range(len(shown)), [case.label for case in shown], rotation=20, ha="right")
    ax.set_xlim(-0.6, len(shown) - 0.4)
    ax.set_ylabel("ms/step B / A (geometric mean of rounds)")
    ax.set_title("B against A: paired per-round ratios, 95% intervals")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    files.atomic_write(path, _png(fig))
    return path


def _png(fig: Any) -> bytes:
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    return buffer.getvalue()


# --- the entry point ----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run(PROG, lambda: _ab(cli.parse(Args, argv, prog=PROG)))


def _ab(args: Args) -> int:
    if not args.run_dir.is_dir():
        raise cli.UsageError(f"RUN_DIR {args.run_dir} is not a directory (nox -s ab makes one)")
    plan, records = load(args.run_dir)
    band = plan.get("band", 5.0) if args.band is None else args.band
    alpha = plan.get("alpha", 0.05) if args.alpha is None else args.alpha
    if not 0 < band < 100:  # a NaN fails this too
        raise cli.UsageError(f"--band {band:g} is not a percentage in (0, 100)")
    if not 0 < alpha < 0.5:
        raise cli.UsageError(f"--alpha {alpha:g} is not a significance level in (0, 0.5): "
                             "the equivalence test holds the 1 - 2 alpha interval inside the "
                             "band")  # fmt: skip
    outputs = {key: args.run_dir / name for key, name in OUTPUTS.items()}
    for path in outputs.values():  # before any work: nothing is half written
        files.check_output_file(path, flag=f"RUN_DIR/{path.name}", overwrite=args.overwrite)
    found = cases(records)
    if not found:
        raise cli.UsageError(f"{args.run_dir}: no run left a record (see rounds/*.log)")
    decide(found, band, alpha)
    for side in ("A", "B"):
        record = side_record(side, plan, records[side], found)
        if record is not None:
            write_run(outputs[side], record)
    text = render(plan, found, band, alpha)
    files.atomic_write(outputs["table"], text)
    try:
        drawn = f"chart: {chart(outputs['chart'], found, band)}"
    except ImportError:  # a TPU host's bundle holds the measured stack only
        drawn = "no chart: matplotlib is not installed here (dew's report extra)"
    print(text, end="")
    print(f"records: {outputs['A']}, {outputs['B']}; {drawn}", file=sys.stderr)
    failed = any(not _ok(row) for case in found for rows in case.rows.values()
                 for row in rows.values())  # fmt: skip
    missing = any(entry.get("exit") not in (0, None) for entry in plan["order"])
    if failed or missing:
        return cli.EXIT_CHANGED
    return judge.EXIT_CODES[outcome(found)]


if __name__ == "__main__":
    sys.exit(main())
