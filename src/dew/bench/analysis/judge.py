"""The verdict of one comparison of two records: the whole-table shift, each row's change
against it, and one of three outcomes (docs/conventions.md states the rules for users).

On the log scale a repeat's figure is  y = mu_row + s_record + b_record,row + e_process:
a shift `s` the whole record shares (the host, the card, the day), a row's own run level
`b`, and the process level `e` (a fresh compile each). For each row, d = the difference of
the two sides' mean logs.

- **Process variance, moderated**: the two sides' repeats pooled, then shrunk toward the
  noise's process level as a prior worth PRIOR_DF degrees of freedom (limma's moderated
  variance), so three repeats whose spread happens to be small are not believed alone;
  a side of one process adds no degrees of freedom and takes the same variance.
- **The shift**: with MIN_ROWS_FOR_SHIFT rows or more, the median of the rows' d. Its
  variance is the shared run level on both records (2·σ_shift²) and the median's own
  noise; it is judged as a line of its own ("the whole run is 6% slower").
- **A row's change**: relative to the shift, r = d − shift, against the row's own noise
  (process and its own run level). With fewer rows there is no shift: d itself, with the
  shared level added.
- **Tests**: the shift and every row together under Holm-Bonferroni. `faster`/`slower`
  when the 95% interval lies wholly beyond the band and the Holm p is under alpha.
- **Equivalence**: a row is `same` when the 90% interval of its whole change d (the shared
  level included) lies inside the band: two one-sided tests at alpha (TOST). Every row must
  show it for REPRODUCED (an intersection-union test: no correction needed).
- **Outcome**: NOT REPRODUCED when the shift or some row is faster or slower (or a row that
  ran in the reference fails now); REPRODUCED when every comparable row is the same;
  INCONCLUSIVE otherwise, never a success.

Everything is vectorized over a leading axis of trials, so the calibration's simulation
(dew.bench.analysis.calibration.simulate) runs exactly the code compare runs
(dew.bench.analysis.comparison judges one comparison as one trial).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dew.bench.analysis.stats import CONFIDENCE

PRIOR_DF = 20.0  # what the noise's process level is worth against a row's own repeats

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "REPRODUCED", "NOT REPRODUCED", "INCONCLUSIVE"
EXIT_CODES = {REPRODUCED: 0, NOT_REPRODUCED: 1, INCONCLUSIVE: 3}  # 2: bad input
UNDECIDED, SAME, FASTER, SLOWER = 0, 1, 2, 3
WORDS = ("undecided", "same", "faster", "slower")
MIN_ROWS_FOR_SHIFT = 3
MEDIAN_EFFICIENCY = math.pi / 2  # the variance of a median over that of a mean, at most
EQUIVALENCE = 0.90  # TOST at alpha 0.05: the 90% interval inside the band
BANDS = {"gpu": 0.02, "cpu": 0.05}  # the relevance floor per device kind (a fraction)


def band_for(platform: str | None) -> float:
    """The band of a device kind: 2% on a GPU (its runs repeat within about 1%), 5% on a
    CPU host (a shared 2-core VM drifts by several percent)."""
    return BANDS["cpu"] if platform in (None, "cpu") else BANDS["gpu"]


def _t(q: float, df):
    from scipy import stats as scipy_stats

    df = np.asarray(df, dtype=float)
    return np.where(np.isfinite(df), scipy_stats.t.ppf(q, np.where(np.isfinite(df), df, 1.0)),
                    scipy_stats.norm.ppf(q))  # fmt: skip


def welch(*parts) -> tuple[np.ndarray, np.ndarray]:
    """The sum of variance parts (var, df) and its Welch-Satterthwaite degrees of freedom."""
    total = sum(np.asarray(v, dtype=float) for v, _ in parts)
    with np.errstate(invalid="ignore", divide="ignore"):
        denominator = sum(np.where(np.asarray(v) > 0, np.asarray(v, dtype=float) ** 2 / df, 0.0)
                          for v, df in parts)  # fmt: skip
        df = np.where(denominator > 0, total**2 / denominator, np.inf)
    return total, df


def moderated(run_var, run_n, ref_var, ref_n, prior: float, prior_df: float):
    """The process variance per process: the two sides' repeats pooled and shrunk toward
    the prior (worth min(PRIOR_DF, prior_df) df); and its degrees of freedom."""
    run_n, ref_n = np.asarray(run_n, dtype=float), np.asarray(ref_n, dtype=float)
    ss = np.where(run_n > 1, np.nan_to_num(np.asarray(run_var, dtype=float)) * (run_n - 1), 0.0)
    ss = ss + np.where(ref_n > 1, np.nan_to_num(np.asarray(ref_var, dtype=float)) * (ref_n - 1),
                       0.0)  # fmt: skip
    own = np.maximum(run_n - 1, 0) + np.maximum(ref_n - 1, 0)
    d0 = np.minimum(PRIOR_DF, prior_df)
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.where(d0 + own > 0, (d0 * np.asarray(prior) ** 2 + ss) / (d0 + own), 0.0)
    return var, d0 + own


def holm(p: np.ndarray) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values along the last axis (NaN: not tested)."""
    p = np.asarray(p, dtype=float)
    order = np.argsort(np.where(np.isnan(p), np.inf, p), axis=-1)
    ranked = np.take_along_axis(p, order, axis=-1)
    m = np.sum(~np.isnan(p), axis=-1, keepdims=True)
    factor = m - np.arange(p.shape[-1])
    adjusted = np.minimum(1.0, np.maximum.accumulate(np.nan_to_num(ranked * factor, nan=0.0),
                                                     axis=-1))  # fmt: skip
    adjusted = np.where(np.isnan(ranked), np.nan, adjusted)
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return out


