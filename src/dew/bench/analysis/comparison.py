"""The model of holding a run against a reference: per row the ratios and a verdict.

Per row the ratios run / reference of its kind's ratio fields (dew.bench.analysis.kinds:
the step's ms/step, p50, samples/s, util and peak GiB; the loader's samples/s, p50, p95,
first batch). For the kind's timing (ms/step; the loader's ms per batch) the rows are
judged together by dew.bench.analysis.judge at the noise of their device kind
(dew.bench.analysis.levels.history: fitted from the records' own A/A history, or a stated weak
prior): the ratio of the geometric means of each row's repeats with its 95%
interval, the whole run's shift (the median of the rows' ratios, 3 rows or more) on its
own line, each row's change against it, Holm-Bonferroni over the shift and the rows, and
a word: `faster`/`slower` (beyond the band and significant), `same` (the whole change's
90% interval inside the band: an equivalence test), else `undecided`, saying why; and what
the row could have detected (`Detectable`: its MDE, the repeats a side and the
interleaved rounds a target change needs). The comparison's `outcome` is REPRODUCED,
NOT REPRODUCED or INCONCLUSIVE. A side with one process (the published tables, a plain
run) is one draw of its run, and the row says so.

dew.bench.analysis.host_gates: with host-speed probes in both CPU records, a
`faster`/`slower` must also lie wholly beyond the band around the host's own drift; a
change that a side measured while the idle check found the host busy could have made (a
busy run under `slower`, a busy reference under `faster`) is `undecided` too. Rows are
paired by dew.bench.analysis.matching (with the kind's partner rule); a row whose model
differs (the kind's `model_difference`: a step's GFLOP/step, backbone params, batch or
sample) is "different model, not comparable": its ratios are shown but it does not
decide the outcome. Each step row says whether both sides ran the same compiled program
(`compiled`: "same program", "same program, other kernels", "other program";
dew.bench.analysis.programs), and a side whose repeats compiled otherwise says so in the
notes.

`compare(run, reference)` gives the `Comparison`; dew.bench.analysis.compare_report prints it and
dew.bench.analysis.compare_command is the command line.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dew import platforms
from dew.bench.analysis import judge, outliers, stats
from dew.bench.analysis.host_gates import biases, busy_why, drift_why, host_drift
from dew.bench.analysis.kinds import KINDS, Kind
from dew.bench.analysis.levels import row_noise
from dew.bench.analysis.levels.noise import Noise, NoiseModel, for_records, platform_of
from dew.bench.analysis.matching import match_rows
from dew.bench.common.cli import UsageError
from dew.bench.record.schema import BenchmarkRun, Record
from dew.bench.record.stack import StackDifference, stack_differences


@dataclasses.dataclass
class RowComparison:
    label: str
    run: Record | None  # a row of the kind's row model
    reference: Record | None
    ratios: dict[str, float | None]
    comparable: bool
    verdict: str  # faster | slower | same | undecided, or why the row has none
    change: float | None = None  # relative change of the timing that decided the verdict
    notes: list[str] = dataclasses.field(default_factory=list)
    sides: tuple[stats.Side, stats.Side] | None = None  # the timing's repeats, log scale
    difference: stats.Difference | None = None  # the timing's statistics (time: run / ref)
    adjusted_p: float | None = None  # its p after Holm over the rows
    detect: stats.Detectable | None = None  # what the row could have detected
    noise: Noise | None = None  # the levels it assumed
    why: str | None = None  # what an `undecided` lacks
    relative: tuple[float, float, float] | None = None  # against the shift: ratio, low, high
    whole: bool = False  # its word is its whole change's (against the shift it was undecided)
    rounds: int | None = None  # interleaved rounds (nox -s ab) that would detect the target
    compiled: str | None = None  # same program | ..., other kernels | other program; None: unknown
    rate: bool = False  # its timing is a rate (samples/s): its ratios are shown inverted
    figures: tuple[list[float], list[float]] | None = None  # the timing's repeats, run and ref

    @property
    def counts(self) -> bool:
        """Whether this row decides the exit status."""
        return self.comparable and self.run is not None and self.reference is not None

    @property
    def against_shift(self) -> bool:
        """Whether the change the verdict judged is the row's against the shift."""
        return self.relative is not None and not self.whole

    @property
    def judged(self) -> tuple[float, float, float]:
        """The change the verdict judged (time direction): ratio, low, high."""
        diff = self.difference
        return self.relative if self.against_shift else (diff.ratio, diff.low, diff.high)

    @property
    def within_band(self) -> bool:
        return self.verdict in ("same", "undecided")

    @property
    def changed(self) -> bool:
        """A real change (or a row that ran in the reference and fails now)."""
        return self.counts and self.verdict in ("faster", "slower", "failed in this run")


