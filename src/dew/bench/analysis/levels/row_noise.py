"""A row's noise in one comparison: its process variance from its repeats and its prior,
its run level moved with it, and the variance of the median the rows' shift is.

- `moderated`: the two sides' repeats pooled and shrunk toward the row's prior (limma's
  moderated variance), the prior believed only as far as today's repeats allow;
- `scaled_run`: a row's run level, kept at its history's ratio to the process level;
- `median_variance`: the median of rows 100x apart in noise, by fixed draws;
- `rows_spread`: with one process a side, how much wider than their noise the rows spread.

Vectorized over leading axes of trials, so the calibration's simulation
(dew.bench.analysis.simulate) runs what compare runs (dew.bench.analysis.comparison).
"""

from __future__ import annotations

import numpy as np

from dew.bench.analysis.tails import f_sf

PRIOR_DF = 20.0  # what the noise's process level is worth against a row's own repeats
DRIFT_ALPHA = 0.05  # repeats this improbably noisy under their prior move it (moderated)
WEAK_DF = 2.0  # a prior of no more df is a stated guess (a platform's, an unseen row's)
MEDIAN_DRAWS, MEDIAN_SEED = 2000, 20261206  # the median's variance, by fixed draws


def moderated(run_var, run_n, ref_var, ref_n, prior: float, prior_df: float):
    """The process variance per process over [..., rows]: the two sides' repeats pooled and
    shrunk toward the prior (worth min(PRIOR_DF, prior_df) df); and its degrees of freedom.
    The prior is the history's, and today's host may be noisier than its history says, so
    it is believed only as far as the repeats allow (F-tests at DRIFT_ALPHA): where every
    row's repeats together are noisier than their priors, every prior is scaled by how
    much (today's level over the history's, from all the rows' degrees of freedom); where
    one row's repeats are still noisier than its scaled prior, that row's repeats stand
    alone. A prior may widen what the repeats show, never narrow it."""
    run_n, ref_n = np.asarray(run_n, dtype=float), np.asarray(ref_n, dtype=float)
    ss = np.where(run_n > 1, np.nan_to_num(np.asarray(run_var, dtype=float)) * (run_n - 1), 0.0)
    ss = ss + np.where(ref_n > 1, np.nan_to_num(np.asarray(ref_var, dtype=float)) * (ref_n - 1),
                       0.0)  # fmt: skip
    own = np.maximum(run_n - 1, 0) + np.maximum(ref_n - 1, 0)
    d0 = np.minimum(PRIOR_DF, prior_df)
    prior_var = np.asarray(prior, dtype=float) ** 2
    ss, own, d0, prior_var = np.broadcast_arrays(ss, own, d0, prior_var)
    with np.errstate(invalid="ignore", divide="ignore"):
        used = (own > 0) & (prior_var > 0) & (d0 > 0)
        # a history's level only: a guess of two df (a row no record holds) says nothing of
        # how today's host compares with its history
        known = used & (d0 > WEAK_DF)
        ratio = np.where(known, ss / np.where(known, prior_var, 1.0), 0.0)
        own_sum = np.where(known, own, 0.0).sum(axis=-1, keepdims=True)
        pooled = ratio.sum(axis=-1, keepdims=True) / np.maximum(own_sum, 1)
        prior_sum = np.where(known, d0, 0.0).sum(axis=-1, keepdims=True)
        tail = f_sf(pooled, np.maximum(own_sum, 1), np.maximum(prior_sum, 1))
        drifted = (own_sum > 0) & (tail < DRIFT_ALPHA)
        prior_var = prior_var * np.where(drifted, np.maximum(pooled, 1.0), 1.0)
        row_ratio = np.where(used, ss / np.maximum(own, 1) / np.where(used, prior_var, 1.0), 0.0)
        noisier = used & (f_sf(row_ratio, np.maximum(own, 1), np.maximum(d0, 1e-9))
                          < DRIFT_ALPHA)  # fmt: skip
        d0 = np.where(noisier, 0.0, d0)
        var = np.where(d0 + own > 0, (d0 * prior_var + ss) / (d0 + own), 0.0)
    return var, d0 + own


