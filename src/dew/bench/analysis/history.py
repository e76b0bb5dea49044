"""The noise of each device kind, fitted from the records' own history.

    python -m dew.bench.analysis.history [--history DIR] [--write]

The history is the committed records under results/ (those git tracks), or every record
under DIR; what a comparison leaves out of it, and says it left out, is
dew.bench.analysis.history_scope's. A record is read by its content, not its name; one
whose every repeat figure another also holds (an A/B round inside its side's record, a
reproduce's copy of its reference) counts once; a dirty tree's records pair only with
records of the same diff (its hash), and without one are left out. Records that share a
stack identity (commit, packages, driver, Python, environment flags, code from outside
dew, the measuring settings; a loader's rows) and a device identity (device kind and
count, and the cards' UUIDs where there are any) are A/A records: the same thing measured
at different times. Each such group is fitted as a two-way random-effects table on the logs
of the repeat figures:

- the **process level** σ_p: the variance within a record's repeats of a row, pooled;
- the **shift** σ_s: what a whole record shares (the record effects of an additive fit of
  the rows' means, less what the rows' own noise explains);
- the **run level** σ_b: a row's own run-to-run part (the fit's residuals, less the
  processes' share).

Method of moments: the run level and the shift are each a mean square less another's share
(the residuals' less the processes'; the records' effects less the residuals'), both pooled
unclipped over the groups of a kind by the first's degrees of freedom (clipping each first
biases upward), and only then read by dew.bench.analysis.judge.component: Satterthwaite's
degrees of freedom for the difference, and a level estimated below its standard error read
as that standard error (never as a known 0; `floored` in the table names them).
Each row's own levels shrink toward its kind's (empirical Bayes, the kind's level worth
PRIOR_DF degrees of freedom), never the larger of two noisy estimates. Records listed in
results/superseded.json (each for a cause a commit removed) stay records but leave the
fit, named under their kind's `superseded`. A kind with no history gets a stated weak
prior (dew.bench.analysis.noise), never another kind's levels. --write caches the fit of
the committed records in results/noise.json (a test checks it is current).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Annotated

import numpy as np
import tyro

from dew.bench.analysis import judge, spread
from dew.bench.analysis.history_records import (  # noqa: F401  (history's names, read here)
    SKIPPED_DIRS,
    _distinct,
    _figures,
    held,
    leave_out,
    parse,
    read,
    read_paths,
    walk,
)
from dew.bench.analysis.kinds import KINDS
from dew.bench.analysis.row_noise import PRIOR_DF
from dew.bench.analysis.tables import level
from dew.bench.common import cli, files
from dew.bench.common.files import REPO_ROOT
from dew.bench.record.stack import stack_identity

PROG = "python -m dew.bench.analysis.history"
HISTORY = REPO_ROOT / "results"
TABLE = HISTORY / "noise.json"
SUPERSEDED = HISTORY / "superseded.json"
MOST_DF = 1e6  # a row's degrees of freedom as noise.json holds them (JSON has no inf)
# --- reading the history -------------------------------------------------------------------


def row_label(row: dict, kind: str) -> str:
    """The row's label as the records print it (its kind's row model's label())."""
    from dew.bench.record.schema import ROW_MODELS

    return ROW_MODELS[kind].model_validate(row).label()


def identity(record: dict) -> str:
    """What A/A records share: the stack, the measuring settings and the device."""
    env = record.get("environment") or {}
    stack = [(what, value) for what, value, _ in stack_identity(env, env)]
    settings = record.get("settings") or {}
    kept = {k: settings.get(k) for k in ("preset", "steps", "warmup", "dtype", "mesh",
                                         "optimizer", "compile_only")}  # fmt: skip
    kept["xla_flags"] = (settings.get("options") or {}).get("xla_flags")
    cards = sorted(g.get("uuid") or "" for g in env.get("gpus") or [])
    kept["diff"] = (env.get("code") or {}).get("diff_sha256")  # a dirty tree's content
    kind = record.get("kind")
    if KINDS[kind].settings_in_rows:  # a loader's workers and threads: A/A copies share them
        kept["rows"] = sorted(row_label(row, kind) for row in record.get("rows") or [])
    return json.dumps([record.get("kind"), stack, kept, cards], sort_keys=True, default=str)


def device_kind(record: dict) -> str | None:
    return ((record.get("environment") or {}).get("devices") or {}).get("kind")


def platform(record: dict) -> str | None:
    return ((record.get("environment") or {}).get("devices") or {}).get("platform")


