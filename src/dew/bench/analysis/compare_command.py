"""Hold a run against a reference record: did it reproduce, and if not, why?

`dew compare RUN [REFERENCE] [--band PCT] [--alpha 0.05] [--history DIR] [--with-superseded]
[--target-mde 10] [--run-noise PCT] [--format auto|md|text|json] [--plot PNG] [--overwrite]
[--strict]`

The first line says the outcome in plain words, and where the two records cannot show a row
the same within the band however many repeats they had, the narrowest band they could show
and the `dew ab` rounds that would show the one asked for (compare_report.headline). Then
the stack differences (packages, driver, device, env flags, commit, settings), then
the noise assumed (the device kind's process level, run level and whole-run shift, fitted
from the committed records' own A/A history less the two compared and their copies, and
what was left out and why: dew.bench.analysis.levels.history_scope), the whole run's shift (the
median of the rows' ratios) on its own line, then per row the ratios run / reference, the
timing ratio's 95% interval, its ratio against the shift, the p after Holm-Bonferroni
(over the shift and the rows), what the row could have detected (MDE) and the repeats a
side a change of --target-mde would need, and its word: `faster`/`slower` (against the
shift, interval beyond the band AND significant), `same` (its whole change's 90% interval
inside the band: an equivalence test), else `undecided` saying why. On CPU hosts a change
the host probe's own drift explains is `undecided` too. dew.bench.analysis.judge holds the
rules, dew.bench.analysis.comparison the model, dew.bench.analysis.compare_report prints it.
A compile-only RUN (settings.compile_only) has no times: compare prints the parity table
instead, params and GFLOP/step against the reference (dew.bench.analysis.parity).

The reference defaults to the newest record under results/ (published tables and runs) of
the run's kind, device kind and preset that shares the most of its cases; with none, one
line says so and how to give one (INCONCLUSIVE, exit 3). --plot writes a PNG, refusing an
input or an existing file (unless --overwrite) before anything is printed.

Exit 0: REPRODUCED (every comparable row shown the same); 1: NOT REPRODUCED (the shift or
a row faster or slower, or a row that ran in the reference fails now); 3: INCONCLUSIVE
(anything else; 1 with --strict); 2 for bad input: flags, a file that is no valid record,
records of two kinds, one file given twice or two records of one measurement (every
repeat identical), records with no comparable row (other cases: a usage mistake, not a
verdict), a TPU's times against another device kind's, an unwritable --plot; a timing
outside the schema's bounds is no valid record (dew.bench.record.schema.base.Timing). On a
terminal (--format auto) the report fits its width (tables.terminal_table); a file or a
pipe gets the full Markdown.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

import tyro

from dew import platforms
from dew.bench.analysis import compare_report, comparison, judge, parity, tables
from dew.bench.analysis.levels import history, noise
from dew.bench.analysis.plots import comparison_chart
from dew.bench.common import cli, files
from dew.bench.common.cli import UsageError
from dew.bench.common.files import RESULTS_ROOT
from dew.bench.record.schema import BenchmarkRun
from dew.bench.record.stack import same_device
from dew.bench.record.validate import check_file, load

PROG = "python -m dew.bench.analysis.compare_command"
RESULTS_DIR = RESULTS_ROOT / "results"


# --- the default reference ---------------------------------------------------------------


def _candidate(path: Path, run: BenchmarkRun) -> bool:
    """Whether a file is a record of the run's kind, device kind and preset, read cheaply
    (the JSON alone) before it is validated."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    if not isinstance(data, dict) or data.get("kind") != run.kind:
        return False
    devices = (data.get("environment") or {}).get("devices") or {}
    mine = run.environment.devices
    if mine is None or not devices.get("kind") or not mine.kind:
        return False
    preset = (data.get("settings") or {}).get("preset")
    return same_device(devices["kind"], mine.kind) and preset == run.settings.preset