@dataclasses.dataclass
class Comparison:
    run_label: str
    reference_label: str
    kind: str
    band: float
    alpha: float
    stack: list[StackDifference]
    not_recorded: list[str]
    rows: list[RowComparison]
    host: stats.Drift | None = None  # the host probe's drift; None: a side has no readings
    host_line: str | None = None  # the header's line on it (the drift, or why not checked)
    noise: NoiseModel | None = None  # the levels assumed, and where they came from
    target: float = 0.10  # the change `repeats_for` is asked about (a fraction)
    shift: judge.Shift | None = None  # the whole-table shift (3 rows or more)
    outliers: list[outliers.Outlier] = dataclasses.field(default_factory=list)

    @property
    def detectable(self) -> float | None:
        """The largest MDE of the rows compared: less than this, some row could not see."""
        found = [r.detect.mde for r in self.counted if r.detect is not None]
        return max(found) if found else None

    @property
    def counted(self) -> list[RowComparison]:
        return [r for r in self.rows if r.counts]

    @property
    def outcome(self) -> str:
        """NOT REPRODUCED: the shift or a row faster or slower, or a row that ran in the
        reference fails now; REPRODUCED: every comparable row shown the same; else
        INCONCLUSIVE (nothing compared too)."""
        shifted = self.shift is not None and self.shift.word in ("faster", "slower")
        if shifted or any(r.changed for r in self.counted):
            return judge.NOT_REPRODUCED
        if self.counted and all(r.verdict == "same" for r in self.counted):
            return judge.REPRODUCED
        return judge.INCONCLUSIVE

    @property
    def reproduced(self) -> bool:
        return self.outcome == judge.REPRODUCED

    @property
    def undecided(self) -> list[RowComparison]:
        return [r for r in self.counted if r.verdict == "undecided"]

    @property
    def fields(self) -> tuple[str, ...]:
        return KINDS[self.kind].ratio_fields

    @property
    def timing(self) -> str:
        return KINDS[self.kind].timing

    @property
    def rate(self) -> bool:
        """Whether the timing is a rate (higher is faster: the loader's samples/s)."""
        return self.timing in KINDS[self.kind].rates

    def column(self, field: str) -> str:
        return KINDS[self.kind].column(field)


# --- rows --------------------------------------------------------------------------------


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def compare_rows(
    run_row, ref_row, kind: Kind, note: str | None, noise: NoiseModel
) -> RowComparison:
    """One pair of rows (either may be None): ratios, notes and the timing's statistics;
    `decide` gives the verdicts of all the rows together."""
    row = _compare_rows(run_row, ref_row, kind, note, noise)
    if row.run is not None and row.reference is not None:
        row.compiled, notes = kind.compiled(row.run, row.reference)
        row.notes += notes
    return row


