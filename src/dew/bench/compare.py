"""Hold a run against a reference record: did it reproduce, and if not, why?

`python -m dew.bench.compare RUN [REFERENCE] [--band 5] [--format md|text] [--plot PNG]`

First the stack differences (packages, driver, device, env flags, commit, settings), then
per row the ratios run / reference of ms/step, p50, samples/s, util and peak GiB, and a
verdict within the noise band. Rows are matched by architecture and case settings. A row
whose model differs (GFLOP/step, backbone params, batch or sample) is "different model,
not comparable": its ratios are shown but it does not decide the exit status.

The reference defaults to the published record (results/published/) of the same kind that
shares the most rows with the run. Exit 0 when every comparable row is within the band,
1 when one is not (or nothing was comparable), 2 for bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from dew.bench import report
from dew.bench.schema import BenchmarkRun, DataRow, StepRow
from dew.bench.validate import check_file

PUBLISHED_DIR = Path(__file__).resolve().parents[3] / "results" / "published"
GFLOP_TOLERANCE = 1e-3  # 0.1%: the HLO count is exact; beyond this the step differs
NOT_RECORDED = "not recorded"

RATIO_FIELDS = {
    "step": ("ms_per_step", "p50_ms", "samples_per_s", "util", "peak_gib"),
    "data": ("samples_per_s", "p50_ms", "p95_ms", "first_batch_s"),
}
RATIO_HEADERS = {
    "ms_per_step": "ms/step",
    "p50_ms": "p50",
    "p95_ms": "p95",
    "samples_per_s": "samples/s",
    "util": "util",
    "peak_gib": "peak GiB",
    "first_batch_s": "first batch",
}


class UsageError(Exception):
    """Bad input: one line for stderr, exit 2."""


@dataclasses.dataclass
class StackDifference:
    what: str
    run: str
    reference: str


@dataclasses.dataclass
class RowComparison:
    label: str
    run: StepRow | DataRow | None
    reference: StepRow | DataRow | None
    ratios: dict[str, float | None]
    comparable: bool
    verdict: str
    change: float | None = None  # relative change of the timing that decided the verdict
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def counts(self) -> bool:
        """Whether this row decides the exit status."""
        return self.comparable and self.run is not None and self.reference is not None

    @property
    def within_band(self) -> bool:
        return self.verdict == "reproduced"


@dataclasses.dataclass
class Comparison:
    run_label: str
    reference_label: str
    kind: str
    band: float
    stack: list[StackDifference]
    not_recorded: list[str]
    rows: list[RowComparison]

    @property
    def counted(self) -> list[RowComparison]:
        return [r for r in self.rows if r.counts]

    @property
    def reproduced(self) -> bool:
        counted = self.counted
        return bool(counted) and all(r.within_band for r in counted)


# --- stack -------------------------------------------------------------------------------


def _show(value) -> str:
    if value is None:
        return NOT_RECORDED
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items())) or "{}"
    return str(value)


def _device_kind(kind: str | None) -> str | None:
    """'NVIDIA GeForce RTX 4080' and 'RTX 4080' name the same card."""
    if kind is None:
        return None
    return re.sub(r"nvidia|geforce|[\s_-]", "", kind.lower())


def _same_commit(a: str, b: str) -> bool:
    """A short hash and the full one agree."""
    return a.startswith(b) or b.startswith(a)


def stack_differences(
    run: BenchmarkRun, ref: BenchmarkRun
) -> tuple[list[StackDifference], list[str]]:
    """What differs between the two stacks, and what only one side recorded."""
    diffs: list[StackDifference] = []
    unknown: list[str] = []

    def known(what: str, a, b, same=lambda x, y: x == y) -> None:
        if a is None and b is None:
            return
        if a is None or b is None:
            unknown.append(what)
        elif not same(a, b):
            diffs.append(StackDifference(what, _show(a), _show(b)))

    ea, eb = run.environment, ref.environment
    ca, cb = ea.code, eb.code
    known("commit", ca and ca.commit, cb and cb.commit, _same_commit)
    known("dirty tree", ca and ca.dirty, cb and cb.dirty)
    da, db = ea.devices, eb.devices
    known(
        "device",
        da and da.kind,
        db and db.kind,
        lambda x, y: _device_kind(x) in _device_kind(y) or _device_kind(y) in _device_kind(x),
    )
    known("device count", da and da.count, db and db.count)
    known(
        "device memory GiB",
        da and da.memory_gib,
        db and db.memory_gib,
        lambda x, y: abs(x - y) < 0.5,
    )
    known("driver", ea.driver_version, eb.driver_version)
    known("CUDA", ea.cuda_version, eb.cuda_version)
    known("cuDNN", ea.cudnn_version, eb.cudnn_version)
    known("python", ea.python, eb.python)
    pa, pb = ea.packages or {}, eb.packages or {}
    for name in sorted(set(pa) | set(pb)):
        known(f"package {name}", pa.get(name), pb.get(name))
    ta, tb = ea.container, eb.container
    for field in ("engine", "image_id", "base_image_digest", "lock_sha256"):
        known(f"container {field}", ta and getattr(ta, field), tb and getattr(tb, field))
    # Env flags: a flag set on one side and unset (or unrecorded) on the other is a
    # difference in how the run ran, so every one is listed.
    fa, fb = ea.env_flags, eb.env_flags
    if fa is not None or fb is not None:
        for name in sorted(set(fa or {}) | set(fb or {})):
            a = (fa or {}).get(name, "unset" if fa is not None else NOT_RECORDED)
            b = (fb or {}).get(name, "unset" if fb is not None else NOT_RECORDED)
            if a != b:
                diffs.append(StackDifference(f"env {name}", a, b))
    ja, jb = ea.jax_config or {}, eb.jax_config or {}
    for name in sorted(set(ja) & set(jb)):
        known(f"jax config {name}", ja[name], jb[name])
    sa, sb = run.settings, ref.settings
    for field in ("preset", "steps", "warmup", "dtype", "mesh", "optimizer"):
        a, b = getattr(sa, field), getattr(sb, field)
        if a is not None and b is not None and a != b:
            diffs.append(StackDifference(f"setting {field}", _show(a), _show(b)))
    return diffs, unknown


# --- rows --------------------------------------------------------------------------------


def row_key(row: StepRow | DataRow) -> tuple:
    """Architecture (or dataset) and the case settings, with batch read from either place."""
    if isinstance(row, DataRow):
        return row.case_key()
    case = dict(row.case or {})
    batch = row.batch if row.batch is not None else case.get("batch")
    case.pop("batch", None)
    return (
        row.architecture,
        batch,
        row.head_chunks,
        row.attention_impl,
        tuple(sorted(case.items(), key=lambda kv: kv[0])),
    )


def row_label(row: StepRow | DataRow) -> str:
    if isinstance(row, DataRow):
        return f"{row.dataset} (workers={row.workers}, threads={row.threads})"
    return report.case_label(row)


def _name(row) -> str:
    return row.architecture if isinstance(row, StepRow) else row.dataset


def match_rows(run_rows, ref_rows) -> list[tuple]:
    """(run row, reference row, note) pairs; None on a side without a partner.

    Exact keys first; then rows left over whose architecture is unique among the leftovers
    on both sides are paired, with a note that their case settings differ.
    """
    ref_by_key: dict[tuple, list] = {}
    for row in ref_rows:
        ref_by_key.setdefault(row_key(row), []).append(row)
    pairs, left_run = [], []
    for row in run_rows:
        candidates = ref_by_key.get(row_key(row))
        if candidates:
            pairs.append((row, candidates.pop(0), None))
        else:
            left_run.append(row)
    left_ref = [r for rows in ref_by_key.values() for r in rows]
    unmatched = []
    for row in left_run:
        same_run = [r for r in left_run if _name(r) == _name(row)]
        same_ref = [r for r in left_ref if _name(r) == _name(row)]
        if len(same_run) == 1 and len(same_ref) == 1:
            partner = same_ref[0]
            left_ref.remove(partner)
            note = f"matched by name only: {row_label(row)} vs {row_label(partner)}"
            pairs.append((row, partner, note))
        else:
            unmatched.append((row, None, None))
    return pairs + unmatched + [(None, r, None) for r in left_ref]


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
    ra, rb = row_key(run), row_key(ref)
    if ra[1] is not None and rb[1] is not None and ra[1] != rb[1]:
        return f"batch differs ({ra[1]} vs {rb[1]})", notes
    if run.sample and ref.sample and run.sample != ref.sample:
        return f"sample differs ({run.sample} vs {ref.sample})", notes
    ga, gb = run.gflop_per_step, ref.gflop_per_step
    if ga is not None and gb is not None and abs(ga - gb) > GFLOP_TOLERANCE * max(ga, gb):
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
    label = row_label(run_row if run_row is not None else ref_row)
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
    timing = "ms_per_step" if kind == "step" else "samples_per_s"
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
        verdict = "reproduced"
    else:
        verdict = "faster" if change < 0 else "slower"
    return RowComparison(label, run_row, ref_row, ratios, True, verdict, change, notes)


def compare(
    run: BenchmarkRun,
    reference: BenchmarkRun,
    *,
    band: float = 5.0,
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
    return Comparison(run_label, reference_label, run.kind, band, stack, unknown, rows)


# --- the default reference ---------------------------------------------------------------


def default_reference(run: BenchmarkRun, run_path: Path, directory: Path = PUBLISHED_DIR) -> Path:
    """The published record of the run's kind sharing the most rows; ties: same device,
    then the newest."""
    candidates = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        if path.resolve() == run_path.resolve():
            continue
        record, errors = check_file(path)
        if errors or record.kind != run.kind:
            continue
        shared = {row_key(r) for r in run.rows} & {row_key(r) for r in record.rows}
        names = {_name(r) for r in run.rows} & {_name(r) for r in record.rows}
        da, db = run.environment.devices, record.environment.devices
        same_device = bool(
            da and db and da.kind and db.kind and _device_kind(da.kind) == _device_kind(db.kind)
        )
        created = str(record.created or "")
        candidates.append(((len(shared), len(names), same_device, created), path))
    if not candidates:
        raise UsageError(f"no published {run.kind} record in {directory}; give REFERENCE")
    return max(candidates)[1]


# --- output ------------------------------------------------------------------------------


def _ratio_text(ratio: float | None) -> str:
    if ratio is None:
        return report.MISSING
    return f"{ratio:.3f} ({(ratio - 1) * 100:+.1f}%)"


def _describe(record: BenchmarkRun) -> str:
    env = record.environment
    device = env.devices.kind if env.devices and env.devices.kind else NOT_RECORDED
    commit = env.code.commit if env.code and env.code.commit else NOT_RECORDED
    return f"{record.created or 'date not recorded'}, {device}, dew {commit}"


def render(cmp: Comparison, run: BenchmarkRun, ref: BenchmarkRun, fmt: str = "md") -> str:
    style = "md" if fmt == "md" else "aligned"
    h = "### " if fmt == "md" else ""
    out = [
        f"{'## ' if fmt == 'md' else ''}Comparison (noise band ±{cmp.band:g}%)",
        "",
        f"- run: {cmp.run_label} ({_describe(run)})",
        f"- reference: {cmp.reference_label} ({_describe(ref)})",
        "",
        f"{h}Stack differences",
        "",
    ]
    if cmp.stack:
        out.append(
            report.table(
                ("what", "run", "reference"),
                [(d.what, d.run, d.reference) for d in cmp.stack],
                style,
            )
        )
    else:
        out.append("none recorded\n")
    if cmp.not_recorded:
        out.append(f"Recorded on one side only: {', '.join(cmp.not_recorded)}.\n")
    fields = RATIO_FIELDS[cmp.kind]
    timing = "ms_per_step" if cmp.kind == "step" else "samples_per_s"
    headers = ["row", f"{RATIO_HEADERS[timing]} run", f"{RATIO_HEADERS[timing]} ref"]
    headers += [f"{RATIO_HEADERS[f]} ratio" for f in fields] + ["verdict"]
    body = []
    absent = [r.label for r in cmp.rows if r.run is None]
    for r in cmp.rows:
        if r.run is None:  # listed in one line below the table
            continue
        a = getattr(r.run, timing, None) if r.run else None
        b = getattr(r.reference, timing, None) if r.reference else None
        body.append(
            [
                r.label,
                report.num(a, 2),
                report.num(b, 2),
                *(_ratio_text(r.ratios.get(f)) for f in fields),
                r.verdict,
            ]
        )
    out += [f"{h}Rows", "", report.table(headers, body, style)]
    if absent:
        out.append(f"Reference rows not in this run: {', '.join(absent)}.\n")
    notes = [f"- {r.label}: {n}" for r in cmp.rows for n in r.notes]
    if notes:
        out += ["Notes:", *notes, ""]
    counted = cmp.counted
    within = [r for r in counted if r.within_band]
    outside = [r for r in counted if not r.within_band]
    word = "REPRODUCED" if cmp.reproduced else "NOT REPRODUCED"
    summary = f"{word}: {len(within)} of {len(counted)} comparable rows within ±{cmp.band:g}%"
    if outside:
        summary += "; " + "; ".join(
            f"{r.label} {r.verdict}"
            + (f" ({r.change * 100:+.1f}%)" if r.change is not None else "")
            for r in outside
        )
    out += [f"{h}Verdict", "", summary, ""]
    return "\n".join(out)


def plot(cmp: Comparison, path: str | Path) -> Path:
    """Ours against the reference, ms/step (or samples/s for the loader) per row."""
    timing = "ms_per_step" if cmp.kind == "step" else "samples_per_s"
    rows = [r for r in cmp.rows if r.run is not None and r.reference is not None]
    labels = [r.label for r in rows]
    series = {
        f"run: {Path(cmp.run_label).stem}": [getattr(r.run, timing) for r in rows],
        f"reference: {Path(cmp.reference_label).stem}": [
            getattr(r.reference, timing) for r in rows
        ],
    }
    return report.bar_chart(
        path,
        labels,
        series,
        ylabel=RATIO_HEADERS[timing],
        title=f"{RATIO_HEADERS[timing]}: run against reference",
    )


def _relative(path: Path) -> Path:
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def _load(path: Path) -> BenchmarkRun:
    record, errors = check_file(path)
    if errors:
        raise UsageError(
            f"{path}: {errors[0]}"
            + (f" (+{len(errors) - 1} more errors)" if len(errors) > 1 else "")
        )
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dew.bench.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run", type=Path, metavar="RUN")
    parser.add_argument("reference", type=Path, nargs="?", metavar="REFERENCE")
    parser.add_argument("--band", type=float, default=5.0, help="noise band in percent")
    parser.add_argument("--format", choices=("md", "text"), default="md")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="write a bar chart here")
    args = parser.parse_args(argv)
    try:
        if not 0 <= args.band < 100:
            raise UsageError(f"--band {args.band:g} must be a percentage in [0, 100)")
        run = _load(args.run)
        ref_path = args.reference or _relative(default_reference(run, args.run))
        ref = _load(ref_path)
        cmp = compare(
            run, ref, band=args.band, run_label=str(args.run), reference_label=str(ref_path)
        )
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(render(cmp, run, ref, args.format))
    if args.plot:
        print(f"chart: {plot(cmp, args.plot)}", file=sys.stderr)
    return 0 if cmp.reproduced else 1


if __name__ == "__main__":
    sys.exit(main())
