"""Comparisons of known truth, judged by the code the commands run.

A regime says the true levels (standard deviations of the log figure): each row's process
level (all alike, or spread from the quietest to the noisiest as rows are on a chip), its
run level (the same share of its process level for every row) and the whole run's shift.
A cell simulates `trials` comparisons in it:

- **the history**: `records` A/A records of every row (or of the first `history_rows`),
  fitted as dew.bench.analysis.levels.fit fits them (balanced here, where its additive fit,
  each cell weighed by its row's precision, takes one pass): the kind's levels by
  fit.component, each row's process level by dew.bench.analysis.levels.spread, its run
  level by fit.row_run; with no records, the platform's prior (noise.prior);
- **two records** of n repeats a side (`Design`), with the truth moved by `drift` (today's
  levels that many times the history's), one row (the quietest) `change` slower, one
  repeat of the second row `outlier` off, and a busy side (`Busy`): rows made slower by
  up to the bound the busy-host gate would read for them;
- **the verdict**: row_noise.moderated, row_noise.scaled_run and judge.judge_arrays, as
  dew.bench.analysis.comparison calls them, and dew.bench.analysis.outliers.scores on the
  run's repeats; or ROUNDS interleaved rounds through judge.paired_arrays (`dew ab`).

dew.bench.analysis.calibration renders the tables; tests/bench/analysis/test_judge.py and
test_simulate.py hold the goals.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dew.bench.analysis import judge, outliers
from dew.bench.analysis.levels import fit, noise, row_noise, spread

SIM_SEED = 20261204
ALPHA = 0.05
HISTORY_REPEATS = 3
ROUNDS = 5  # `dew ab`'s interleaved rounds: paired, no history


@dataclasses.dataclass(frozen=True)
class Regime:
    """True levels and the device kind's band. Rows' process levels run from `process` (the
    quietest) to `noisiest` evenly on the log scale (None: all at `process`); every row's run
    level is the same share of its process level as run / process."""

    name: str
    process: float
    run: float
    shift: float
    band: float
    family: str  # the platform whose prior a kind without history gets (dew.platforms)
    rows: int = 4
    noisiest: float | None = None
    history_rows: int | None = None  # the rows the history holds (the first); None: all

    def levels(self) -> tuple[np.ndarray, np.ndarray]:
        process = (np.full(self.rows, self.process) if self.noisiest is None
                   else np.geomspace(self.process, self.noisiest, self.rows))  # fmt: skip
        return process, process * (self.run / self.process)


@dataclasses.dataclass(frozen=True)
class Busy:
    """A side measured beside other work: `rows` (indices) of `side` ("run", "reference" or
    "both") read `slower` (a fraction) slower than their stack, the gate's bound `bound` (a
    fraction: what the host could have done, host_gates.repeat_bias)."""

    side: str
    rows: tuple[int, ...]
    slower: float
    bound: float


@dataclasses.dataclass(frozen=True)
class Cell:
    regime: str
    history: int | None  # A/A records behind the levels; None: interleaved rounds
    design: str
    change: float
    not_reproduced: float
    reproduced: float
    power: float | None  # the changed row called slower
    flagged: float = 0.0  # a repeat of the run named as standing out


def history_levels(rng, regime: Regime, records: int, trials: int) -> dict[str, np.ndarray]:
    """Per trial and row the levels (variances) and degrees of freedom a history of
    `records` A/A records gives, as compare reads them (noise.model_for), or the prior."""
    k = regime.rows
    if records == 0:
        prior = noise.prior(regime.family, None)
        rows = {name: np.full((trials, k), value) for name, value in (
            ("process", prior.process**2), ("process_df", prior.process_df),
            ("run", prior.run**2))}  # fmt: skip
        return {**rows, "seen": np.ones(k, dtype=bool), "run_df": np.full(trials, prior.run_df),
                "run_ratio": np.full(trials, (prior.run / prior.process) ** 2),
                "shift": np.full(trials, prior.shift**2),
                "shift_df": np.full(trials, prior.shift_df)}  # fmt: skip
    process_k, run_k = regime.levels()
    seen = regime.history_rows or k
    n = HISTORY_REPEATS
    logs = (rng.normal(0, regime.shift, (trials, records, 1, 1))
            + rng.normal(0, run_k[:seen, None], (trials, records, seen, 1))
            + rng.normal(0, process_k[:seen, None], (trials, records, seen, n)))  # fmt: skip
    own = np.var(logs, axis=-1, ddof=1).mean(axis=1)  # each row's, [trials, seen]
    own_df = float(records * (n - 1))
    process, process_df = own.mean(axis=1), records * seen * (n - 1)
    means = logs.mean(axis=-1)  # [trials, records, rows]
    # fit_group's additive fit, each cell weighed by its row's precision (n / own): with
    # every cell present one pass of its alternating means is exact
    weight = n / own * fit.inverse_bias(own_df)
    centre = means.mean(axis=1, keepdims=True)
    a = (np.sum(weight[:, None, :] * (means - centre), axis=2, keepdims=True)
         / weight.sum(axis=1)[:, None, None])  # fmt: skip
    residual = means - a - centre
    df_e = (records - 1) * (seen - 1)
    ms_w = np.sum(weight[:, None, :] * residual**2, axis=(1, 2)) / df_e
    unit = process / n
    run, run_df, floor = fit.component(ms_w * unit, df_e, unit, process_df)
    between = np.var(a[:, :, 0], axis=1, ddof=1)
    shift, shift_df, _ = fit.component(between, records - 1, ms_w / weight.sum(axis=1), df_e)
    own_run = np.sum(residual**2, axis=1) / (df_e / seen) - own / n
    s0, d0 = spread.fit_spread(own, own_df)
    post, post_df = spread.posterior(own, own_df, s0[:, None], d0[:, None])
    scale = post / process[:, None]
    row_run = fit.row_run(own_run, df_e / seen, run[:, None] * scale, run_df[:, None],
                              floor[:, None] * scale)  # fmt: skip
    unseen = k - seen
    typical = np.where(s0 > 0, s0, process)[:, None] * np.ones((1, unseen))
    return {
        "process": np.concatenate([post, typical], axis=1),
        "process_df": np.concatenate([np.minimum(post_df, fit.MOST_DF),
                                      np.full((trials, unseen), spread.UNSEEN_DF)], axis=1),
        "run": np.concatenate([row_run, typical * (run / process)[:, None]], axis=1),
        "run_df": run_df, "shift": shift, "shift_df": shift_df, "seen": np.arange(k) < seen,
        "run_ratio": run / process,
    }  # fmt: skip


def _outcomes(out: dict, change: float) -> tuple[float, float, float | None]:
    outcome = out["outcome"]
    power = float(np.mean(out["word"][:, 0] == judge.SLOWER)) if change else None
    return float(np.mean(outcome == 1)), float(np.mean(outcome == 0)), power


def simulate(regime: Regime, records: int | None, design: tuple | None, change: float, *,
             trials: int, seed: int = SIM_SEED, drift: float = 1.0, outlier: float = 0.0,
             busy: Busy | None = None) -> Cell:  # fmt: skip
    """One cell: `trials` comparisons of the regime's rows, the first `change` slower,
    judged as the commands judge them: two records at the levels a history of `records`
    A/A records gives, or ROUNDS interleaved rounds (design None: judge.paired_arrays)."""
    repeats = design[1:] if design else (0, 0)
    rng = np.random.default_rng([seed, int(regime.process * 1e5), int(regime.run * 1e5),
                                 int(regime.shift * 1e5), regime.rows, records or 0, *repeats,
                                 int(change * 100), int(drift * 10), int(outlier * 100),
                                 int(busy is not None)])  # fmt: skip
    process_k, run_k = (level * drift for level in regime.levels())
    truth = np.zeros(regime.rows)
    truth[0] = math.log1p(change)
    if design is None:  # a round's ratio: two processes, the run levels cancel
        logs = truth[:, None] + rng.normal(0, 1, (trials, regime.rows, ROUNDS)) * (
            process_k[:, None] * math.sqrt(2))  # fmt: skip
        out = judge.paired_arrays(logs, band=regime.band, alpha=ALPHA)
        return Cell(regime.name, None, f"{ROUNDS} rounds (dew ab)", change,
                    *_outcomes(out, change))  # fmt: skip
    name, n_run, n_ref = design
    levels = history_levels(rng, regime, records, trials)

    def side(n: int) -> np.ndarray:
        centre = (rng.normal(0, regime.shift * drift, (trials, 1))
                  + rng.normal(0, 1, (trials, regime.rows)) * run_k)  # fmt: skip
        return centre[..., None] + rng.normal(0, 1, (trials, regime.rows, n)) * process_k[:, None]

    run_logs, ref_logs = side(n_run) + truth[:, None], side(n_ref)
    if outlier and n_run > 1:
        run_logs[:, 1, 0] += math.log1p(outlier)
    run_bias = ref_bias = np.zeros(regime.rows)
    if busy is not None:
        slowed = np.zeros(regime.rows)
        slowed[list(busy.rows)] = math.log1p(busy.slower)
        bound = np.where(slowed > 0, math.log1p(busy.bound), 0.0)
        if busy.side in ("run", "both"):
            run_logs, run_bias = run_logs + slowed[:, None], bound
        if busy.side in ("reference", "both"):
            ref_logs, ref_bias = ref_logs + slowed[:, None], bound
    va = np.var(run_logs, axis=-1, ddof=1) if n_run > 1 else np.full((trials, regime.rows), np.nan)
    vb = np.var(ref_logs, axis=-1, ddof=1) if n_ref > 1 else np.full((trials, regime.rows), np.nan)
    prior_sd = np.sqrt(levels["process"])
    process_var, process_df = row_noise.moderated(va, n_run, vb, n_ref, prior_sd,
                                              levels["process_df"])  # fmt: skip
    run_var, run_df, share = row_noise.scaled_run(levels["run"], levels["run_df"][:, None],
                                              levels["process"], process_var,
                                              levels["run_ratio"][:, None])  # fmt: skip
    out = judge.judge_arrays(
        run_logs.mean(axis=-1) - ref_logs.mean(axis=-1), process_var, process_df, run_var,
        run_df, levels["shift"], levels["shift_df"][:, None], n_run, n_ref,
        band=regime.band, alpha=ALPHA, run_bias=run_bias, ref_bias=ref_bias,
        decidable=levels["seen"] | (n_run > 1) | (n_ref > 1), run_share=share)  # fmt: skip
    flagged = 0.0
    if n_run >= outliers.MIN_REPEATS:
        t, df = outliers.scores(run_logs, ref_logs)
        looked = regime.rows * (n_run + (n_ref if n_ref >= outliers.MIN_REPEATS else 0))
        flagged = float(np.mean(np.any(outliers.p_values(t, df) * looked < outliers.ALPHA,
                                       axis=(1, 2))))  # fmt: skip
    return Cell(regime.name, records, name, change, *_outcomes(out, change), flagged)