def _compare_rows(run_row, ref_row, kind: Kind, note: str | None, noise: NoiseModel):
    label = (run_row if run_row is not None else ref_row).label()
    fields = kind.ratio_fields
    if run_row is None:
        return RowComparison(label, None, ref_row, {}, False, "not in this run")
    if ref_row is None:
        verdict = "no reference row" if run_row.status == "ok" else "failed; no reference row"
        notes = [f"error: {run_row.error}"] if run_row.error else []
        return RowComparison(label, run_row, None, {}, False, verdict, notes=notes)
    notes = [note] if note else []
    reason, model_notes = kind.model_difference(run_row, ref_row)
    notes += model_notes
    ratios = {f: _ratio(getattr(run_row, f), getattr(ref_row, f)) for f in fields}
    if run_row.status == "failed" or ref_row.status == "failed":
        verdict = {
            ("failed", "failed"): "failed in both",
            ("failed", "ok"): "failed in this run",
            ("ok", "failed"): "failed in the reference",
        }[(run_row.status, ref_row.status)]
        if run_row.error:
            notes.append(f"error: {run_row.error}")
        # A row that ran in the reference and fails now did not reproduce.
        comparable = reason is None and verdict == "failed in this run"
        return RowComparison(label, run_row, ref_row, ratios, comparable, verdict, notes=notes)
    if reason is not None:
        notes.append(reason)
        return RowComparison(
            label, run_row, ref_row, ratios, False, "different model, not comparable", notes=notes
        )
    timing, ratio = _judged_timing(kind, ratios, run_row, ref_row, notes)
    if ratio is None:
        return RowComparison(
            label, run_row, ref_row, ratios, True, "no timing to compare", notes=notes
        )
    # For times lower is faster; for throughput (the loader) higher is.
    change = ratio - 1 if timing not in kind.rates else 1 / ratio - 1
    row = RowComparison(label, run_row, ref_row, ratios, True, "undecided", change, notes)
    row.rate = timing in kind.rates
    figures = (timing_figures(kind, run_row, timing), timing_figures(kind, ref_row, timing))
    if not all(figures):  # a zero figure: nothing to take the log of
        row.verdict = "no timing to compare"
        return row
    sides = tuple(stats.side(f) for f in figures)
    row.figures = figures
    row.noise = noise.for_row(label)
    row.sides = sides
    one = [which for which, side in (("run", sides[0]), ("reference", sides[1])) if side.n == 1]
    if one:
        said = {1: f"the {one[0]} has", 2: "both have"}[len(one)]
        row.notes.append(f"{said} one process: judged as one draw of its run (its process "
                         "variance from the other side and the noise's process level)")  # fmt: skip
    return row


def _judged_timing(kind: Kind, ratios: dict, run_row, ref_row, notes: list[str]):
    """The first of the kind's timings both rows have, and its ratio (None: none); a
    fallback says so in the notes ("judged on p50 ms (no ms/step on one side)")."""
    for index, timing in enumerate(kind.timings):
        ratio = ratios.get(timing, _ratio(getattr(run_row, timing), getattr(ref_row, timing)))
        if ratio is not None:
            if index:
                notes.append(f"judged on {kind.column(timing)} "
                             f"(no {kind.column(kind.timing)} on one side)")  # fmt: skip
            return timing, ratio
    return kind.timing, None


def timing_figures(kind: Kind, row, timing: str) -> list[float]:
    """A row's timing's positive repeat figures (time per step or per batch: the kind's
    `figures`)."""
    return [figure for figure in kind.figures(row, timing) if figure is not None and figure > 0]


def decide(
    rows: list[RowComparison],
    band: float,
    alpha: float,
    host: stats.Drift | None = None,
    target: float = 0.10,
    records: tuple[BenchmarkRun, BenchmarkRun] | None = None,
    kind_ratio: float = 0.0,
) -> judge.Shift | None:
    """The verdicts of the rows with a timing on both sides, judged together
    (dew.bench.analysis.judge: the whole-table shift, each row against it, Holm over both,
    equivalence for `same`), what each could have detected; a busy host weighed by what it
    could have done to each side (host_gates.side_bias, from `records`: the run's and the
    reference's host), then, on CPU hosts, every `faster`/`slower` held against the host
    probe's drift; `kind_ratio` is the kind's run variance over its process variance
    (row_noise.scaled_run). Returns the shift (None with fewer than judge.MIN_ROWS_FOR_SHIFT
    rows)."""
    tested = [row for row in rows if row.sides is not None and row.counts]
    shift = None
    if tested:
        shift = _judge(tested, band / 100, alpha, target, records, kind_ratio)
    for row in tested:
        # The gate judges what the verdict judged: with a shift, a row's change against it,
        # which the host's drift (the same on every row) has already left; the shift's own
        # line is gated below. Otherwise the row's whole change.
        if host is not None and not row.against_shift and row.verdict in ("faster", "slower"):
            diff = row.difference
            if not stats.beyond_drift(diff.low, diff.high, diff.ratio, host, band / 100):
                row.verdict, row.why = "undecided", drift_why(host, diff, band / 100)
    if shift is not None and shift.word in ("faster", "slower") and host is not None:
        if not stats.beyond_drift(shift.low, shift.high, shift.ratio, host, band / 100):
            shift = dataclasses.replace(shift, word="undecided",
                                        why=drift_why(host, shift, band / 100))  # fmt: skip
    for row in rows:
        if row.why:
            row.notes.append(f"undecided: {row.why}")
    return shift


