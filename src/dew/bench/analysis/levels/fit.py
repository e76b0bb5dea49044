"""Each device kind's noise fitted from A/A records: the two-way random-effects table of
every group of records that share a stack and a device, pooled per kind, and each row's own
levels (what dew.bench.analysis.levels.history fits, on the records history_scope chose).

Each group is fitted on the logs of the repeat figures:

- the **process level** σ_p: the variance within a record's repeats of a row, pooled;
- the **shift** σ_s: what a whole record shares (the record effects of an additive fit of
  the rows' means, less what the rows' own noise explains);
- the **run level** σ_b: a row's own run-to-run part (the fit's residuals, less the
  processes' share).

Method of moments: the run level and the shift are each a mean square less another's share
(the residuals' less the processes'; the records' effects less the residuals'), both pooled
unclipped over the groups of a kind by the first's degrees of freedom (clipping each first
biases upward), and only then read by `component`: Satterthwaite's degrees of freedom for
the difference, and a level estimated below its standard error read as that standard error
(never as a known 0; `floored` in the table names them). Each row's own levels come from
its kind's rows (`row_levels`, dew.bench.analysis.levels.spread). Records listed in
results/superseded.json leave the fit, named under their kind's `superseded`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Collection, Sequence
from pathlib import Path

import numpy as np

from dew.bench.analysis.kinds import KINDS
from dew.bench.analysis.levels import spread
from dew.bench.analysis.levels.history_records import _figures, once
from dew.bench.analysis.levels.row_noise import PRIOR_DF
from dew.bench.common.files import RESULTS_ROOT
from dew.bench.record.stack import stack_identity

HISTORY = RESULTS_ROOT / "results"
TABLE = HISTORY / "noise.json"
SUPERSEDED = HISTORY / "superseded.json"
MOST_DF = 1e6  # a row's degrees of freedom as noise.json holds them (JSON has no inf)


def component(plus, plus_df, minus, minus_df) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A variance component estimated as the difference of two mean squares, plus − minus
    (each with its degrees of freedom; minus may be 0), and its Satterthwaite degrees of
    freedom. The estimate's own sampling variance is 2·D, D = plus²/plus_df +
    minus²/minus_df. An estimate below its standard error √(2D) (clipped at 0, or barely
    above) is not known to be that small: it reads as √(2D) itself, worth D's 2 degrees of
    freedom. The floor is the history's own: a quiet kind (a TPU's 0.3%) gets a small one,
    never another kind's levels. Returns (variance, degrees of freedom, floor); mean squares
    of exactly 0 give 0 over the plus's degrees of freedom."""
    plus, plus_df, minus, minus_df = (np.asarray(x, dtype=float)
                                      for x in (plus, plus_df, minus, minus_df))  # fmt: skip
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = (np.where(plus_df > 0, plus**2 / plus_df, 0.0)
                  + np.where((minus != 0) & (minus_df > 0), minus**2 / minus_df, 0.0))  # fmt: skip
        floor = np.sqrt(2 * spread)
        var = np.maximum(plus - minus, floor)
        # never more than the mean square it came from holds (a floor from 1 df has 1)
        df = np.minimum(np.where(spread > 0, var**2 / spread, plus_df), plus_df)
    return var, df, floor


# --- reading the history -------------------------------------------------------------------


def row_label(row: dict, kind: str) -> str:
    """The row's label as the records print it (its kind's row model's label())."""
    from dew.bench.record.schema import ROW_MODELS

    return ROW_MODELS[kind].model_validate(row).label()


