"""The model of holding a run against a reference: per row the ratios and a verdict.

Per row the ratios run / reference of ms/step, p50, samples/s, util and peak GiB (the
loader: samples/s, p50, p95, first batch), and for the timing (ms/step; the loader's ms
per batch) the statistics of dew.bench.analysis.stats: the ratio of the geometric means of
the repeats with its interval, including the run level of dew.bench.analysis.noise (two
records are two runs); the p of its t-test corrected over the rows by Holm-Bonferroni; a
verdict (`faster`/`slower` only with the whole interval beyond the band, symmetric in log
space, AND significant; `same` with the whole interval inside; else `undecided`, saying
why); and what the row could have detected (`Detectable`: its MDE, and the repeats a side
a target change needs). A side with one process (the published tables, a plain run) is one
draw of its run: the interval is a prediction interval, and the row says so.

When both records hold host-speed probes (`host_probe_ms` of every repeat:
dew.bench.runtime.hostprobe), the host's own drift between them, h (`stats.drift`), is
shown in the header, and a `faster`/`slower` must also lie wholly beyond the band around h:
a change the host's drift explains is `undecided`. A change measured while the idle check
found the host busy is `undecided` too. Rows are paired by dew.bench.analysis.matching; a
row whose model differs (GFLOP/step, backbone params, batch or sample) is "different
model, not comparable": its ratios are shown but it does not decide the exit status. Each
step row says whether both sides ran the same compiled program (`compiled`: "same
program", "same program, other kernels", "other program"; dew.bench.analysis.programs),
and a side whose repeats compiled otherwise says so in the notes.

`compare(run, reference)` gives the `Comparison`; dew.bench.analysis.tables prints it and
dew.bench.analysis.compare is the command line.
"""

from __future__ import annotations

import dataclasses

from dew.bench.analysis import programs, stats
from dew.bench.analysis.matching import match_rows, same_gflop
from dew.bench.analysis.noise import NoiseModel, for_records
from dew.bench.common.cli import UsageError
from dew.bench.record.schema import BenchmarkRun, DataRow, StepRow
from dew.bench.record.stack import StackDifference, stack_differences

RATIO_FIELDS = {
    "step": ("ms_per_step", "p50_ms", "samples_per_s", "util", "peak_gib"),
    "data": ("samples_per_s", "p50_ms", "p95_ms", "first_batch_s"),
}
TIMING = {"step": "ms_per_step", "data": "samples_per_s"}  # what a verdict is judged on


@dataclasses.dataclass
class RowComparison:
    label: str
    run: StepRow | DataRow | None
    reference: StepRow | DataRow | None
    ratios: dict[str, float | None]
    comparable: bool
    verdict: str  # faster | slower | same | undecided, or why the row has none
    change: float | None = None  # relative change of the timing that decided the verdict
    notes: list[str] = dataclasses.field(default_factory=list)
    sides: tuple[stats.Side, stats.Side] | None = None  # the timing's repeats, log scale
    difference: stats.Difference | None = None  # the timing's statistics (time: run / ref)
    adjusted_p: float | None = None  # its p after Holm over the rows
    detect: stats.Detectable | None = None  # what the row could have detected
    noise: stats.Noise | None = None  # the run level it assumed
    why: str | None = None  # what an `undecided` lacks
    compiled: str | None = None  # same program | ..., other kernels | other program; None: unknown

    @property
    def counts(self) -> bool:
        """Whether this row decides the exit status."""
        return self.comparable and self.run is not None and self.reference is not None

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
    noise: NoiseModel | None = None  # the run level assumed, and where it came from
    target: float = 0.10  # the change `repeats_for` is asked about (a fraction)

    @property
    def detectable(self) -> float | None:
        """The largest MDE of the rows compared: less than this, some row could not see."""
        found = [r.detect.mde for r in self.counted if r.detect is not None]
        return max(found) if found else None

    @property
    def counted(self) -> list[RowComparison]:
        return [r for r in self.rows if r.counts]

    @property
    def reproduced(self) -> bool:
        """Something was compared and no row changed (undecided rows do not fail it)."""
        return bool(self.counted) and not any(r.changed for r in self.counted)

    @property
    def undecided(self) -> list[RowComparison]:
        return [r for r in self.counted if r.verdict == "undecided"]

    @property
    def fields(self) -> tuple[str, ...]:
        return RATIO_FIELDS[self.kind]

    @property
    def timing(self) -> str:
        return TIMING[self.kind]