def _judge(tested: list[RowComparison], band: float, alpha: float, target: float, records,
           kind_ratio: float):  # fmt: skip
    """judge.judge_arrays over the rows (one trial), written back into each row."""
    runs, refs = [r.sides[0] for r in tested], [r.sides[1] for r in tested]
    noises = [r.noise for r in tested]
    nan = float("nan")
    n_run = np.array([s.n for s in runs], dtype=float)
    n_ref = np.array([s.n for s in refs], dtype=float)
    process_var, process_df = row_noise.moderated(
        np.array([nan if s.var is None else s.var for s in runs]), n_run,
        np.array([nan if s.var is None else s.var for s in refs]), n_ref,
        np.array([n.process for n in noises]), np.array([n.process_df for n in noises]),
    )  # fmt: skip
    d = np.array([a.mean - b.mean for a, b in zip(runs, refs, strict=True)])
    run_bias, ref_bias = biases(tested, records)
    run_var, run_df, share = row_noise.scaled_run(
        np.array([n.run**2 for n in noises]),
        np.array([n.run_df for n in noises]),
        np.array([n.process**2 for n in noises]),
        process_var,
        kind_ratio,
    )
    out = judge.judge_arrays(
        d, process_var, process_df, run_var, run_df, noises[0].shift**2, noises[0].shift_df,
        n_run, n_ref, band=band, alpha=alpha, run_bias=run_bias, ref_bias=ref_bias,
        decidable=_decidable(noises, n_run, n_ref), run_share=share,
    )  # fmt: skip
    shifted = len(tested) >= judge.MIN_ROWS_FOR_SHIFT
    for k, row in enumerate(tested):
        p = float(out["p_holm"][0, k])
        row.adjusted_p = None if math.isnan(p) else p
        row.difference = stats.Difference(
            math.exp(d[k]), math.exp(out["total_low"][0, k]), math.exp(out["total_high"][0, k]),
            math.sqrt(out["total_var"][0, k]), float(out["total_df"][0, k]), row.adjusted_p,
            (int(n_run[k]), int(n_ref[k])), _one_draw(n_run[k], n_ref[k]),
        )  # fmt: skip
        if shifted:
            row.relative = tuple(math.exp(float(out[key][0, k]))
                                 for key in ("tested", "low", "high"))  # fmt: skip
        row.verdict = judge.WORDS[int(out["word"][0, k])]
        row.whole = bool(out["whole"][0, k])  # never without a shift (judge_arrays)
        held = judge.WORDS[int(out["word_unbiased"][0, k])]
        row.why = None
        if row.verdict == "undecided":
            busy = busy_why(row, held, run_bias[k], ref_bias[k])
            row.why = busy or _why(row, band)
            if not noises[k].seen and n_run[k] == n_ref[k] == 1:
                row.why = ("one process a side of a row no A/A record holds: its noise is not "
                           "known (more repeats, or A/A records of it, would tell it)")  # fmt: skip
        row.detect, row.rounds = _detectable(
            float(process_var[k]), float(process_df[k]), (int(n_run[k]), int(n_ref[k])),
            float(out["tested_var"][0, k]), float(out["tested_df"][0, k]),
            len(tested) + int(shifted), band, alpha, target,
        )  # fmt: skip
    if not shifted:
        return None
    sh = out["shift"]
    p = float(sh["p"][0])
    word, held = (judge.WORDS[int(sh[key][0])] for key in ("word", "word_unbiased"))
    why = None
    if word == "undecided" and held != "undecided":
        busy = sum(1 for k in range(len(tested)) if run_bias[k] or ref_bias[k])
        why = (f"the whole run {held} while the host was busy for {busy} rows" if held != "same"
               else f"the whole run the same but for what the busy host ({busy} rows) could "
               "have done")  # fmt: skip
    return judge.Shift(math.exp(float(sh["estimate"][0])), math.exp(float(sh["low"][0])),
                       math.exp(float(sh["high"][0])), None if math.isnan(p) else p, word,
                       why, float(out["spread"][0]))  # fmt: skip


