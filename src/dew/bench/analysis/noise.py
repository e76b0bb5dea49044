"""The run level: how much two records of one stack differ beyond what their repeats show.

    python -m dew.bench.analysis.noise RECORD... [--write]

Records of one stack made at different times (A/A records: same commit, packages, device,
flags and settings) differ more than their repeats predict: each run has its own level
(the host's hour, what XLA chose). For every row the records share, a one-way random
effects analysis on the logs of the repeat figures splits the variance into the process
level (pooled within records) and the run level (between records' means beyond what the
processes explain, method of moments, negative estimates read as 0). The rows are pooled,
weighted by their degrees of freedom, per device kind.

`results/noise.json` holds the result with the records and the command behind it; compare
reads it (`for_records`): records of one device kind in the table use that kind's figures;
anything else uses the default, the largest per-row estimate in the table (on a noisy
2-core VM: conservative for a quiet GPU). The report names which one it used and its size.
`--write` regenerates the file; without it the estimate is printed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import numpy as np
import tyro

from dew.bench.analysis.stats import INTERLEAVED, Noise
from dew.bench.common import cli, files
from dew.bench.common.files import REPO_ROOT
from dew.bench.record.schema import BenchmarkRun
from dew.bench.record.stack import stack_identity
from dew.bench.record.validate import load

PROG = "python -m dew.bench.analysis.noise"
TABLE = REPO_ROOT / "results" / "noise.json"


def device_kind(record: BenchmarkRun) -> str | None:
    devices = record.environment.devices
    return devices.kind if devices is not None else None


def stack_key(record: BenchmarkRun) -> str:
    """What A/A records share: the stack (stack_identity's parts) and the measuring
    settings; the run's own output paths and times do not count."""
    env = record.environment.model_dump(mode="json")
    identity = [(what, value) for what, value, _ in stack_identity(env, env)]
    settings = record.settings.model_dump(mode="json")
    kept = {k: settings.get(k) for k in ("preset", "steps", "warmup", "dtype", "mesh",
                                         "optimizer")}  # fmt: skip
    kept["xla_flags"] = (settings.get("options") or {}).get("xla_flags")
    return json.dumps([identity, kept], sort_keys=True, default=str)


def _figures(row) -> list[float]:
    if row.status != "ok" or not row.repeats:
        return []
    if hasattr(row, "synced_ms") or hasattr(row.repeats[0], "ms_per_step"):
        return [r.ms_per_step for r in row.repeats if r.ms_per_step]
    return [1e3 * row.batch / r.samples_per_s for r in row.repeats if r.samples_per_s]


@dataclasses.dataclass
class RowLevels:
    """One row across one group of A/A records: its two variance components."""

    label: str
    records: int
    process_var: float  # pooled within records
    process_df: int
    run_var: float  # between records, beyond the processes (>= 0)
    run_df: int  # the records less one
    means_var: float  # the variance of the records' mean logs (what run_var comes from)
    within_share: float  # process_var x the mean of 1/n: the processes' part of means_var


def row_levels(label: str, sides: Sequence[Sequence[float]]) -> RowLevels | None:
    """The components for one row from its figures in each record (two or more records
    with two or more repeats each); None otherwise."""
    logs = [np.log(np.asarray(s, dtype=float)) for s in sides if len(s) >= 2]
    if len(logs) < 2:
        return None
    within_df = sum(x.size - 1 for x in logs)
    within = sum(float(np.var(x, ddof=1)) * (x.size - 1) for x in logs) / within_df
    means_var = float(np.var([x.mean() for x in logs], ddof=1))
    share = within * float(np.mean([1 / x.size for x in logs]))
    between = max(0.0, means_var - share)
    return RowLevels(label, len(logs), within, within_df, between, len(logs) - 1, means_var,
                     share)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Pooled:
    """The rows' components pooled by their degrees of freedom."""

    run: float  # the run level's standard deviation
    process: float
    df: float  # the run level's effective degrees of freedom


def pool(levels: Sequence[RowLevels]) -> Pooled:
    """Pool the rows. The run level's df is Satterthwaite's for a difference of mean
    squares (variance of the means less the processes' share), not the records less one:
    that would claim the run level is known better than it is, and the simulation
    (dew.bench.analysis.calibration) then calls 5.2% of identical comparisons changed."""
    weights = np.array([level.run_df for level in levels], dtype=float)
    weights /= weights.sum()
    run = float(sum(w * level.run_var for w, level in zip(weights, levels, strict=True)))
    spread = sum(
        w * w * (2 * level.means_var**2 / level.run_df
                 + 2 * level.within_share**2 / level.process_df)
        for w, level in zip(weights, levels, strict=True)
    )  # fmt: skip
    df = max(1.0, 2 * run * run / spread) if spread > 0 else math.inf
    process_df = sum(level.process_df for level in levels)
    process = sum(level.process_var * level.process_df for level in levels) / process_df
    return Pooled(math.sqrt(run), math.sqrt(process), df)


def estimate(records: Sequence[tuple[str, BenchmarkRun]]) -> dict:
    """The table's entries: per device kind the pooled levels, the rows and the records."""
    groups: dict[str, list[tuple[str, BenchmarkRun]]] = {}
    for path, record in records:
        groups.setdefault(stack_key(record), []).append((path, record))
    kinds: dict[str, dict] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        kind = device_kind(members[0][1]) or "unknown"
        entry = kinds.setdefault(kind, {"records": [], "rows": []})
        entry["records"].append(sorted(path for path, _ in members))
        labels: dict[str, list[list[float]]] = {}
        for _, record in members:
            for row in record.rows:
                figures = _figures(row)
                if figures:
                    labels.setdefault(row.label(), []).append(figures)
        for label, sides in labels.items():
            levels = row_levels(label, sides)
            if levels is not None:
                entry["rows"].append(dataclasses.asdict(levels))
    table = {}
    for kind, entry in sorted(kinds.items()):
        rows = entry["rows"]
        if not rows:
            continue
        pooled = pool([RowLevels(**r) for r in rows])
        table[kind] = {
            "run": round(pooled.run, 5),
            "process": round(pooled.process, 5),
            "df": round(pooled.df, 2),
            "rows": [
                {
                    **r,
                    "run": round(math.sqrt(r["run_var"]), 5),
                    "process": round(math.sqrt(r["process_var"]), 5),
                }
                for r in rows
            ],  # fmt: skip
            "records": entry["records"],
        }
    return table


def default_of(kinds: dict) -> dict:
    """The default for a kind not in the table: the noisiest kind's pooled levels (a
    2-core VM's, while it is the only kind: generous for a GPU, which is quieter)."""
    return {
        "run": max(entry["run"] for entry in kinds.values()),
        "process": max(entry["process"] for entry in kinds.values()),
        "df": min(entry["df"] for entry in kinds.values()),
    }


def read_table(path: Path = TABLE) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclasses.dataclass(frozen=True)
class NoiseModel:
    """The noise a comparison assumes: per row where the table measured that row noisier
    than the kind's pooled level (one row's few records can read 0, so never below it),
    else the kind's."""

    pooled: Noise
    rows: dict[str, Noise]
    source: str

    def for_row(self, label: str) -> Noise:
        return self.rows.get(label, self.pooled)

    @classmethod
    def interleaved(cls) -> NoiseModel:
        return cls(INTERLEAVED, {}, INTERLEAVED.source)


def for_records(
    run: BenchmarkRun, reference: BenchmarkRun, table: dict | None = None
) -> NoiseModel:
    """The noise a comparison of the two records assumes, and where it came from."""
    return for_kinds(device_kind(run), device_kind(reference), table)


def for_kinds(kind_run: str | None, kind_ref: str | None, table: dict | None = None) -> NoiseModel:
    """The noise between a record on `kind_run` and one on `kind_ref` (the same kind: that
    kind's A/A figures where the table has them; else the default)."""
    table = read_table() if table is None else table
    if not table:
        noise = Noise(0.10, 0.10, 4.0, f"no noise table ({TABLE.name}): 10% assumed")
        return NoiseModel(noise, {}, noise.source)
    kinds = table.get("kinds", {})
    if kind_run is not None and kind_run == kind_ref and kind_run in kinds:
        entry = kinds[kind_run]
        n = sum(len(group) for group in entry["records"])
        source = f"{kind_run}: {n} committed A/A records ({TABLE.name})"
        pooled = Noise(entry["run"], entry["process"], float(entry["df"]), source)
        # A row measured noisier keeps its own size, at the pooled degrees of freedom: its
        # own few records (2 df from 3) would make its t, not its noise, the verdict.
        rows = {
            row["label"]: Noise(row["run"], row["process"], pooled.df, source)
            for row in entry["rows"]
            if row["run"] > pooled.run
        }
        return NoiseModel(pooled, rows, source)
    default = table["default"]
    named = [kind or "a device not recorded" for kind in (kind_run, kind_ref)]
    why = named[0] if kind_run == kind_ref else f"{named[0]} against {named[1]}"
    source = (
        f"default ({why} not in {TABLE.name}): the noisiest kind's levels in it, "
        "conservative for a quieter device"
    )
    noise = Noise(default["run"], default["process"], float(default["df"]), source)
    return NoiseModel(noise, {}, source)


# --- the command line -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Args:
    """Estimate the run level and the process level from A/A records (records of one stack
    made at different times) and print it, or write results/noise.json (--write)."""

    records: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="RECORD")]
    """step or loader records; records of one stack and settings form one A/A group"""
    write: bool = False
    """write results/noise.json (the command and records behind it go with it)"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run(PROG, lambda: _noise(cli.parse(Args, argv, prog=PROG), argv))


def _noise(args: Args, argv: Sequence[str]) -> int:
    if not args.records:
        raise cli.UsageError("give the A/A records (two or more of one stack)")
    records = [(str(Path(p)), load(Path(p), "RECORD")) for p in args.records]
    kinds = estimate(records)
    if not kinds:
        raise cli.UsageError(
            "no two records of one stack with rows of two or more repeats: nothing to estimate"
        )
    table = {
        "command": " ".join([PROG, *argv]),
        "kinds": kinds,
        "default": default_of(kinds),
    }
    text = json.dumps(table, indent=1) + "\n"
    if args.write:
        files.atomic_write(TABLE, text)
        print(f"wrote {TABLE}", file=sys.stderr)
    for kind, entry in kinds.items():
        print(f"{kind}: run level {entry['run']:.2%}, process level {entry['process']:.2%} "
              f"(df {entry['df']}, {len(entry['rows'])} rows)")  # fmt: skip
        for row in entry["rows"]:
            print(f"  {row['label']}: run {row['run']:.2%}, process {row['process']:.2%}")
    d = table["default"]
    print(f"default: run level {d['run']:.2%}, process level {d['process']:.2%} (df {d['df']})")
    return cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
