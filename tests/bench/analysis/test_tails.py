"""The t, normal and F quantiles and tails (dew.bench.analysis.tails) against
scipy.stats, whose figures they must give: compare's verdicts, the noise and the calibration
rest on them."""

from __future__ import annotations

import numpy as np
from scipy import stats as scipy_stats

from dew.bench.analysis import tails

# The tails compare and the calibration use, at every edge scipy.stats rules on: a quantile
# of 0 or 1, an invalid shape, an infinite df, a point at or beyond the support's ends, NaN.
QUANTILES = [np.nan, -0.1, 0.0, 1e-300, 1e-12, 0.05, 0.1, 0.5, 0.9, 0.95, 0.975, 1 - 1e-16, 1.0,
             1.1]  # fmt: skip
SHAPES = [np.nan, -1.0, 0.0, 1e-9, 0.5, 1.0, 2.0, 3.7, 30.0, 1e9, np.inf]
POINTS = [np.nan, -np.inf, -40.0, -2.0, -0.0, 0.0, 1e-300, 0.3, 1.0, 2.5, 40.0, 1e12, np.inf]


def _same_figures(ours, theirs):
    """Equal value for value, NaN where NaN, the same sign of a zero, the same shape."""
    assert np.shape(ours) == np.shape(theirs)
    np.testing.assert_array_equal(ours, theirs)
    assert np.array_equal(np.signbit(ours), np.signbit(theirs))


def test_the_tails_are_scipy_stats_figures_at_every_edge():
    q, df = np.meshgrid(QUANTILES, SHAPES)
    _same_figures(tails.t_ppf(q, df), scipy_stats.t.ppf(q, df))
    _same_figures(tails.norm_ppf(np.array(QUANTILES)), scipy_stats.norm.ppf(QUANTILES))
    x, df = np.meshgrid(POINTS, SHAPES)
    _same_figures(tails.t_sf(x, df), scipy_stats.t.sf(x, df))
    x, dfn, dfd = np.meshgrid(POINTS, SHAPES, SHAPES)
    _same_figures(tails.f_sf(x, dfn, dfd), scipy_stats.f.sf(x, dfn, dfd))
    # a scalar in, a numpy scalar out, as scipy.stats gives
    for ours, theirs in [(tails.t_ppf(0.975, 4.0), scipy_stats.t.ppf(0.975, 4.0)),
                         (tails.norm_ppf(0.9), scipy_stats.norm.ppf(0.9)),
                         (tails.t_sf(1.5, 7.0), scipy_stats.t.sf(1.5, 7.0)),
                         (tails.f_sf(2.0, 3.0, 9.0), scipy_stats.f.sf(2.0, 3.0, 9.0))]:  # fmt: skip
        assert type(ours) is type(theirs) and ours == theirs