# --- the fit -------------------------------------------------------------------------------


@dataclasses.dataclass
class Estimate:
    """A variance component's estimate (unclipped) and its degrees of freedom."""

    var: float = 0.0
    df: float = 0.0

    def add(self, var: float, df: float) -> None:
        if df > 0 and math.isfinite(var):
            self.var = (self.var * self.df + var * df) / (self.df + df)
            self.df += df


@dataclasses.dataclass
class Component:
    """A variance component as the difference of two mean squares, each pooled over the
    groups by the first's degrees of freedom (judge.component reads the level)."""

    plus: Estimate = dataclasses.field(default_factory=Estimate)
    minus: float = 0.0  # pooled with the plus's weights
    minus_df: float = 0.0  # the degrees of freedom behind the minus: its own, summed

    def add(self, plus: float, plus_df: float, minus: float, minus_df: float) -> None:
        if plus_df > 0 and math.isfinite(plus) and math.isfinite(minus):
            weight = self.plus.df + plus_df
            self.minus = (self.minus * self.plus.df + minus * plus_df) / weight
            self.minus_df += minus_df
            self.plus.add(plus, plus_df)

    def level(self) -> tuple[float, float, float]:
        """(variance, degrees of freedom, floor): Satterthwaite's, floored at its standard
        error (judge.component)."""
        if self.plus.df <= 0:
            return 0.0, 0.0, 0.0
        var, df, floor = judge.component(self.plus.var, self.plus.df, self.minus, self.minus_df)
        return float(var), float(df), float(floor)

    @property
    def estimate(self) -> float:
        """The unclipped difference (negative: the data put the level at nothing)."""
        return self.plus.var - self.minus


@dataclasses.dataclass
class KindFit:
    process: Estimate = dataclasses.field(default_factory=Estimate)
    run: Component = dataclasses.field(default_factory=Component)
    shift: Component = dataclasses.field(default_factory=Component)
    rows: dict[str, dict[str, Estimate]] = dataclasses.field(default_factory=dict)
    records: list[list[str]] = dataclasses.field(default_factory=list)


def fit_group(members: Sequence[tuple[str, dict]], fit: KindFit) -> None:
    """Add one group of A/A records to its kind's fit (see the module docstring)."""
    cells: dict[tuple[int, str], np.ndarray] = {}
    for r, (_, record) in enumerate(members):
        for row in record["rows"]:
            figures = _figures(row)
            if figures:
                label = row_label(row, record["kind"])
                cells[(r, label)] = np.log(np.asarray(figures, dtype=float))
    seen: dict[str, int] = {}
    for _, label in cells:
        seen[label] = seen.get(label, 0) + 1
    cells = {key: logs for key, logs in cells.items() if seen[key[1]] >= 2}  # rows met twice
    labels = sorted({label for _, label in cells})
    for label in labels:
        fit.rows.setdefault(label, {"process": Estimate(), "run": Estimate()})
    group = Estimate()  # this group's process level: the share its own processes explain
    processes = {label: Estimate() for label in labels}  # each row's own, in this group
    for (_, label), logs in cells.items():
        if logs.size > 1:
            var = float(np.var(logs, ddof=1))
            group.add(var, logs.size - 1)
            processes[label].add(var, logs.size - 1)
            fit.process.add(var, logs.size - 1)
            fit.rows[label]["process"].add(var, logs.size - 1)
    records = sorted({r for r, _ in cells})
    if len(records) < 2:
        return
    process = group.var
    means = {key: float(logs.mean()) for key, logs in cells.items()}
    inverse_n = {key: 1 / logs.size for key, logs in cells.items()}
    a = dict.fromkeys(records, 0.0)
    c = {label: float(np.mean([m for (_, lab), m in means.items() if lab == label]))
         for label in labels}  # fmt: skip
    for _ in range(50):  # the additive fit m = a_record + c_row, by alternating means
        for r in records:
            own = [means[(r, lab)] - c[lab] for lab in labels if (r, lab) in means]
            a[r] = float(np.mean(own))
        centre = float(np.mean(list(a.values())))
        a = {r: v - centre for r, v in a.items()}
        for lab in labels:
            own = [means[(r, lab)] - a[r] for r in records if (r, lab) in means]
            c[lab] = float(np.mean(own))
    residual = {key: m - a[key[0]] - c[key[1]] for key, m in means.items()}
    df_e = len(means) - len(records) - len(labels) + 1
    per_record = [sum(1 for (r2, _) in means if r2 == r) for r in records]
    if df_e > 0:
        ms_e = sum(e * e for e in residual.values()) / df_e
        share = process * float(np.mean(list(inverse_n.values())))
        fit.run.add(ms_e, df_e, share, group.df)
        for lab in labels:
            mine = [key for key in residual if key[1] == lab]
            df_k = df_e * len(mine) / len(means)
            ms_k = sum(residual[k] ** 2 for k in mine) / df_k if df_k > 0 else 0.0
            # the row's own processes' share: rows 100x apart in noise (a host-bound row
            # beside a device-bound one) would each be misread by the group's
            row_process = processes[lab].var if processes[lab].df > 0 else process
            share_k = row_process * float(np.mean([inverse_n[k] for k in mine]))
            fit.rows[lab]["run"].add(ms_k - share_k, df_k)
        between = float(np.var(list(a.values()), ddof=1))
        within = ms_e * float(np.mean([1 / k for k in per_record]))
        fit.shift.add(between, len(records) - 1, within, df_e)
    else:  # one row: its records' spread is shift and run at once; counted as the shift
        between = float(np.var(list(a.values()), ddof=1)) if len(labels) == 1 else 0.0
        share = process * float(np.mean(list(inverse_n.values())))
        fit.shift.add(between, len(records) - 1, share, group.df)
    fit.records.append(sorted(members[r][0] for r in records))


