"""Hold a run against a reference record: did it reproduce, and if not, why?

`python -m dew.bench.analysis.compare RUN [REFERENCE] [--band 5] [--alpha 0.05]
[--target-mde 10] [--run-noise PCT] [--format md|text|json] [--plot PNG] [--overwrite]`

First the stack differences (packages, driver, device, env flags, commit, settings), then
per row the ratios run / reference of ms/step, p50, samples/s, util and peak GiB, the
timing ratio's interval (the repeats and the run level between two records), the p after
Holm-Bonferroni, what the row could have detected (MDE) and the repeats a side a change of
--target-mde would need, and a verdict: `faster`/`slower` only with the whole interval
beyond the band AND significant at --alpha after Holm, `same` with the whole interval
inside the band, else `undecided` saying why; with host-speed probes in both records a
change the host's own drift explains is `undecided` too. The run level comes from the
committed A/A records (results/noise.json, dew.bench.analysis.noise) or --run-noise.
dew.bench.analysis.comparison holds the model, dew.bench.analysis.matching which rows pair
up and dew.bench.analysis.report prints it; this module is the command line.
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
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

import tyro

from dew.bench.analysis import comparison, noise, parity, report
from dew.bench.analysis.plots import comparison_chart
from dew.bench.common import cli, files
from dew.bench.common.cli import UsageError
from dew.bench.common.files import REPO_ROOT
from dew.bench.record.schema import BenchmarkRun
from dew.bench.record.stack import same_device
from dew.bench.record.validate import check_file, load

PROG = "python -m dew.bench.analysis.compare"
PUBLISHED_DIR = REPO_ROOT / "results" / "published"


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
    target_mde: float = 10.0
    """the change in percent each row says how many repeats a side it would need for"""
    run_noise: float | None = None
    """the run level in percent (the spread of a row between two runs); default: measured
    on the committed A/A records of the records' device kind (results/noise.json)"""
    format: Literal["md", "text", "json"] = "md"
    """Markdown, aligned text, or one JSON object (the fields: docs/reproducing.md)"""
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
    if not 0 < args.target_mde < 1000:
        raise UsageError(f"--target-mde {args.target_mde:g} is not a percentage in (0, 1000)")
    if args.run_noise is not None and not 0 <= args.run_noise < 100:
        raise UsageError(f"--run-noise {args.run_noise:g} is not a percentage in [0, 100)")
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
        if args.format == "json":
            raise UsageError(f"RUN {run_path} is compile-only: its parity table has md and text")
        rows = parity.check(run, ref)
        print(parity.render(rows, run, ref, str(run_path), str(ref_path), args.format))
        ok, field = parity.passed(rows), "gflop_per_step"
    else:
        model = noise.for_records(run, ref)
        if args.run_noise is not None:
            pooled = model.pooled
            given = noise.Noise(args.run_noise / 100, pooled.process, math.inf,
                                f"--run-noise {args.run_noise:g}")  # fmt: skip
            model = noise.NoiseModel(given, {}, given.source)
        cmp = comparison.compare(
            run, ref, band=args.band, alpha=args.alpha, run_label=str(run_path),
            reference_label=str(ref_path), noise=model, target=args.target_mde / 100,
        )  # fmt: skip
        if args.format == "json":
            print(json.dumps(report.as_json(cmp), indent=1))
        else:
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