def _labels(record: dict) -> list[str | None]:
    """The labels of a record's rows that have figures (None for the others)."""
    return [row_label(row, record["kind"]) if _figures(row) else None for row in record["rows"]]


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
    groups by the first's degrees of freedom (`component` reads the level)."""

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
        error (`component`)."""
        if self.plus.df <= 0:
            return 0.0, 0.0, 0.0
        var, df, floor = component(self.plus.var, self.plus.df, self.minus, self.minus_df)
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
        for row, label in zip(record["rows"], once(record, "labels", _labels), strict=True):
            figures = _figures(row)
            if figures:
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
    # each cell weighed by its mean's precision under its own row's process level: rows 100x
    # apart in noise (a host-bound row beside a device-bound one) would otherwise fill the
    # residuals, and so the run level and the shift of every row, with the noisy rows' noise
    row_process = {lab: processes[lab] if processes[lab].df > 0 and processes[lab].var > 0
                   else group for lab in labels}  # fmt: skip
    own = {lab: row_process[lab].var for lab in labels}
    # 1/s² overstates 1/σ² by df/(df − 2), which would add to the run level; taken out
    # where 1/s² has a variance at all (df > 4), else the weights stay as read (a level
    # too large, never too small)
    unbiased = {lab: inverse_bias(row_process[lab].df) for lab in labels}
    weight = {key: unbiased[key[1]] / max(own[key[1]] * inverse_n[key], 1e-30) for key in means}
    a = dict.fromkeys(records, 0.0)
    c = {label: float(np.mean([m for (_, lab), m in means.items() if lab == label]))
         for label in labels}  # fmt: skip
    # each record's cells and each row's, with their weights, found once, not per iteration
    of_record = {r: [(r, lab) for lab in labels if (r, lab) in means] for r in records}
    of_row = {lab: [(r, lab) for r in records if (r, lab) in means] for lab in labels}
    record_weights = {r: [weight[k] for k in mine] for r, mine in of_record.items()}
    row_weights = {lab: [weight[k] for k in mine] for lab, mine in of_row.items()}
    for _ in range(50):  # the additive fit m = a_record + c_row, by alternating weighted means
        for r, mine in of_record.items():
            a[r] = _weighted([means[k] - c[k[1]] for k in mine], record_weights[r])
        centre = float(np.mean(list(a.values())))
        a = {r: v - centre for r, v in a.items()}
        for lab, mine in of_row.items():
            c[lab] = _weighted([means[k] - a[k[0]] for k in mine], row_weights[lab])
    residual = {key: m - a[key[0]] - c[key[1]] for key, m in means.items()}
    df_e = len(means) - len(records) - len(labels) + 1
    if df_e > 0:
        # in each cell's own units the residuals' mean square is 1 + the run level over the
        # variance of the cell's mean; a run level that keeps its ratio to its row's process
        # level (row_levels' model) is the same excess in every cell, read here at the
        # group's process level and mean cell (`unit`), the level row_levels scales per row
        unit = process * float(np.mean(list(inverse_n.values())))
        ms_w = sum(weight[k] * e * e for k, e in residual.items()) / df_e
        fit.run.add(ms_w * unit, df_e, unit, group.df)
        for lab in labels:
            mine = [key for key in residual if key[1] == lab]
            df_k = df_e * len(mine) / len(means)
            ms_k = sum(residual[k] ** 2 for k in mine) / df_k if df_k > 0 else 0.0
            share_k = own[lab] * float(np.mean([inverse_n[k] for k in mine]))
            fit.rows[lab]["run"].add(ms_k - share_k, df_k)
        between = float(np.var(list(a.values()), ddof=1))
        # a record's effect is its cells' weighted mean: its variance from the residuals
        within = ms_w * float(np.mean([1 / sum(weight[k] for k in means if k[0] == r)
                                       for r in records]))  # fmt: skip
        fit.shift.add(between, len(records) - 1, within, df_e)
    else:  # one row: its records' spread is shift and run at once; counted as the shift
        between = float(np.var(list(a.values()), ddof=1)) if len(labels) == 1 else 0.0
        share = process * float(np.mean(list(inverse_n.values())))
        fit.shift.add(between, len(records) - 1, share, group.df)
    fit.records.append(sorted(members[r][0] for r in records))


def inverse_bias(df):
    """(df − 2) / df, what 1/s² over df degrees of freedom is multiplied by to read 1/σ² on
    average, where its variance is finite (df > 4); else 1."""
    df = np.asarray(df, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(df > 4, (df - 2) / df, 1.0)


def _weighted(values: list[float], weights: list[float]) -> float:
    # plain Python: called per cell of every group, where numpy's setup cost dominates
    total = math.fsum(weights)
    if not total:
        raise ZeroDivisionError("weights sum to zero")
    return math.fsum(v * w for v, w in zip(values, weights, strict=True)) / total


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
    """Each row's levels and the kind's spread of them (dew.bench.analysis.levels.spread): a row's
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


def _sd(var: float) -> float:
    return round(math.sqrt(max(0.0, var)), 5)


def read_table(path: Path | None = None) -> dict | None:
    try:
        return json.loads((TABLE if path is None else path).read_text())
    except (OSError, ValueError):
        return None