def fit(records: Sequence[tuple[str, dict]], left_out_paths: Collection[str] = ()) -> dict:
    """The fitted levels per device kind (standard deviations), as noise.json
    holds them; the records at `left_out_paths` (the superseded ones) left out."""
    groups: dict[str, list[tuple[str, dict]]] = {}
    left_out: dict[str, list[str]] = {}  # kind -> its superseded records
    for path, record in records:
        if path in left_out_paths:
            left_out.setdefault(device_kind(record) or "unknown", []).append(path)
            continue
        groups.setdefault(identity(record), []).append((path, record))
    kinds: dict[str, KindFit] = {}
    platforms: dict[str, str | None] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        kind = device_kind(members[0][1]) or "unknown"
        platforms[kind] = platform(members[0][1])
        fit_group(members, kinds.setdefault(kind, KindFit()))
    table = {}
    for kind, entry in sorted(kinds.items()):
        if not entry.records:
            continue
        (run, run_df, run_floor), (shift, shift_df, _) = entry.run.level(), entry.shift.level()
        rows, spread_levels = row_levels(entry, run, run_df, run_floor)
        floored = [name for name, part in (("run", entry.run), ("shift", entry.shift))
                   if part.plus.df > 0 and part.level()[0] > part.estimate]  # fmt: skip
        table[kind] = {
            "platform": platforms[kind],
            "process": _sd(entry.process.var), "process_df": round(entry.process.df, 2),
            "run": _sd(run), "run_df": round(run_df, 2),
            "shift": _sd(shift), "shift_df": round(shift_df, 2),
            "floored": floored,
            **spread_levels,
            "records": sum(len(group) for group in entry.records),
            "groups": entry.records,
            "rows": rows,
        }  # fmt: skip
        if left_out.get(kind):
            table[kind]["superseded"] = sorted(left_out[kind])
    return table


def row_levels(entry: KindFit, run: float, run_df: float, run_floor: float):
    """Each row's levels and the kind's spread of them (dew.bench.analysis.spread): a row's
    process level is its own shrunk toward its kind's rows as much as they agree; its run
    level is its own shrunk toward the kind's run level scaled to the row's process level
    (a row twice as noisy between processes is taken as twice as noisy between runs),
    never below the kind's floor scaled alike. Returns (rows, the kind's spread fields:
    `rows_process` and `rows_df`, the prior an unseen row starts from, and `run_ratio`)."""
    labels = sorted(entry.rows)
    own = np.array([entry.rows[label]["process"].var for label in labels])
    own_df = np.array([entry.rows[label]["process"].df for label in labels])
    s0, d0 = (float(x) for x in spread.fit_spread(own, own_df))
    posterior, posterior_df = spread.posterior(own, own_df, s0, d0)
    ratio = run / entry.process.var if entry.process.var > 0 else 1.0
    scale = posterior / entry.process.var if entry.process.var > 0 else np.ones(len(labels))
    runs = row_run(np.array([entry.rows[label]["run"].var for label in labels]),
                   np.array([entry.rows[label]["run"].df for label in labels]), run * scale,
                   run_df, run_floor * scale)  # fmt: skip
    rows = {}
    for k, label in enumerate(labels):
        rows[label] = {
            "process": _sd(float(posterior[k])),
            "process_df": round(min(float(posterior_df[k]), MOST_DF), 2),
            "run": _sd(float(runs[k])),
            "run_df": round(entry.rows[label]["run"].df, 2),
        }
    fields = {"rows_process": _sd(s0), "rows_df": None if math.isinf(d0) else round(d0, 2),
              "run_ratio": round(ratio, 5)}  # fmt: skip
    return rows, fields