# --- rows --------------------------------------------------------------------------------


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def model_difference(run: StepRow | DataRow, ref: StepRow | DataRow) -> tuple[str | None, list]:
    """Why two rows are different models (None when comparable), and notes."""
    notes = []
    if isinstance(run, DataRow):
        if run.batch != ref.batch or run.image_size != ref.image_size:
            return "batch or image size differs", notes
        return None, notes
    ra, rb = run.key(), ref.key()
    if ra[1] is not None and rb[1] is not None and ra[1] != rb[1]:
        return f"batch differs ({ra[1]} vs {rb[1]})", notes
    if run.sample and ref.sample and run.sample != ref.sample:
        return f"sample differs ({run.sample} vs {ref.sample})", notes
    ga, gb = run.gflop_per_step, ref.gflop_per_step
    if ga is not None and gb is not None and not same_gflop(ga, gb):
        return f"GFLOP/step differs ({ga:.4g} vs {gb:.4g})", notes
    if run.params is not None and ref.params is not None and run.params != ref.params:
        delta = run.params - ref.params
        ca, cb = run.condition_params, ref.condition_params
        if ca is not None and cb is not None and ca - cb == delta:
            # The condition encoder's table moved between constant and state: the same
            # backbone doing the same arithmetic, so the times compare.
            notes.append(
                f"params differ by {delta:+,}, all in the condition encoder "
                f"(condition_params {ca:,} vs {cb:,}): same backbone"
            )
        else:
            return f"params differ ({run.params:,} vs {ref.params:,})", notes
    return None, notes


def _compile_notes(run: StepRow, ref: StepRow, compiled: str | None) -> list[str]:
    """The notes that say how two rows' compiled programs differ (`compiled`, from
    programs.between): the fingerprints when they do, and a side whose repeats compiled
    otherwise (its warning)."""
    notes = []
    if compiled not in (None, programs.SAME):
        notes.append(
            f"compiled: {compiled} (run: {programs.describe(run)}; "
            f"reference: {programs.describe(ref)})"
        )
    for side, row in (("run", run), ("reference", ref)):
        warning = programs.repeats_warning(row.repeats or [])
        if warning:
            notes.append(f"{side}: {warning}")
    return notes


def compare_rows(run_row, ref_row, kind: str, note: str | None, noise: NoiseModel) -> RowComparison:
    """One pair of rows (either may be None): ratios, notes and the timing's statistics;
    `decide` gives the verdicts of all the rows together."""
    row = _compare_rows(run_row, ref_row, kind, note, noise)
    if isinstance(row.run, StepRow) and isinstance(row.reference, StepRow):
        row.compiled = programs.between(row.run, row.reference)
        row.notes += _compile_notes(row.run, row.reference, row.compiled)
    return row


def _compare_rows(run_row, ref_row, kind: str, note: str | None, noise: NoiseModel):
    label = (run_row if run_row is not None else ref_row).label()
    fields = RATIO_FIELDS[kind]
    if run_row is None:
        return RowComparison(label, None, ref_row, {}, False, "not in this run")
    if ref_row is None:
        verdict = "no reference row" if run_row.status == "ok" else "failed; no reference row"
        notes = [f"error: {run_row.error}"] if run_row.error else []
        return RowComparison(label, run_row, None, {}, False, verdict, notes=notes)
    notes = [note] if note else []
    reason, model_notes = model_difference(run_row, ref_row)
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
    timing = TIMING[kind]
    ratio = ratios.get(timing)
    if ratio is None and kind == "step":
        timing, ratio = "p50_ms", ratios.get("p50_ms")
        if ratio is not None:
            notes.append("judged on p50 (no ms/step on one side)")
    if ratio is None:
        return RowComparison(
            label, run_row, ref_row, ratios, True, "no timing to compare", notes=notes
        )
    # For times lower is faster; for throughput (the loader) higher is.
    change = ratio - 1 if timing != "samples_per_s" else 1 / ratio - 1
    row = RowComparison(label, run_row, ref_row, ratios, True, "undecided", change, notes)
    sides = (timing_side(run_row, timing), timing_side(ref_row, timing))
    if None in sides:  # a zero figure: nothing to take the log of
        row.verdict = "no timing to compare"
        return row
    row.noise = noise.for_row(label)
    row.sides = sides
    row.difference = stats.compare_sides(*row.sides, row.noise)
    one = row.difference.one_draw
    if one is not None:
        which = {"run": "the run has", "reference": "the reference has", "both": "both have"}
        row.notes.append(
            f"{which[one]} one process: judged as one draw of its run (a prediction interval"
            + (", the process level from the noise table)" if one == "both" else ")")
        )
    return row


def timing_side(row: StepRow | DataRow, timing: str) -> stats.Side | None:
    """A row's timing as the log summary of its repeats (time per step or per batch); a row
    without repeats is one process with its point figure; None without a positive one."""
    if isinstance(row, DataRow):
        figures = [1e3 * row.batch / r.samples_per_s for r in row.repeats or [] if r.samples_per_s]
        if not figures and row.samples_per_s:
            figures = [1e3 * row.batch / row.samples_per_s]
    elif timing == "ms_per_step" and row.repeats:
        figures = [r.ms_per_step for r in row.repeats if r.ms_per_step]
    else:
        figures = [getattr(row, timing)]
    figures = [figure for figure in figures if figure is not None and figure > 0]
    return stats.side(figures) if figures else None


