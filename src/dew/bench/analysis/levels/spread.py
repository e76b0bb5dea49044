"""How much a device kind's rows differ in noise, and each row's own level from it.

Rows of one kind are not equally noisy: on a v5e a device-bound row repeats within 0.05%
and a host-bound one spreads by 5%. A row's process level is therefore shrunk toward its
kind's rows, not toward one pooled level, by empirical Bayes over the rows' variances
(limma's `fitFDist`, Smyth 2004): the rows' sample variances s_k² (d_k degrees of freedom)
are taken as scaled chi-square draws around a prior s0² that is itself worth d0 degrees of
freedom; d0 is read from how much more the log variances spread than their sampling alone
explains. Rows that agree get a large d0 (their kind's level is worth much); rows 100x
apart a small one (each row's own figures lead).

- `fit_spread`: s0² and d0 from the rows' variances (vectorized over leading axes).
- `posterior`: a row's level, its own variance and the prior combined, with its df.
- UNSEEN_DF: what the kind's level is worth for a row with no A/A history at all.

Everything is vectorized over leading axes, so the calibration's simulation
(dew.bench.analysis.calibration) runs the code the history's fit runs.
"""

from __future__ import annotations

import numpy as np

# A row never measured in an A/A pair is a guess: its kind's typical level is worth this
# much against its own repeats, however well the kind's other rows agree.
UNSEEN_DF = 2.0


def _trigamma_inverse(x: np.ndarray) -> np.ndarray:
    """y with trigamma(y) = x (x > 0), by Newton's method from limma's start."""
    from scipy import special

    x = np.asarray(x, dtype=float)
    y = 0.5 + 1 / x
    for _ in range(50):
        tri = special.polygamma(1, y)
        step = tri * (1 - tri / x) / special.polygamma(2, y)
        y = y + step
        if np.all(-step / y < 1e-8):
            break
    return np.where(x > 1e7, 1 / np.sqrt(x), np.where(x < 1e-6, 1 / x, y))


def fit_spread(var, df) -> tuple[np.ndarray, np.ndarray]:
    """The prior (s0², d0) of the rows' variances `var` with their degrees of freedom `df`,
    over the last axis; rows with df <= 0 or a variance of 0 are left out. d0 is inf where
    the rows spread no more than sampling explains (or fewer than 3 rows say), s0² is 0
    where no row has a variance."""
    from scipy import special

    var, df = np.broadcast_arrays(np.asarray(var, dtype=float), np.asarray(df, dtype=float))
    used = (df > 0) & (var > 0) & np.isfinite(var)
    n = used.sum(axis=-1)
    safe_df = np.where(used, df, 1.0)
    e = np.where(used, np.log(np.where(used, var, 1.0)) - special.digamma(safe_df / 2)
                 + np.log(safe_df / 2), 0.0)  # fmt: skip
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = e.sum(axis=-1) / n
        squares = np.where(used, (e - mean[..., None]) ** 2, 0.0).sum(axis=-1)
        sampling = np.where(used, special.polygamma(1, safe_df / 2), 0.0).sum(axis=-1) / n
        excess = squares / (n - 1) - sampling
    spread = (n >= 3) & (excess > 0)
    d0 = np.where(spread, 2 * _trigamma_inverse(np.where(spread, excess, 1.0)), np.inf)
    finite = np.where(np.isfinite(d0), d0, 1.0)
    s0 = np.where(np.isfinite(d0), np.exp(mean + special.digamma(finite / 2) - np.log(finite / 2)),
                  np.exp(mean))  # fmt: skip
    return np.where(n > 0, s0, 0.0), d0


def posterior(var, df, s0, d0) -> tuple[np.ndarray, np.ndarray]:
    """A row's variance and df: its own (var, df) and the prior (s0, d0) pooled; the prior
    alone where d0 is inf or the row has no df of its own."""
    var, df, s0, d0 = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (var, df, s0, d0)))
    own = np.where(df > 0, df, 0.0)
    with np.errstate(invalid="ignore"):
        pooled = (d0 * s0 + own * np.nan_to_num(var)) / (d0 + own)
    return np.where(np.isfinite(d0), pooled, s0), d0 + own
