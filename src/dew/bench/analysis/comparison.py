"""The model of holding a run against a reference: per row the ratios and a verdict.

Per row the ratios run / reference of ms/step, p50, samples/s, util and peak GiB (the
loader: samples/s, p50, p95, first batch), and a verdict: `faster`/`slower` only beyond
the band AND significant at alpha after Holm-Bonferroni over the rows
(dew.bench.analysis.stats), `same` when the whole interval of the ratio lies inside the
band, else `undecided` saying why; a side without raw samples (the published tables,
schema 1) gets a band verdict on its point figures, and says so.
When both records hold host-speed probes (`host_probe_ms` of every repeat, taken before
the repeat was timed: dew.bench.runtime.hostprobe), the host's own drift between them, h = the
median of the run's readings / the reference's with its interval (`stats.drift`), is shown
in the header, and a `faster`/`slower` must also lie wholly beyond the band around h: a
change the host's drift explains is `undecided` ("the host ran 12% faster during the run
..."). A record without readings (older ones, the published tables) is compared as
before, and the header says once that the drift was not checked. Rows are paired by
dew.bench.analysis.matching. A row whose model differs (GFLOP/step, backbone params, batch
or sample) is "different model, not comparable": its ratios are shown but it does not
decide the exit status.

`compare(run, reference)` gives the `Comparison`; dew.bench.analysis.tables prints it and
dew.bench.analysis.compare is the command line.
"""

from __future__ import annotations

import dataclasses

from dew.bench.analysis import stats
from dew.bench.analysis.matching import match_rows, same_gflop
from dew.bench.analysis.repeats import data_groups, step_groups
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
    samples: stats.RepeatRatio | None = None  # both sides have raw samples (schema 2)
    why: str | None = None  # what an `undecided` lacks

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


def _model_difference(run: StepRow | DataRow, ref: StepRow | DataRow) -> tuple[str | None, list]:
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
        return f"GFLOP/step differs ({ga:.1f} vs {gb:.1f})", notes
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


def compare_rows(run_row, ref_row, kind: str, band: float, note: str | None) -> RowComparison:
    label = (run_row if run_row is not None else ref_row).label()
    fields = RATIO_FIELDS[kind]
    if run_row is None:
        return RowComparison(label, None, ref_row, {}, False, "not in this run")
    if ref_row is None:
        verdict = "no reference row" if run_row.status == "ok" else "failed; no reference row"
        notes = [f"error: {run_row.error}"] if run_row.error else []
        return RowComparison(label, run_row, None, {}, False, verdict, notes=notes)
    notes = [note] if note else []
    reason, model_notes = _model_difference(run_row, ref_row)
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
    if abs(change) <= band / 100:
        verdict = "same"
    else:
        verdict = "faster" if change < 0 else "slower"
    row = RowComparison(label, run_row, ref_row, ratios, True, verdict, change, notes)
    groups = step_groups if kind == "step" else data_groups
    run_groups, ref_groups = groups(run_row), groups(ref_row)
    if run_groups and ref_groups:
        row.samples = stats.repeat_ratio(run_groups, ref_groups)  # verdict: after Holm
    else:
        side = "reference" if not ref_groups else "run"
        row.notes.append(f"{side} has no samples: a band verdict on the point figures")
    return row


def decide(
    rows: list[RowComparison], band: float, alpha: float, host: stats.Drift | None = None
) -> None:
    """The verdicts of the rows with samples on both sides, their p-values corrected
    together by Holm-Bonferroni (dew.bench.analysis.stats); then, with the host's drift measured,
    every `faster`/`slower` held against the band around it."""
    tested = [row for row in rows if row.samples is not None and row.counts]
    adjusted = stats.holm([row.samples.p_value for row in tested])
    for row, p_value in zip(tested, adjusted, strict=True):
        row.verdict, row.why = stats.verdict(row.samples, p_value, band=band / 100, alpha=alpha)
        busy = "; ".join(filter(None, (_busy(row.run, "run"), _busy(row.reference, "ref"))))
        if row.verdict in ("faster", "slower") and busy:
            # A change measured while other work ran says more about the host than the
            # stack (the seed: unet 54 ms/step under load against 16.4 idle).
            row.verdict, row.why = "undecided", f"{row.verdict} while {busy}"
    for row in rows:
        if host is not None and row.counts and row.verdict in ("faster", "slower"):
            # A row without samples on a side (a band verdict) is held by its point ratio.
            timed = row.samples or stats.RepeatRatio(1 + row.change, None, None, None, (0, 0))
            if not stats.beyond_drift(timed, host, band / 100):
                row.verdict, row.why = "undecided", _drift_why(host, timed, band / 100)
        if row.why:
            row.notes.append(f"undecided: {row.why}")


def _drift_why(host: stats.Drift, timed: stats.RepeatRatio, band: float) -> str:
    """Why a change the host's drift explains is undecided, with the figures."""
    floor, ceiling = stats.drift_band(host, band)
    low, high = timed.span()
    shown = f"{low:.3f}-{high:.3f}" if timed.low is not None else f"{timed.ratio:.3f}"
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
) -> Comparison:
    if run.kind != reference.kind:
        raise UsageError(f"cannot compare a {run.kind} run with a {reference.kind} record")
    stack, unknown = stack_differences(run, reference)
    rows = [
        compare_rows(a, b, run.kind, band, note)
        for a, b, note in match_rows(run.rows, reference.rows)
    ]
    host, host_line = host_drift(run, reference, run_label, reference_label)
    decide(rows, band, alpha, host)
    return Comparison(
        run_label, reference_label, run.kind, band, alpha, stack, unknown, rows, host, host_line
    )
