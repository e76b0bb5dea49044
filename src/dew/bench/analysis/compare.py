"""Hold a run against a reference record: did it reproduce, and if not, why?

`python -m dew.bench.analysis.compare RUN [REFERENCE] [--band 5] [--format md|text] [--plot PNG]
[--overwrite]`

First the stack differences (packages, driver, device, env flags, commit, settings), then
per row the ratios run / reference of ms/step, p50, samples/s, util and peak GiB, and a
verdict: `faster`/`slower` only beyond the band AND significant at --alpha after
Holm-Bonferroni over the rows (dew.bench.analysis.stats), `same` when the whole interval of the
ratio lies inside the band, else `undecided` saying why; a side without raw samples (the
published tables, schema 1) gets a band verdict on its point figures, and says so.
When both records hold host-speed probes (`host_probe_ms` of every repeat, taken before
the repeat was timed: dew.bench.runtime.hostprobe), the host's own drift between them, h = the
median of the
run's readings / the reference's with its interval (`stats.drift`), is shown in the header,
and a `faster`/`slower` must also lie wholly beyond the band around h: a change the host's
drift explains is `undecided` ("the host ran 12% faster during the run ..."). A record
without readings (older ones, the published tables) is compared as before, and the header
says once that the drift was not checked. Rows are matched on `row.key()` (see
`match_rows`). A row whose model differs (GFLOP/step, backbone params, batch or sample)
is "different model, not comparable": its ratios are shown but it does not decide the
exit status.
A compile-only RUN (settings.compile_only) has no times: compare prints the parity table
instead, params and GFLOP/step against the reference (dew.bench.analysis.parity has the commands).

The reference defaults to the published record (results/published/) of the same kind that
shares the most rows with the run. --plot writes a PNG, refusing an input or an existing
file (unless --overwrite) before anything is printed. Exit 0 when no row is faster or
slower (parity holds), 1 when one is, a row failed in this run, nothing was comparable or,
with --strict, a row is undecided; 2 for bad input: flags, a file that is no valid record,
records of two kinds, an unwritable --plot.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

import tyro

from dew.bench.analysis import stats
from dew.bench.analysis import tables as report
from dew.bench.analysis.plots import comparison_chart
from dew.bench.analysis.repeats import data_groups, step_groups
from dew.bench.common import cli, files
from dew.bench.common.cli import UsageError
from dew.bench.common.files import REPO_ROOT
from dew.bench.record.schema import BenchmarkRun, DataRow, StepRow
from dew.bench.record.stack import StackDifference, same_device, stack_differences
from dew.bench.record.validate import check_file, load

PROG = "python -m dew.bench.analysis.compare"
PUBLISHED_DIR = REPO_ROOT / "results" / "published"
GFLOP_TOLERANCE = 1e-3  # 0.1%: the HLO count is exact; beyond this the step differs

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
    samples: stats.Comparison | None = None  # both sides have raw samples (schema 2)
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


def match_rows(run_rows, ref_rows) -> list[tuple]:
    """(run row, reference row, note) pairs; None on a side without a partner. Rows match
    on `row.key()`; a leftover run row may then pair with a leftover reference row, with a
    note saying how (`_partner`)."""
    ref_by_key: dict[tuple, list] = {}
    for row in ref_rows:
        ref_by_key.setdefault(row.key(), []).append(row)
    pairs, left_run = [], []
    for row in run_rows:
        candidates = ref_by_key.get(row.key())
        if candidates:
            pairs.append((row, candidates.pop(0), None))
        else:
            left_run.append(row)
    left_ref = [r for rows in ref_by_key.values() for r in rows]
    unmatched = []
    for row in left_run:
        partner, note = _partner(row, left_run, left_ref)
        if partner is None:
            unmatched.append((row, None, None))
        else:
            left_ref.remove(partner)
            pairs.append((row, partner, note))
    return pairs + unmatched + [(None, r, None) for r in left_ref]


def _partner(row, left_run: list, left_ref: list) -> tuple[object | None, str | None]:
    """A leftover reference row for a leftover run row, and why they pair: a published
    record predates case settings a run now records (condition_in_state), so a step row
    whose settings extend those of exactly one reference row of the same architecture,
    batch, head_chunks and attention_impl (the one sharing most settings) is that row's
    case; else the one row of its name, when it is the only one on both sides."""
    key = row.key()
    if isinstance(row, StepRow):
        settings = set(key[4])
        extended = [r for r in left_ref if r.key()[:4] == key[:4] and set(r.key()[4]) < settings]
        most = max((len(r.key()[4]) for r in extended), default=-1)
        closest = [r for r in extended if len(r.key()[4]) == most]
        if len(closest) == 1:
            extra = sorted(settings - set(closest[0].key()[4]))
            shown = ", ".join(f"{name}={value}" for name, value in extra)
            return closest[0], f"matched to {closest[0].label()}, which does not record {shown}"
    same_run = [r for r in left_run if r.key()[0] == key[0]]
    same_ref = [r for r in left_ref if r.key()[0] == key[0]]
    if len(same_run) == 1 and len(same_ref) == 1:
        return same_ref[0], f"matched by name only: {row.label()} vs {same_ref[0].label()}"
    return None, None


def same_gflop(a: float, b: float) -> bool:
    """Two GFLOP/step counts of one step: equal within GFLOP_TOLERANCE."""
    return abs(a - b) <= GFLOP_TOLERANCE * max(a, b)


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
        row.samples = stats.compare_rows(run_groups, ref_groups)  # verdict: after Holm
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
            timed = row.samples or stats.Comparison(1 + row.change, None, None, None, (0, 0))
            if not stats.beyond_drift(timed, host, band / 100):
                row.verdict, row.why = "undecided", _drift_why(host, timed, band / 100)
        if row.why:
            row.notes.append(f"undecided: {row.why}")


def _drift_why(host: stats.Drift, timed: stats.Comparison, band: float) -> str:
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


# --- the default reference ---------------------------------------------------------------


def default_reference(run: BenchmarkRun, run_path: Path, directory: Path = PUBLISHED_DIR) -> Path:
    """The published record of the run's kind sharing the most rows; ties: same device,
    then the newest."""
    candidates = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        if path.resolve() == run_path.resolve():
            continue
        try:
            record, errors = check_file(path)
        except UsageError:  # not a record at all: not a candidate
            continue
        if errors or record.kind != run.kind:
            continue
        shared = {r.key() for r in run.rows} & {r.key() for r in record.rows}
        names = {r.key()[0] for r in run.rows} & {r.key()[0] for r in record.rows}
        da, db = run.environment.devices, record.environment.devices
        same = bool(da and db and da.kind and db.kind and same_device(da.kind, db.kind))
        created = str(record.created or "")
        candidates.append(((len(shared), len(names), same, created), path))
    if not candidates:
        raise UsageError(f"no published {run.kind} record in {directory}; give REFERENCE")
    return max(candidates)[1]


# --- the command line --------------------------------------------------------------------


@dataclasses.dataclass
class Args:
    """Hold a run record against a reference: the stack differences, per row the ratios and
    a verdict within the noise band; for a compile-only run, the parity table. Exit 0:
    reproduced (parity); 1: not; 2: bad input."""

    run: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN")]
    """the run's record (a --json-out of tools/benchmark_step.py or benchmark_data.py)"""
    reference: Annotated[str | None, tyro.conf.Positional, tyro.conf.arg(metavar="REFERENCE")] = (
        None
    )
    """the record to hold it against; default: the published one sharing the most rows"""
    band: float = 5.0
    """noise band in percent, in [0, 100): a smaller change is never a verdict"""
    alpha: float = 0.05
    """significance level of a verdict, after Holm-Bonferroni over the rows compared"""
    strict: bool = False
    """exit 1 also when a row is undecided (too few samples or too noisy)"""
    format: Literal["md", "text"] = "md"
    """Markdown or aligned text"""
    plot: str | None = None
    """write a PNG bar chart here: ms/step (samples/s; GFLOP/step for a compile-only run)"""
    overwrite: bool = False
    """let --plot replace an existing file"""