def check_tpu_beside_its_kind(run, ref, run_path, ref_path) -> None:
    """A TPU's times are held against records of its own kind only (UsageError otherwise):
    another chip, a GPU or a CPU measures another machine, not a reproduction, and there is
    no A/A history across two kinds to judge by. Params and GFLOP (a compile-only run's
    parity table) compare across kinds."""
    devices = [record.environment.devices for record in (run, ref)]
    if None in devices or not any(platforms.get(d.platform).own_kind_only for d in devices):
        return
    kinds = [d.kind or d.platform for d in devices]
    if not same_device(*kinds):
        raise UsageError(
            f"RUN {run_path} ran on {kinds[0]} and REFERENCE {ref_path} on {kinds[1]}: a "
            "TPU's times are compared with records of its own kind; give a reference made "
            f"on {kinds[0]}, or leave it out for the newest under results/"
        )


def default_reference(run: BenchmarkRun, run_path: Path, directory: Path = RESULTS_DIR):
    """The newest record under `directory` (published tables and runs) of the run's kind,
    device kind and preset that shares the most of its cases, timed where the run is;
    None when there is none."""
    candidates = []
    paths = sorted(directory.rglob("*.json")) if directory.is_dir() else []
    for path in paths:
        if {"schema", "site"} & set(path.relative_to(directory).parts):
            continue
        if path.resolve() == run_path.resolve() or not _candidate(path, run):
            continue
        try:
            record, errors = check_file(path)
        except UsageError:  # not a record at all: not a candidate
            continue
        if errors:
            continue
        if record.settings.compile_only and not run.settings.compile_only:
            continue  # no time to hold a timed run against (check_comparable refuses it)
        shared = {r.key() for r in run.rows} & {r.key() for r in record.rows}
        if shared:
            candidates.append(((len(shared), str(record.created or "")), path))
    return max(candidates)[1] if candidates else None


def no_reference(run: BenchmarkRun, run_path: Path) -> str:
    """The verdict line of a run with nothing to hold it against."""
    devices = run.environment.devices
    device = devices.kind if devices is not None and devices.kind else "an unrecorded device"
    return (f"INCONCLUSIVE: nothing to hold {run_path} against: no record of {device}, "
            f"preset {run.settings.preset}, with any of its cases under {RESULTS_DIR}; "
            "give REFERENCE (another run of the same cases, or a published table)")  # fmt: skip


def check_not_one_measurement(run: BenchmarkRun, ref: BenchmarkRun, run_path: Path,
                              ref_path: Path) -> None:  # fmt: skip
    """UsageError when every row the two records share holds the same repeat figures: one
    measurement twice (a copy of a record), which would read REPRODUCED at no noise."""
    theirs = {row.key(): _figures(row) for row in ref.rows}
    shared = [(_figures(row), theirs[row.key()]) for row in run.rows if row.key() in theirs]
    measured = [(mine, other) for mine, other in shared if mine or other]
    if measured and all(sorted(mine) == sorted(other) for mine, other in measured):
        raise UsageError(
            f"RUN {run_path} and REFERENCE {ref_path} hold the same measurements (every "
            "repeat identical): a record cannot reproduce itself; give a record of another "
            "run of the same cases"
        )


def _figures(row) -> list[float]:
    """A row's repeat figures (ms per step, or samples per s for the loader); a row without
    repeats (a published table's), its own figure."""
    figures = [getattr(r, "ms_per_step", None) or getattr(r, "samples_per_s", None)
               for r in row.repeats or ()]  # fmt: skip
    if not figures:
        figures = [getattr(row, "ms_per_step", None) or getattr(row, "samples_per_s", None)]
    return [f for f in figures if f is not None]


def nothing_shared(run: BenchmarkRun, ref: BenchmarkRun, run_path: Path, ref_path: Path) -> str:
    """The line of two records with no row to hold against each other: other cases (another
    preset, batch or model size), a usage mistake rather than a verdict."""

    def what(record: BenchmarkRun) -> str:
        devices = record.environment.devices
        device = devices.kind if devices is not None and devices.kind else "device unrecorded"
        preset = record.settings.preset or "no preset"
        return f"{device}, {preset}: {', '.join(row.label() for row in record.rows[:4])}" + (
            ", ..." if len(record.rows) > 4 else ""
        )

    return (
        f"RUN {run_path} ({what(run)}) and REFERENCE {ref_path} ({what(ref)}) share no "
        "comparable row (the same model, batch and settings); compare records of the same "
        "cases, or leave REFERENCE out for the newest under results/ that shares them"
    )