def _decidable(noises, n_run, n_ref) -> np.ndarray:
    """Whether a row's noise is known from something: its history, or its own repeats."""
    seen = np.array([n.seen for n in noises])
    return seen | (n_run > 1) | (n_ref > 1)


def _one_draw(n_run: float, n_ref: float) -> str | None:
    """Which side has one process ("run", "reference", "both"), None when neither."""
    return {(True, True): "both", (True, False): "run", (False, True): "reference"}.get(
        (n_run == 1, n_ref == 1)
    )


def _detectable(var, var_df, repeats, tested_var, tested_df, tests, band, alpha, target):
    """What the row could detect (stats.Detectable: the process variance and the run
    levels its test carries), and the interleaved rounds that would detect `target`."""
    process = var * (1 / repeats[0] + 1 / repeats[1])
    carried = stats.Noise(math.sqrt(max(0.0, tested_var - process) / 2), math.sqrt(var),
                          tested_df, "")  # fmt: skip
    detect = stats.Detectable(var, var_df, repeats, carried, tests, band, alpha)
    interleaved = stats.Noise(0.0, math.sqrt(var), math.inf, "")
    rounds = stats.Detectable(var, var_df, (2, 2), interleaved, tests, band, alpha)
    return detect, rounds.repeats_for(target)


def _why(row: RowComparison, band: float) -> str:
    """What an undecided row lacks: its interval against the band."""
    low, high = row.relative[1:] if row.relative else (row.difference.low, row.difference.high)
    limit = (1 / (1 + band), 1 + band)
    # The interval as the table shows it: a rate's (samples/s) ratio is the time's inverted.
    shown = f"{1 / high:.3f}-{1 / low:.3f}" if row.rate else f"{low:.3f}-{high:.3f}"
    whole = (1 / row.difference.high, 1 / row.difference.low) if row.rate else (
        row.difference.low, row.difference.high)  # fmt: skip
    against = " against the shift" if row.relative else ""
    if limit[0] <= low and high <= limit[1]:
        return (f"its change{against} {shown} is inside the band, but its whole change is "
                f"not shown inside it ({whole[0]:.3f}-{whole[1]:.3f}, "
                "the runs' shift included)")  # fmt: skip
    if low > limit[1] or high < limit[0]:
        p = "n/a" if row.adjusted_p is None else f"{row.adjusted_p:.3g}"
        return f"its change{against} {shown} is beyond the band but not significant (Holm p {p})"
    return f"its change{against} {shown} reaches into the band"


def compare(
    run: BenchmarkRun,
    reference: BenchmarkRun,
    *,
    band: float | None = None,
    alpha: float = 0.05,
    run_label: str = "run",
    reference_label: str = "reference",
    noise: NoiseModel | None = None,
    target: float = 0.10,
) -> Comparison:
    """Hold `run` against `reference`; `band` (percent) defaults to the device kind's
    (judge.band_for), `noise` to the records' history (noise.for_records), `target` is the change
    (a fraction) each row says how many repeats it would need for."""
    if run.kind != reference.kind:
        raise UsageError(f"cannot compare a {run.kind} run with a {reference.kind} record")
    noise = for_records(run, reference) if noise is None else noise
    if band is None:
        band = 100 * max(judge.band_for(platform_of(r)) for r in (run, reference))
    stack, unknown = stack_differences(run, reference)
    kind = KINDS[run.kind]
    rows = [
        compare_rows(a, b, kind, note, noise)
        for a, b, note in match_rows(run.rows, reference.rows, kind.partner)
    ]
    host, host_line = host_drift(run, reference, run_label, reference_label)
    if host is not None and not any(platforms.get(platform_of(r)).host_cores
                                    for r in (run, reference)):  # fmt: skip
        host, host_line = None, "host probe: not a gate between device records (it times the CPU)"
    pooled = noise.pooled
    ratio = (pooled.run / pooled.process) ** 2 if pooled.process > 0 else 0.0
    shift = decide(rows, band, alpha, host, target, (run, reference), ratio)
    standing_out = outliers.find([r for r in rows if r.counts])
    return Comparison(
        run_label, reference_label, run.kind, band, alpha, stack, unknown, rows, host,
        host_line, noise, target, shift, standing_out,
    )  # fmt: skip
