"""The t, normal and F quantiles and tails every test of dew's statistics uses.

Each is scipy.special's function under scipy.stats's rules at the edges (a quantile of 0 or
1 is the support's end; a shape of 0 or less, or a NaN, gives NaN; a point at or beyond the
support's end gives the tail's end): the same figures as scipy.stats (its tests hold them
equal), without its import (0.45 s more than scipy.special's, paid by every `dew compare`)
or its checks (a scalar call about 4x slower: a compare's reach makes thousands).
scipy.special is imported inside them: every case's process imports dew.bench.analysis.stats
(through dew.bench.analysis.repeats) and would pay 0.2 s for nothing.
"""

from __future__ import annotations

import numpy as np


def _ruled(inside, value, bad, low, at_low, at_high):
    """The function's value inside its domain, NaN where `bad`, else `at_low` where `low`
    and `at_high` elsewhere; a scalar for scalars, as scipy.stats gives."""
    out = np.where(inside, value, np.where(bad, np.nan, np.where(low, at_low, at_high)))
    return out[()] if out.ndim == 0 else out


def t_ppf(q, df):
    """scipy.stats.t.ppf(q, df)."""
    from scipy import special

    q, df = np.asarray(q, dtype=float), np.asarray(df, dtype=float)
    inside = (df > 0) & (q > 0) & (q < 1)
    # + 0.0: scipy.stats adds its loc, which turns a -0.0 into 0.0
    value = special.stdtrit(np.where(inside, df, 1.0), np.where(inside, q, 0.5)) + 0.0
    return _ruled(inside, value, ~(df > 0) | ((q != 0) & (q != 1)), q == 0, -np.inf, np.inf)


def norm_ppf(q):
    """scipy.stats.norm.ppf(q)."""
    from scipy import special

    q = np.asarray(q, dtype=float)
    inside = (q > 0) & (q < 1)
    value = special.ndtri(np.where(inside, q, 0.5)) + 0.0
    return _ruled(inside, value, (q != 0) & (q != 1), q == 0, -np.inf, np.inf)


def t_sf(x, df):
    """scipy.stats.t.sf(x, df)."""
    from scipy import special

    x, df = np.asarray(x, dtype=float), np.asarray(df, dtype=float)
    inside = (df > 0) & np.isfinite(x)
    value = special.stdtr(np.where(inside, df, 1.0), -np.where(inside, x, 0.0))
    return _ruled(inside, value, ~(df > 0) | np.isnan(x), x == -np.inf, 1.0, 0.0)


def f_sf(x, dfn, dfd):
    """scipy.stats.f.sf(x, dfn, dfd)."""
    from scipy import special

    x, dfn, dfd = (np.asarray(a, dtype=float) for a in (x, dfn, dfd))
    ok = (dfn > 0) & (dfd > 0)
    inside = ok & (x > 0) & (x < np.inf)
    value = special.fdtrc(*(np.where(inside, a, 1.0) for a in (dfn, dfd, x)))
    return _ruled(inside, value, ~ok | np.isnan(x), x <= 0, 1.0, 0.0)