def row_run(own, own_df, location, location_df, floor):
    """A row's run variance: its own estimate (own_df degrees of freedom; negative when its
    records agree better than their processes explain) shrunk toward `location` (worth
    min(PRIOR_DF, location_df)), never below `floor`: a row whose own estimate is negative
    is not known to have no run level either. Vectorized (the calibration's twin of fit)."""
    own, own_df, location = (np.asarray(x, dtype=float) for x in (own, own_df, location))
    weight = np.minimum(PRIOR_DF, location_df)
    total = weight + own_df
    with np.errstate(invalid="ignore", divide="ignore"):
        shrunk = np.where(total > 0, (weight * np.maximum(location, 0.0) + own_df * own) / total,
                          0.0)  # fmt: skip
    return np.maximum(shrunk, floor)


def superseded(path: Path) -> dict[str, str]:
    """The records results/superseded.json lists, each with its reason's name: kept
    (compare and the site read them), but no longer their kind's noise
    (history_scope.read_superseded reads the file)."""
    from dew.bench.analysis.history_scope import read_superseded

    return dict(read_superseded(path).records)


def _sd(var: float) -> float:
    return round(math.sqrt(max(0.0, var)), 5)


def read_table(path: Path | None = None) -> dict | None:
    try:
        return json.loads((TABLE if path is None else path).read_text())
    except (OSError, ValueError):
        return None


def kinds_table(history_dir: Path | None = None, exclude: Iterable[Path] = (), *,
                with_superseded: bool = False) -> dict:  # fmt: skip
    """The fitted kinds a comparison of the records `exclude` assumes, with what was left
    out of them (dew.bench.analysis.history_scope.kinds_table)."""
    from dew.bench.analysis import history_scope

    return history_scope.kinds_table(history_dir, exclude, with_superseded=with_superseded)


# --- the command line -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Args:
    """Fit each device kind's noise from the A/A records (the committed ones under results/,
    or every one under --history) and print it, or write results/noise.json (--write)."""

    history: Annotated[str | None, tyro.conf.arg(metavar="DIR")] = None
    """the folder whose records (at any depth) are the history; default: the records under
    results/ that git tracks (outside a checkout, every one under results/)"""
    write: bool = False
    """write results/noise.json, the cache of the fit of the committed records"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run(PROG, lambda: _history(cli.parse(Args, argv, prog=PROG)))


def _history(args: Args) -> int:
    from dew.bench.analysis import history_scope

    directory = None if args.history is None else Path(args.history)
    if directory is not None and not directory.is_dir():
        raise cli.UsageError(f"--history {directory} is not a folder")
    if directory is not None and args.write:
        raise cli.UsageError(f"--write caches the fit of the committed records, not of "
                             f"--history {directory}: leave one of them out")  # fmt: skip
    kinds = history_scope.kinds_table(directory, cache=False)
    if not kinds:
        raise cli.UsageError(f"{directory or HISTORY}: no two records of one stack and device "
                             "with rows of repeats: nothing to fit")  # fmt: skip
    table = {"command": f"{PROG} --write", "kinds": dict(kinds)}
    if args.write:
        files.atomic_write(TABLE, json.dumps(table, indent=1) + "\n")
        print(f"wrote {TABLE}", file=sys.stderr)
    for kind, entry in kinds.items():
        print(f"{kind}: {entry['records']} records, {len(entry['groups'])} groups: process "
              f"{level(entry['process'])} ({entry['process_df']:g} df), run "
              f"{level(entry['run'])} ({entry['run_df']:g} df), shift {level(entry['shift'])} "
              f"({entry['shift_df']:g} df)"
              + (f"; {len(entry['superseded'])} superseded records left out"
                 if entry.get("superseded") else ""))  # fmt: skip
    if kinds.left_out is not None and kinds.left_out.unread():
        print(kinds.left_out.unread(), file=sys.stderr)
    return cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