# --- the command line --------------------------------------------------------------------


@dataclasses.dataclass
class Args:
    """Hold a run record against a reference: the stack differences, per row the ratios and
    a verdict within the noise band; for a compile-only run, the parity table. Exit 0:
    REPRODUCED (parity); 1: NOT REPRODUCED; 3: INCONCLUSIVE; 2: bad input."""

    run: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN")]
    """the run's record (a --json-out of tools/benchmark_step.py or benchmark_data.py)"""
    reference: Annotated[
        str | None,
        tyro.conf.Positional,
        tyro.conf.arg(metavar="[REFERENCE]", help_behavior_hint="(optional)"),
    ] = None
    """the record to hold it against; default: the newest under results/ of the run's device
    kind and preset sharing the most of its cases"""
    band: float | None = None
    """noise band in percent, in [0, 100): a smaller change is never a verdict; default: the
    device kind's (2 on a GPU, 5 on a CPU host)"""
    alpha: float = 0.05
    """significance level of a verdict, after Holm-Bonferroni over the rows compared"""
    strict: bool = False
    """exit 1 also when the comparison is INCONCLUSIVE (instead of 3)"""
    history: str | None = None
    """the folder whose A/A records (every one under it) give each device kind's noise;
    default: the committed records under results/ (those git tracks). Either way the records
    compared and their copies are left out, and the noise line names what was"""
    with_superseded: bool = False
    """fit the noise with the records results/superseded.json lists (left out by default):
    a superseded record judged at the noise of its time"""
    target_mde: float = 10.0
    """the change in percent each row says how many repeats a side it would need for"""
    run_noise: float | None = None
    """the shift between two runs in percent, taken as known (a row's own run level 0);
    default: fitted from the history of the records' device kind"""
    format: Literal["auto", "md", "text", "json"] = "auto"
    """auto: on a terminal aligned text fitted to its width, else Markdown in full; md,
    aligned text in full, or one JSON object (the fields: docs/reproducing.md)"""
    plot: str | None = None
    """write a PNG bar chart here: ms/step (samples/s; GFLOP/step for a compile-only run)"""
    overwrite: bool = False
    """let --plot replace an existing file"""


def partial_line(cmp: comparison.Comparison, run: BenchmarkRun, ref: BenchmarkRun) -> str:
    """The headline's start when a side is a record a stop cut short: which, how far it
    got, and the rows the other side has that it lacks; "" when both are whole."""
    said = []
    for role, label, record, mine in (
        ("RUN", cmp.run_label, run, "run"),
        ("REFERENCE", cmp.reference_label, ref, "reference"),
    ):
        if record.partial:
            missing = [r.label for r in cmp.rows if getattr(r, mine) is None]
            lacks = f"; it lacks {', '.join(missing)}" if missing else ""
            said.append(f"PARTIAL {role} {label} ({record.partial}){lacks}.")
    return " ".join(said) + (" " if said else "")