def decide(
    rows: list[RowComparison],
    band: float,
    alpha: float,
    host: stats.Drift | None = None,
    target: float = 0.10,
) -> None:
    """The verdicts of the rows with a timing on both sides, their p-values corrected
    together by Holm-Bonferroni (dew.bench.analysis.stats), what each could have detected;
    then every `faster`/`slower` held against a busy host and the host's drift."""
    tested = [row for row in rows if row.difference is not None and row.counts]
    adjusted = stats.holm([row.difference.p_value for row in tested])
    for row, p_value in zip(tested, adjusted, strict=True):
        diff = row.difference
        row.adjusted_p = p_value
        row.verdict, row.why = stats.verdict(diff, p_value, band=band / 100, alpha=alpha)
        row.detect = stats.detectable(
            *row.sides, row.noise, tests=len(tested), band=band / 100, alpha=alpha
        )
        busy = "; ".join(filter(None, (_busy(row.run, "run"), _busy(row.reference, "ref"))))
        if row.verdict in ("faster", "slower") and busy:
            # A change measured while other work ran says more about the host than the
            # stack (the seed: unet 54 ms/step under load against 16.4 idle).
            row.verdict, row.why = "undecided", f"{row.verdict} while {busy}"
        if host is not None and row.verdict in ("faster", "slower"):
            if not stats.beyond_drift(diff.low, diff.high, diff.ratio, host, band / 100):
                row.verdict, row.why = "undecided", _drift_why(host, diff, band / 100)
    for row in rows:
        if row.why:
            row.notes.append(f"undecided: {row.why}")


def _drift_why(host: stats.Drift, diff: stats.Difference, band: float) -> str:
    """Why a change the host's drift explains is undecided, with the figures."""
    floor, ceiling = stats.drift_band(host, band)
    shown = f"{diff.low:.3f}-{diff.high:.3f}"
    return (
        f"{_host_speed(host)} (host probe); the change is within that (ratio {shown} "
        f"against the band {floor:.3f}-{ceiling:.3f} around the drift)"
    )


def _host_speed(host: stats.Drift) -> str:
    """`the host ran 12% faster during the run than the reference`, from the probe's ratio
    (like a row's ratio: 0.88 takes 12% less time)."""
    change = host.ratio - 1
    if round(abs(change) * 100) == 0:
        return "the host ran at the same speed during the run and the reference"
    word = "faster" if change < 0 else "slower"
    return f"the host ran {abs(change):.0%} {word} during the run than the reference"


def probe_readings(record: BenchmarkRun) -> list[float]:
    """The record's host-probe readings, each once: the step benchmark takes one probe per
    time stage and gives it to every row's repeat timed in that stage, so a reading shared
    by rows is one look at the host, not several."""
    readings = {
        repeat.host_probe_ms
        for row in record.rows
        for repeat in row.repeats or []
        if repeat.host_probe_ms is not None
    }
    return sorted(readings)


def host_drift(
    run: BenchmarkRun, reference: BenchmarkRun, run_label: str, reference_label: str
) -> tuple[stats.Drift | None, str]:
    """The host's drift between the records (None when a side has no probe readings) and
    the header's line on it."""
    run_ms, ref_ms = probe_readings(run), probe_readings(reference)
    missing = [
        f"{which} {label}"
        for which, label, readings in (
            ("RUN", run_label, run_ms),
            ("REFERENCE", reference_label, ref_ms),
        )
        if not readings
    ]
    if missing:
        return None, f"no host probe in {' or '.join(missing)}: drift between the runs not checked"
    host = stats.drift(run_ms, ref_ms)
    line = (
        f"host drift: the host probe read {host.ratio:.3f}x [{host.low:.3f}, {host.high:.3f}] "
        f"run / reference ({host.readings[0]} and {host.readings[1]} readings): "
        f"{_host_speed(host)}"
    )
    return host, line


def _busy(row: StepRow | DataRow, side: str) -> str:
    """`the host was busy for k of n repeats (side)`, or "" when it never was."""
    repeats = row.repeats or []
    busy = sum(1 for repeat in repeats if repeat.host_busy)
    return f"the host was busy for {busy} of {len(repeats)} {side} repeats" if busy else ""


def compare(
    run: BenchmarkRun,
    reference: BenchmarkRun,
    *,
    band: float = 5.0,
    alpha: float = 0.05,
    run_label: str = "run",
    reference_label: str = "reference",
    noise: NoiseModel | None = None,
    target: float = 0.10,
) -> Comparison:
    """Hold `run` against `reference`; `noise` defaults to the committed table's
    (dew.bench.analysis.noise.for_records), `target` is the change (a fraction) each row
    says how many repeats it would need for."""
    if run.kind != reference.kind:
        raise UsageError(f"cannot compare a {run.kind} run with a {reference.kind} record")
    noise = for_records(run, reference) if noise is None else noise
    stack, unknown = stack_differences(run, reference)
    rows = [
        compare_rows(a, b, run.kind, note, noise)
        for a, b, note in match_rows(run.rows, reference.rows)
    ]
    host, host_line = host_drift(run, reference, run_label, reference_label)
    decide(rows, band, alpha, host, target)
    return Comparison(
        run_label, reference_label, run.kind, band, alpha, stack, unknown, rows, host,
        host_line, noise, target,
    )  # fmt: skip