def _test(estimate, var, df):
    """The 95% interval and two-sided p of an estimate with its variance and df."""
    from scipy import stats as scipy_stats

    se = np.sqrt(var)
    half = _t(0.5 + CONFIDENCE / 2, df) * se
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(
            se > 0,
            2 * scipy_stats.t.sf(np.abs(estimate) / se, np.where(np.isfinite(df), df, 1e9)),
            np.nan,
        )
    return estimate - half, estimate + half, p


def _word(low, high, p_adjusted, alpha, limit):
    changed = ((low > limit) | (high < -limit)) & (p_adjusted < alpha)
    return np.where(changed, np.where(low > 0, SLOWER, FASTER), UNDECIDED)


def judge_arrays(d, process_var, process_df, run_var, run_df, shift_var, shift_df, n_run,
                 n_ref, *, band: float, alpha: float) -> dict[str, np.ndarray]:  # fmt: skip
    """The verdicts of [trials, rows] comparisons. `process_var` is per process (moderated),
    `run_var` the row's own run level σ_b², `shift_var` the shared σ_s² (variances, not
    doubled: two records carry each twice). Returns per row `word`, `total` (d and its
    low/high), `tested` (the relative change judged and its low/high/p), `p_holm`; per
    trial the `shift` (estimate, low, high, p, word; NaN without one) and `outcome`
    (0 REPRODUCED, 1 NOT REPRODUCED, 3 INCONCLUSIVE)."""
    d = np.atleast_2d(np.asarray(d, dtype=float))
    trials, rows = d.shape
    limit = math.log1p(band)
    process = np.broadcast_to(process_var * (1 / np.asarray(n_run) + 1 / np.asarray(n_ref)),
                              d.shape)  # fmt: skip
    own, own_df = welch((process, np.broadcast_to(process_df, d.shape)),
                        (np.broadcast_to(2 * np.asarray(run_var), d.shape),
                         np.broadcast_to(run_df, d.shape)))  # fmt: skip
    shared = np.broadcast_to(
        2 * np.asarray(shift_var, dtype=float).reshape(-1, 1)
        if np.ndim(shift_var)
        else 2 * float(shift_var),
        (trials, 1),
    )
    total_var, total_df = welch((own, own_df), (np.broadcast_to(shared, d.shape),
                                                np.broadcast_to(shift_df, d.shape)))  # fmt: skip
    nan = np.full(trials, np.nan)
    shift = {"estimate": nan, "low": nan, "high": nan, "p": nan, "word": np.full(trials, -1)}
    if rows >= MIN_ROWS_FOR_SHIFT:
        middle = np.median(d, axis=1)
        median_var, median_df = welch(*((MEDIAN_EFFICIENCY * own[:, k] / rows**2,
                                         own_df[:, k]) for k in range(rows)))  # fmt: skip
        s_var, s_df = welch((shared[:, 0], np.broadcast_to(np.ravel(shift_df)
                                                           if np.ndim(shift_df) else shift_df,
                                                           (trials,))),
                            (median_var, median_df))  # fmt: skip
        s_low, s_high, s_p = _test(middle, s_var, s_df)
        tested = d - middle[:, None]
        tested_var, tested_df = welch((own, own_df), (np.broadcast_to(median_var[:, None],
                                                                      d.shape),
                                                      np.broadcast_to(median_df[:, None],
                                                                      d.shape)))  # fmt: skip
        low, high, p = _test(tested, tested_var, tested_df)
        adjusted = holm(np.concatenate([s_p[:, None], p], axis=1))
        s_adjusted, p_adjusted = adjusted[:, 0], adjusted[:, 1:]
        s_word = _word(s_low, s_high, s_adjusted, alpha, limit)
        s_half = _t(0.5 + EQUIVALENCE / 2, s_df) * np.sqrt(s_var)
        s_same = (np.abs(middle) + s_half) < limit
        shift = {"estimate": middle, "low": s_low, "high": s_high, "p": s_adjusted,
                 "word": np.where(s_word == UNDECIDED, np.where(s_same, SAME, UNDECIDED),
                                  s_word)}  # fmt: skip
    else:
        tested = d
        low, high, p = _test(d, total_var, total_df)
        p_adjusted = holm(p)
    word = _word(low, high, p_adjusted, alpha, limit)
    half = _t(0.5 + EQUIVALENCE / 2, total_df) * np.sqrt(total_var)
    same = (np.abs(d) + half) < limit
    word = np.where(word == UNDECIDED, np.where(same, SAME, UNDECIDED), word)
    changed = np.any((word == FASTER) | (word == SLOWER), axis=1)
    changed |= np.isin(shift["word"], (FASTER, SLOWER))
    all_same = np.all(word == SAME, axis=1)
    outcome = np.where(changed, 1, np.where(all_same, 0, 3))
    t_low, t_high, _ = _test(d, total_var, total_df)
    return {"word": word, "d": d, "total_low": t_low, "total_high": t_high,
            "total_var": total_var, "total_df": total_df, "tested": tested, "low": low,
            "high": high, "tested_var": tested_var if rows >= MIN_ROWS_FOR_SHIFT else total_var,
            "tested_df": tested_df if rows >= MIN_ROWS_FOR_SHIFT else total_df,
            "p_holm": p_adjusted, "shift": shift, "outcome": outcome}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Shift:
    """The whole-table shift of one comparison: the median of the rows' log ratios."""

    ratio: float
    low: float
    high: float
    p_holm: float | None
    word: str  # faster | slower | same | undecided
    why: str | None = None  # what a gate made undecided (a busy host, the host's drift)

    def line(self, shift_level: float) -> str:
        change = self.ratio - 1
        size = "the same speed" if round(abs(change) * 1000) == 0 else (
            f"{abs(change):.1%} {'slower' if change > 0 else 'faster'}")  # fmt: skip
        where = {
            "faster": "beyond", "slower": "beyond", "same": "within",
            "undecided": "not shown beyond or within",
        }[self.word]  # fmt: skip
        return (f"the whole run is {size} (the median of the rows' ratios, "
                f"{self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}]): {where} the band and "
                f"this host's run-to-run shift ({shift_level:.1%}); shift {self.word}"
                + (f" ({self.why})" if self.why else ""))  # fmt: skip
