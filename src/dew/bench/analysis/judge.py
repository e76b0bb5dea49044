"""The verdict of one comparison of two records: the whole-table shift, each row's change
against it, and one of three outcomes (docs/conventions.md states the rules for users).

On the log scale a repeat's figure is  y = mu_row + s_record + b_record,row + e_process:
a shift `s` the whole record shares (the host, the card, the day), a row's own run level
`b`, and the process level `e` (a fresh compile each). For each row, d = the difference of
the two sides' mean logs.

- **Process variance, moderated** (dew.bench.analysis.levels.row_noise): the two sides' repeats
  pooled, then shrunk toward the row's process level as a prior (limma's moderated
  variance), so three repeats whose spread happens to be small are not believed alone,
  and never narrower than the repeats show; a side of one process adds no degrees of
  freedom and takes the same variance; the row's run level moved with it.
- **The shift**: with MIN_ROWS_FOR_SHIFT rows or more, the median of the rows' d. Its
  variance is the shared run level on both records (2·σ_shift²) and the median's own
  noise; it is judged as a line of its own ("the whole run is 6% slower").
- **A row's change**: relative to the shift, r = d − shift, against the row's own noise
  (process and its own run level). With fewer rows there is no shift: d itself, with the
  shared level added.
- **A row's whole change**: d with the shared level, tested too where there is a shift: a
  row whose whole change lies beyond the band is not within it (where noisy rows leave the
  median too wide to judge a quiet row against, its whole change still shows it), unless
  the shift is faster or slower: then the whole run's change is the shift's line.
- **Tests**: the shift, every row's change against it and every row's whole change together
  under Holm-Bonferroni. `faster`/`slower` when the 95% interval lies wholly beyond the
  band and the Holm p is under alpha: against the shift first, else the whole change
  (`whole`: the word is the whole change's).
- **Equivalence**: a row is `same` when the 1 − 2·alpha (90%) interval of its whole change d
  (the shared level included) lies inside the band: two one-sided tests at alpha (TOST).
  Every row must show it for REPRODUCED (an intersection-union test: no correction needed).
- **Outcome**: NOT REPRODUCED when the shift or some row is faster or slower (or a row that
  ran in the reference fails now); REPRODUCED when every comparable row is the same;
  INCONCLUSIVE otherwise, never a success.
- **Paired rounds** (`paired_arrays`, `dew ab`): the same words and outcome from the per-round
  log ratios, the run levels cancelled, with the same equivalence test.
- **What two records can show**: `smallest_band`, `repeats_to_show` and `rounds_to_show`
  (from a history's levels: dew.bench.analysis.levels.fit).

Everything is vectorized over a leading axis of trials, so the calibration's simulation
(dew.bench.analysis.calibration.simulate) runs exactly the code compare runs
(dew.bench.analysis.comparison judges one comparison as one trial).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dew import platforms
from dew.bench.analysis.levels.row_noise import median_variance, rows_spread
from dew.bench.analysis.stats import CONFIDENCE
from dew.bench.analysis.tables import level
from dew.bench.analysis.tails import norm_ppf, t_ppf, t_sf

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "REPRODUCED", "NOT REPRODUCED", "INCONCLUSIVE"
EXIT_CODES = {REPRODUCED: 0, NOT_REPRODUCED: 1, INCONCLUSIVE: 3}  # 2: bad input
UNDECIDED, SAME, FASTER, SLOWER = 0, 1, 2, 3
WORDS = ("undecided", "same", "faster", "slower")
MIN_ROWS_FOR_SHIFT = 3
EQUIVALENCE = 0.90  # TOST at alpha 0.05: the 90% interval inside the band


def band_for(platform: str | None) -> float:
    """The band of a platform's records (dew.platforms: its `band`, the relevance floor, a
    fraction): 2% on a GPU (its runs repeat within about 1%), 5% on a CPU host (a shared
    2-core VM drifts by several percent)."""
    return platforms.get(platform).band


def _t(q: float, df):
    df = np.asarray(df, dtype=float)
    return np.where(np.isfinite(df), t_ppf(q, np.where(np.isfinite(df), df, 1.0)), norm_ppf(q))


def welch(*parts) -> tuple[np.ndarray, np.ndarray]:
    """The sum of variance parts (var, df) and its Welch-Satterthwaite degrees of freedom."""
    total = sum(np.asarray(v, dtype=float) for v, _ in parts)
    with np.errstate(invalid="ignore", divide="ignore"):
        denominator = sum(np.where(np.asarray(v) > 0, np.asarray(v, dtype=float) ** 2 / df, 0.0)
                          for v, df in parts)  # fmt: skip
        df = np.where(denominator > 0, total**2 / denominator, np.inf)
    return total, df


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


def _test(estimate, var, df, down=0.0, up=0.0):
    """The 95% interval and two-sided p of an estimate with its variance and df; `down` and
    `up` (>= 0, may be inf) bound a bias the noise does not hold (a busy host: the truth may
    lie that much lower or higher): the interval is widened by them and p is taken at the
    estimate moved that far toward 0."""
    se = np.sqrt(var)
    half = np.where(se > 0, _t(0.5 + CONFIDENCE / 2, df) * se, 0.0)
    with np.errstate(invalid="ignore"):
        nearest = np.where(estimate > 0, np.maximum(estimate - down, 0.0),
                           np.minimum(estimate + up, 0.0))  # fmt: skip
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(
            se > 0,
            2 * t_sf(np.abs(nearest) / se, np.where(np.isfinite(df), df, 1e9)),
            # No noise at all (a history whose every level is 0): the change is exact.
            np.where(nearest == 0, 1.0, 0.0),
        )
    return estimate - half - down, estimate + half + up, p


def _inside(estimate, var, df, limit, alpha, down=0.0, up=0.0):
    """The equivalence test (TOST at `alpha`: the 1 - 2·alpha interval, widened by the bias
    bounds as in _test) inside ±limit."""
    half = _t(1 - alpha, df) * np.sqrt(var)
    with np.errstate(invalid="ignore"):
        return (estimate - half - down > -limit) & (estimate + half + up < limit)


def _word(low, high, p_adjusted, alpha, limit):
    changed = ((low > limit) | (high < -limit)) & (p_adjusted < alpha)
    return np.where(changed, np.where(low > 0, SLOWER, FASTER), UNDECIDED)


def _median_bounds(d, run_bias, ref_bias):
    """How far the median of the rows' d may lie below and above the one measured when each
    row's run could read up to run_bias slower and its reference up to ref_bias slower than
    their stacks are (the median is monotone in every row): (down, up), per trial."""
    middle = np.median(d, axis=1)
    with np.errstate(invalid="ignore"):
        down = middle - np.median(d - run_bias, axis=1)
        up = np.median(d + ref_bias, axis=1) - middle
    return np.where(np.isnan(down), np.inf, down), np.where(np.isnan(up), np.inf, up)


def judge_arrays(d, process_var, process_df, run_var, run_df, shift_var, shift_df, n_run,
                 n_ref, *, band: float, alpha: float, run_bias=0.0, ref_bias=0.0,
                 decidable=True, run_share=0.0) -> dict[str, np.ndarray]:  # fmt: skip
    """The verdicts of [trials, rows] comparisons. `process_var` is per process (moderated),
    `run_var` the row's own run level σ_b², `shift_var` the shared σ_s² (variances, not
    doubled: two records carry each twice); `run_share` (scaled_run's) adds run_share ·
    process_var as a row's run level, with the process term's df.

    `run_bias` / `ref_bias` (log scale, >= 0, inf: unbounded) bound how much slower than
    its stack a row's run / reference may have read (a busy host:
    dew.bench.analysis.host_gates): every interval that holds the row, and the shift
    through the median, is widened by what they allow, so a busy side never makes a change
    or a `same` the host could have made. A row not `decidable` (its noise known from
    nothing: no history of its own and one process a side) is `undecided`, its d still in
    the shift.

    Returns per row `word`, `total` (d and its low/high), `tested` (the relative change
    judged and its low/high/p), `p_holm` (the judged change's), `whole` (the word is the
    whole change's: against the shift it was undecided), and `word_unbiased` (the words
    with no bias: what the busy side held back); per trial the `shift` (estimate, low,
    high, p, word, word_unbiased; NaN without one) and `outcome` (0 REPRODUCED, 1 NOT
    REPRODUCED, 3 INCONCLUSIVE). The intervals returned are the noise's alone, as the table
    shows them; the words and p come from the widened ones."""
    d = np.atleast_2d(np.asarray(d, dtype=float))
    trials, rows = d.shape
    limit = math.log1p(band)
    run_bias = np.broadcast_to(np.asarray(run_bias, dtype=float), d.shape)
    ref_bias = np.broadcast_to(np.asarray(ref_bias, dtype=float), d.shape)
    shift_df = np.asarray(shift_df, dtype=float).reshape(-1, 1) if np.ndim(shift_df) else shift_df
    # a run level that moves with the process level (scaled_run) is part of its term, which
    # then rests on the ratio's df too (the delta method's df of a product of estimates)
    inverse_n = 1 / np.asarray(n_run) + 1 / np.asarray(n_ref)
    process = np.broadcast_to(process_var * (inverse_n + 2 * np.asarray(run_share)), d.shape)
    moved = 2 * np.asarray(run_share) / (inverse_n + 2 * np.asarray(run_share))
    with np.errstate(divide="ignore"):
        moved_df = np.broadcast_to(1 / (1 / np.asarray(process_df, dtype=float)
                                        + moved**2 / np.asarray(run_df, dtype=float)),
                                   d.shape)  # fmt: skip
    own, own_df = welch((process, moved_df),
                        (np.broadcast_to(2 * np.asarray(run_var), d.shape),
                         np.broadcast_to(run_df, d.shape)))  # fmt: skip
    # one process a side: only the rows' spread can show a host noisier than its history
    spread = np.ones(trials)
    if np.all(np.asarray(n_run) == 1) and np.all(np.asarray(n_ref) == 1):
        spread = rows_spread(d, own, decidable)
        own = own * spread[:, None]
    shared = np.broadcast_to(
        2 * np.asarray(shift_var, dtype=float).reshape(-1, 1)
        if np.ndim(shift_var)
        else 2 * float(shift_var),
        (trials, 1),
    )
    total_var, total_df = welch((own, own_df), (np.broadcast_to(shared, d.shape),
                                                np.broadcast_to(shift_df, d.shape)))  # fmt: skip
    nan = np.full(trials, np.nan)
    # without a shift the row's test is its whole change already
    whole_word = whole_unbiased = np.full(d.shape, UNDECIDED)
    whole_p = np.full(d.shape, np.nan)
    shift = {"estimate": nan, "low": nan, "high": nan, "p": nan, "word": np.full(trials, -1),
             "word_unbiased": np.full(trials, -1)}  # fmt: skip
    no_bias = np.zeros(d.shape)
    biased = bool(np.any(run_bias) or np.any(ref_bias))  # else the unbiased words are these
    if rows >= MIN_ROWS_FOR_SHIFT:
        middle = np.median(d, axis=1)
        median_var, median_df = median_variance(own, own_df)
        s_var, s_df = welch((shared[:, 0], np.broadcast_to(np.ravel(shift_df)
                                                           if np.ndim(shift_df) else shift_df,
                                                           (trials,))),
                            (median_var, median_df))  # fmt: skip
        s_down, s_up = _median_bounds(d, run_bias, ref_bias)
        tested = d - middle[:, None]
        tested_var, tested_df = welch((own, own_df), (np.broadcast_to(median_var[:, None],
                                                                      d.shape),
                                                      np.broadcast_to(median_df[:, None],
                                                                      d.shape)))  # fmt: skip

        def words(s_bias, bias, whole_bias):
            s_low, s_high, s_p = _test(middle, s_var, s_df, *s_bias)
            low, high, p = _test(tested, tested_var, tested_df, *bias)
            w_low, w_high, w_p = _test(d, total_var, total_df, *whole_bias)
            adjusted = holm(np.concatenate([s_p[:, None], p, w_p], axis=1))
            s_word = _word(s_low, s_high, adjusted[:, 0], alpha, limit)
            s_same = _inside(middle, s_var, s_df, limit, alpha, *s_bias)
            s_word = np.where(s_word == UNDECIDED, np.where(s_same, SAME, UNDECIDED), s_word)
            w_p = adjusted[:, 1 + rows :]
            return ((s_low, s_high, adjusted[:, 0], s_word),
                    (low, high, adjusted[:, 1 : 1 + rows]),
                    (_word(w_low, w_high, w_p, alpha, limit), w_p))  # fmt: skip

        # a row's change against the shift is wrong by its own sides' bias and the
        # median's: a busy side on other rows moves the shift it is judged against; its
        # whole change by its own sides' alone
        unbiased_words = words((0.0, 0.0), (no_bias, no_bias), (no_bias, no_bias))
        (_, _, s_p, s_word), (low, high, p_adjusted), (whole_word, whole_p) = (
            words(
                (s_down, s_up),
                (run_bias + s_up[:, None], ref_bias + s_down[:, None]),
                (run_bias, ref_bias),
            )
            if biased
            else unbiased_words
        )
        (s_low, s_high, _, s_unbiased), (u_low, u_high, u_p), (whole_unbiased, _) = (
            unbiased_words)  # fmt: skip
        shift = {"estimate": middle, "low": s_low, "high": s_high, "p": s_p, "word": s_word,
                 "word_unbiased": s_unbiased}  # fmt: skip
    else:
        tested = d
        u_low, u_high, u_p = _test(d, total_var, total_df)
        u_p = holm(u_p)
        low, high, p_adjusted = u_low, u_high, u_p
        if biased:
            low, high, p = _test(d, total_var, total_df, run_bias, ref_bias)
            p_adjusted = holm(p)
    total = (d, total_var, total_df, limit, alpha)
    word = _word(low, high, p_adjusted, alpha, limit)

    # a whole change the shift already tells (the whole run faster or slower) is not the
    # row's; nor one its row does not lie apart from the rest in (its change against the
    # shift the other way): the shift's own noise then made it
    def whole_of(words, shift_words):
        moved = np.isin(shift_words, (FASTER, SLOWER))[:, None]
        apart = np.where(words == SLOWER, tested > 0, tested < 0)
        return (words != UNDECIDED) & apart & ~moved

    whole = (word == UNDECIDED) & whole_of(whole_word, shift["word"])
    word = np.where(whole, whole_word, word)
    p_adjusted = np.where(whole, whole_p, p_adjusted)
    inside = _inside(*total, run_bias, ref_bias)
    word = np.where(word == UNDECIDED, np.where(inside, SAME, UNDECIDED), word)
    unbiased = _word(u_low, u_high, u_p, alpha, limit)
    unbiased = np.where(
        (unbiased == UNDECIDED) & whole_of(whole_unbiased, shift["word_unbiased"]),
        whole_unbiased, unbiased)  # fmt: skip
    unbiased = np.where(unbiased == UNDECIDED, np.where(_inside(*total), SAME, UNDECIDED),
                        unbiased)  # fmt: skip
    word = np.where(decidable, word, UNDECIDED)
    whole &= decidable
    unbiased = np.where(decidable, unbiased, UNDECIDED)
    changed = np.any((word == FASTER) | (word == SLOWER), axis=1)
    changed |= np.isin(shift["word"], (FASTER, SLOWER))
    all_same = np.all(word == SAME, axis=1)
    outcome = np.where(changed, 1, np.where(all_same, 0, 3))
    t_low, t_high, _ = _test(d, total_var, total_df)
    return {"word": word, "word_unbiased": unbiased, "d": d, "total_low": t_low,
            "total_high": t_high, "total_var": total_var, "total_df": total_df,
            "tested": tested, "low": u_low, "high": u_high,
            "tested_var": tested_var if rows >= MIN_ROWS_FOR_SHIFT else total_var,
            "tested_df": tested_df if rows >= MIN_ROWS_FOR_SHIFT else total_df,
            "p_holm": p_adjusted, "whole": whole, "shift": shift, "spread": spread,
            "outcome": outcome}  # fmt: skip


def paired_arrays(logs, *, band: float, alpha: float) -> dict[str, np.ndarray]:
    """The verdicts of [trials, rows, rounds] paired log ratios B/A (NaN: no pair that
    round), the test `nox -s ab` runs and the calibration simulates: per row the mean log
    ratio, its 95% t-interval over rounds − 1 df and p (a one-sample t: the run level
    cancels within a round), Holm over the rows, `faster`/`slower` beyond the band and
    significant, `same` by the one equivalence test compare uses (EQUIVALENCE); a row of
    fewer than 2 rounds is not tested. Per trial the `outcome` as judge_arrays gives it."""
    logs = np.asarray(logs, dtype=float)
    logs = logs.reshape((1,) * (3 - logs.ndim) + logs.shape)
    rounds = np.sum(~np.isnan(logs), axis=-1)
    limit = math.log1p(band)
    present = ~np.isnan(logs)
    total = np.sum(np.where(present, logs, 0.0), axis=-1)
    mean = np.where(rounds > 0, total / np.maximum(rounds, 1), np.nan)
    squares = np.sum(np.where(present, (logs - mean[..., None]) ** 2, 0.0), axis=-1)
    var = np.where(rounds > 1, squares / np.maximum(rounds - 1, 1) / np.maximum(rounds, 1),
                   np.nan)  # fmt: skip
    df = np.maximum(rounds - 1, 1).astype(float)
    low, high, p = _test(mean, np.nan_to_num(var), df)
    tested = rounds > 1
    p = np.where(tested, p, np.nan)
    low, high = np.where(rounds > 1, low, mean), np.where(rounds > 1, high, mean)
    p_adjusted = holm(p)
    word = np.where(tested, _word(low, high, p_adjusted, alpha, limit), UNDECIDED)
    same = tested & _inside(mean, np.nan_to_num(var), df, limit, alpha)
    word = np.where(word == UNDECIDED, np.where(same, SAME, UNDECIDED), word)
    changed = np.any((word == FASTER) | (word == SLOWER), axis=1)
    outcome = np.where(changed, 1, np.where(np.all(word == SAME, axis=1), 0, 3))
    return {"mean": mean, "se": np.sqrt(var), "low": low, "high": high, "p": p,
            "p_holm": p_adjusted, "rounds": rounds, "word": word, "outcome": outcome}  # fmt: skip


def paired(a, b):
    """One case's paired rounds a/b (figures > 0) as stats.Paired: its geometric mean ratio,
    95% t-interval and p, by paired_arrays."""
    from dew.bench.analysis.stats import Paired

    logs = np.log(np.asarray(a, dtype=float) / np.asarray(b, dtype=float))
    return Paired.of(paired_arrays(logs[None, None, :], band=0.05, alpha=0.05), 0)


# --- what two records can show -----------------------------------------------------------


def smallest_band(run_var: float, run_df: float, shift_var: float, shift_df: float) -> float:
    """The narrowest band (a fraction) two records could show a row the same within, at any
    number of repeats: the equivalence interval of an unchanged row when its process term
    is gone, t·√(2σ_b² + 2σ_s²) with their Welch degrees of freedom."""
    var, df = welch((2 * run_var, run_df), (2 * shift_var, shift_df))
    return math.expm1(float(_t(0.5 + EQUIVALENCE / 2, df) * math.sqrt(float(var))))


def rounds_to_show(process_var: float, band: float, most: int = 1000) -> int | None:
    """The fewest interleaved rounds (nox -s ab; a round's ratio carries two processes and
    no run level) after which an unchanged case shows its EQUIVALENCE interval inside the
    band with 80% power; None beyond `most`."""
    return repeats_to_show(process_var / 2, 0.0, math.inf, 0.0, math.inf, band, most, True)


def repeats_to_show(process_var: float, run_var: float, run_df: float, shift_var: float,
                    shift_df: float, band: float, most: int = 1000,
                    paired: bool = False) -> int | None:  # fmt: skip
    """The fewest repeats a side (two records) after which an unchanged row shows its
    EQUIVALENCE interval inside the band with 80% power (the interval's half-width and
    the 80% quantile of |d| under it); None beyond `most` or below the smallest band."""
    limit = math.log1p(band)
    n = np.arange(2, most + 1)  # every count at once: a compare asks this of each row
    process_df = n - 1 if paired else 2 * (n - 1)
    var, df = welch((2 * process_var / n, process_df), (2 * run_var, run_df),
                    (2 * shift_var, shift_df))  # fmt: skip
    t = _t(0.5 + EQUIVALENCE / 2, df) + _t(0.90, df)
    shown = np.flatnonzero(t * np.sqrt(var) <= limit)
    return int(n[shown[0]]) if shown.size else None


@dataclasses.dataclass(frozen=True)
class Shift:
    """The whole-table shift of one comparison: the median of the rows' log ratios."""

    ratio: float
    low: float
    high: float
    p_holm: float | None
    word: str  # faster | slower | same | undecided
    why: str | None = None  # what a gate made undecided (a busy host, the host's drift)
    spread: float = 1.0  # the rows' noise read this much wider (row_noise.rows_spread)

    def line(self, shift_level: float) -> str:
        change = self.ratio - 1
        size = "the same speed" if round(abs(change) * 1000) == 0 else (
            f"{abs(change):.1%} {'slower' if change > 0 else 'faster'}")  # fmt: skip
        where = {
            "faster": "beyond", "slower": "beyond", "same": "within",
            "undecided": "not shown beyond or within",
        }[self.word]  # fmt: skip
        wider = (f"; with one process a side the rows' changes spread {self.spread:.3g}x (in "
                 "variance) what their noise allows: every row's noise read that much wider "
                 "(a host noisier than its history)")  # fmt: skip
        return (f"the whole run is {size} (the median of the rows' ratios, "
                f"{self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}]): {where} the band and "
                f"this host's run-to-run shift ({level(shift_level)}); shift {self.word}"
                + (f" ({self.why})" if self.why else "")
                + (wider if self.spread > 1 else ""))  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Reach:
    """What two records like these can show: the narrowest band any number of repeats
    shows a row the same within (the run levels alone), and the repeats a side or the
    interleaved rounds that would show the band asked for (None: none would)."""

    smallest: float
    repeats: int | None
    rounds: int | None


def reach(counted: list, band_percent: float) -> Reach | None:
    """A comparison's reach over its tested rows (its counted RowComparisons; the widest
    row decides); None when no row was tested."""
    tested = [r for r in counted if r.detect is not None and r.noise is not None]
    if not tested:
        return None
    band = band_percent / 100
    smallest = max(smallest_band(r.noise.run**2, r.noise.run_df, r.noise.shift**2,
                                       r.noise.shift_df) for r in tested)  # fmt: skip
    repeats = [repeats_to_show(r.detect.var, r.noise.run**2, r.noise.run_df,
                                     r.noise.shift**2, r.noise.shift_df, band)
               for r in tested]  # fmt: skip
    rounds = [rounds_to_show(r.detect.var, band) for r in tested]
    return Reach(smallest, None if None in repeats else max(repeats),
                 None if None in rounds else max(rounds))  # fmt: skip