def _relative(path: Path) -> Path:
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run(PROG, lambda: _compare(cli.parse(Args, argv, prog=PROG)))


def _compare(args: Args) -> int:
    if not 0 <= args.band < 100:  # a NaN fails this too
        raise UsageError(f"--band {args.band:g} is not a percentage in [0, 100)")
    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha {args.alpha:g} is not a probability in (0, 1)")
    run_path = Path(args.run)
    run = load(run_path, "RUN")
    if args.reference is not None:
        ref_path = Path(args.reference)
    else:
        ref_path = _relative(default_reference(run, run_path))
    plot_path = None
    if args.plot is not None:  # before any output: an unwritable chart loses nothing yet
        plot_path = files.check_output_file(
            args.plot, flag="--plot", overwrite=args.overwrite, inputs=(run_path, ref_path)
        )
    ref = load(ref_path, "REFERENCE")
    if run.kind != ref.kind:
        raise UsageError(
            f"RUN {run_path} is a {run.kind} record and REFERENCE {ref_path} a {ref.kind} "
            "record; compare records of one kind"
        )
    if run.settings.compile_only:
        from dew.bench.analysis import parity  # parity builds on this module: imported when used

        rows = parity.check(run, ref)
        print(parity.render(rows, run, ref, str(run_path), str(ref_path), args.format))
        ok, field = parity.passed(rows), "gflop_per_step"
    else:
        cmp = compare(
            run, ref, band=args.band, alpha=args.alpha, run_label=str(run_path),
            reference_label=str(ref_path),
        )  # fmt: skip
        print(report.comparison(cmp, run, ref, args.format))
        rows, field = cmp.rows, cmp.timing
        ok = cmp.reproduced and not (args.strict and cmp.undecided)
    if plot_path is not None:
        try:
            comparison_chart(plot_path, rows, field, str(run_path), str(ref_path))
        except OSError as error:  # the place was checked; a full disk still ends here
            raise UsageError(f"--plot {plot_path}: {cli.one_line(error)}") from None
        print(f"chart: {plot_path}", file=sys.stderr)
    return cli.EXIT_OK if ok else cli.EXIT_CHANGED


if __name__ == "__main__":
    sys.exit(main())