def _relative(path: Path) -> Path:
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """`prog` is the command as typed, in its usage and error lines (`dew compare`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run(prog, lambda: _compare(cli.parse(Args, argv, prog=prog)))


def _compare(args: Args) -> int:
    if args.band is not None and not 0 <= args.band < 100:  # a NaN fails this too
        raise UsageError(f"--band {args.band:g} is not a percentage in [0, 100)")
    if not 0 < args.alpha < 0.5:  # a NaN fails this too
        raise UsageError(
            f"--alpha {args.alpha:g} is not a significance level in (0, 0.5): "
            "the equivalence test holds the 1 - 2 alpha interval inside the band"
        )
    if not 0 < args.target_mde < 1000:
        raise UsageError(f"--target-mde {args.target_mde:g} is not a percentage in (0, 1000)")
    if args.run_noise is not None and not 0 <= args.run_noise < 100:
        raise UsageError(f"--run-noise {args.run_noise:g} is not a percentage in [0, 100)")
    fmt = tables.for_terminal(args.format, otherwise="md")
    run_path = Path(args.run)
    run = load(run_path, "RUN")
    if args.reference is not None:
        ref_path = Path(args.reference)
    else:
        found = default_reference(run, run_path)
        if found is None:
            line = no_reference(run, run_path)
            if fmt == "json":
                print(json.dumps({"kind": run.kind, "run": str(run_path), "reference": None,
                                  "exit": 3, "outcome": judge.INCONCLUSIVE,
                                  "summary": line}))  # fmt: skip
            else:
                print(line)
            return cli.EXIT_CHANGED if args.strict else judge.EXIT_CODES[judge.INCONCLUSIVE]
        ref_path = _relative(found)
    if files.same_file(run_path, ref_path):
        raise UsageError(
            f"RUN {run_path} and REFERENCE {ref_path} are one file: a record against itself "
            "shows nothing; give another record of the same cases as REFERENCE, or leave it "
            "out for the newest under results/"
        )
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
    if ref.settings.compile_only and not run.settings.compile_only:
        raise UsageError(
            f"REFERENCE {ref_path} is compile-only (nothing timed) and RUN {run_path} is timed: "
            "there is no time to hold RUN's against; give a timed REFERENCE, or the "
            "compile-only record as RUN for its parity table (params, GFLOP/step)"
        )
    if run.settings.compile_only:
        if fmt == "json":
            raise UsageError(f"RUN {run_path} is compile-only: its parity table has md and text")
        rows = parity.check(run, ref)
        shown = "text" if fmt == "terminal" else fmt
        print(parity.render(rows, run, ref, str(run_path), str(ref_path), shown))
        field = "gflop_per_step"
        code = cli.EXIT_OK if parity.passed(rows) else cli.EXIT_CHANGED
    else:
        check_tpu_beside_its_kind(run, ref, run_path, ref_path)
        check_not_one_measurement(run, ref, run_path, ref_path)
        folder = None
        if args.history is not None:
            folder = Path(args.history)
            if not folder.is_dir():
                raise UsageError(f"--history {folder} is not a folder of records")
        kinds = history.kinds_table(folder, exclude=(run_path, ref_path),
                                    with_superseded=args.with_superseded)  # fmt: skip
        model = noise.for_records(run, ref, kinds, exclude=(run_path, ref_path))
        if args.run_noise is not None:
            pooled = model.pooled
            given = noise.Noise(pooled.process, pooled.process_df, 0.0, math.inf,
                                  args.run_noise / 100, math.inf,
                                  f"--run-noise {args.run_noise:g}")  # fmt: skip
            model = noise.NoiseModel(given, {}, given.source)
        cmp = comparison.compare(
            run, ref, band=args.band, alpha=args.alpha, run_label=str(run_path),
            reference_label=str(ref_path), noise=model, target=args.target_mde / 100,
        )  # fmt: skip
        if not cmp.counted:
            raise UsageError(nothing_shared(run, ref, run_path, ref_path))
        lead = partial_line(cmp, run, ref)
        if fmt == "json":  # a partial side's line, or null
            print(json.dumps({**compare_report.as_json(cmp), "partial": lead.strip() or None},
                             indent=1))  # fmt: skip
        else:
            print(compare_report.comparison(cmp, run, ref, fmt, lead=lead))
        rows, field = cmp.rows, cmp.timing
        code = judge.EXIT_CODES[cmp.outcome]
        code = cli.EXIT_CHANGED if args.strict and code == 3 else code
    if plot_path is not None:
        try:
            comparison_chart(plot_path, rows, field, str(run_path), str(ref_path))
        except OSError as error:  # the place was checked; a full disk still ends here
            raise UsageError(f"--plot {plot_path}: {cli.one_line(error)}") from None
        print(f"chart: {plot_path}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