def scaled_run(run_var, run_df, prior_var, process_var, kind_ratio=0.0):
    """A row's run level, moved with its process level: a row whose repeats are noisier
    than its prior (its moderated process variance above the prior's) is taken as that
    much noisier between runs too, the run and process levels keeping their ratio (the
    row's, or its kind's where that is larger: a row's own ratio rests on a few records);
    never below the run variance given. Returns (run_var, run_df, run_share): a moved row's
    run level is `run_share` times its process variance (judge_arrays adds it to the process
    term, whose degrees of freedom it then shares), its run_var 0."""
    run_var, prior_var = np.asarray(run_var, dtype=float), np.asarray(prior_var, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.maximum(np.where(prior_var > 0, run_var / prior_var, 0.0), kind_ratio)
    moved = ratio * np.asarray(process_var, dtype=float) > run_var
    return (np.where(moved, 0.0, run_var), np.broadcast_to(run_df, moved.shape),
            np.where(moved, ratio, 0.0))  # fmt: skip


def median_variance(var, df) -> tuple[np.ndarray, np.ndarray]:
    """The variance of the median of [..., rows] independent normal estimates with these
    variances (and df), computed by MEDIAN_DRAWS fixed draws: exact where rows differ
    100x in noise (the quiet rows set it), where the large-sample formula, (pi/2) · rows
    / (sum of 1/sd)², reads it a quarter too small at 18 rows. Its df: the fewest of any
    row's, which never overstates what the estimate rests on."""
    var = np.asarray(var, dtype=float)
    sd = np.sqrt(np.maximum(var, 0.0)).reshape(-1, var.shape[-1])
    z = np.random.default_rng([MEDIAN_SEED, sd.shape[-1]]).standard_normal(
        (MEDIAN_DRAWS, sd.shape[-1]))  # fmt: skip
    out = np.empty(sd.shape[0])
    step = max(1, 2**18 // z.size)  # 2 MB at a time: in cache, faster than 32 MB
    for start in range(0, sd.shape[0], step):
        medians = _median(sd[start : start + step, None, :] * z)
        out[start : start + step] = np.mean(medians**2, axis=-1)  # the median's centre is 0
    return out.reshape(var.shape[:-1]), np.min(np.asarray(df, dtype=float), axis=-1)


def _median(x: np.ndarray) -> np.ndarray:
    """np.median(x, axis=-1), the same values, by a sort: over a few rows np.median's
    partition is 2-5x slower, and the simulations take this median of millions of draws."""
    if not x.shape[-1]:
        return np.median(x, axis=-1)
    ordered = np.sort(x, axis=-1)  # a NaN sorts last: np.median's answer is then NaN
    k = x.shape[-1] // 2
    middle = ordered[..., k] if x.shape[-1] % 2 else (ordered[..., k - 1] + ordered[..., k]) / 2
    return np.where(np.isnan(ordered[..., -1]), np.nan, middle)


SPREAD_ALPHA = 0.05  # rows this improbably spread under their noise widen it (rows_spread)
# fewer rows: a change in one of them moves their median |z| as a drift would, and the
# calibration's 4-row regimes lose power to it
MIN_ROWS_FOR_SPREAD = 8


def rows_spread(d, own_var, decidable) -> np.ndarray:
    """How much wider than their noise the [..., rows] changes d spread about their median,
    as a variance factor per trial (>= 1): with one process a side no row's repeats can say
    that today's host is noisier than its history, but the rows together can. The scale is
    robust (the median |z| of the decidable rows, so a change in fewer than half of them
    does not read as one); it is believed where the rows spread more than chance allows
    them at SPREAD_ALPHA (by fixed draws of as many standard normals, each less their
    median), and then the noise is read at that scale: (median |z| / its median by chance)²."""
    d, own_var = np.atleast_2d(d), np.atleast_2d(own_var)
    decidable = np.broadcast_to(decidable, d.shape)
    factor = np.ones(d.shape[0])
    k = int(decidable[0].sum())
    if k < MIN_ROWS_FOR_SPREAD or not (decidable == decidable[:1]).all():
        return factor
    z = np.random.default_rng([MEDIAN_SEED, k]).standard_normal((MEDIAN_DRAWS, k))
    chance = np.median(np.abs(z - np.median(z, axis=1, keepdims=True)), axis=1)
    typical, limit = np.quantile(chance, [0.5, 1 - SPREAD_ALPHA])
    rows = d[:, decidable[0]]
    with np.errstate(invalid="ignore", divide="ignore"):
        centred = rows - np.median(rows, axis=1, keepdims=True)
        scaled = centred / np.sqrt(own_var[:, decidable[0]])
        seen = np.median(np.abs(scaled), axis=1)
    wide = np.isfinite(seen) & (seen > limit)
    return np.where(wide, (seen / typical) ** 2, factor)
