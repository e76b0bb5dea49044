"""The statistics behind intervals and verdicts (dew.bench.analysis.stats), fed with samples drawn
from known distributions: a verdict must find a real difference, call two draws of one
distribution `same` or `undecided`, and never `faster`/`slower` without enough evidence."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from dew.bench.analysis import stats


def _groups(rng, centre: float, repeats: int, steps: int, spread: float = 0.02):
    """`repeats` processes of `steps` step times around `centre` (1% process jitter)."""
    out = []
    for _ in range(repeats):
        level = centre * (1 + rng.normal(0, 0.01))
        out.append(level * (1 + rng.normal(0, spread, steps)))
    return out


def test_holm_matches_the_step_down_definition():
    adjusted = stats.holm([0.01, 0.04, 0.03, None, 0.005])
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1 -> max(0.06, 0.04)=0.06
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, None, 0.02], nan_ok=True)


def test_the_interval_covers_the_figure_and_narrows_with_more_samples():
    rng = np.random.default_rng(1)
    few = _groups(rng, 10.0, 3, 10)
    many = _groups(rng, 10.0, 9, 200)
    for groups in (few, many):
        low, high = stats.interval(groups)
        assert low <= stats.figure(groups) <= high
    assert np.subtract(*stats.interval(many)[::-1]) < np.subtract(*stats.interval(few)[::-1])


def test_a_real_difference_is_slower_and_the_same_distribution_is_not():
    rng = np.random.default_rng(2)
    base = _groups(rng, 10.0, 5, 20)
    twice = _groups(rng, 19.0, 5, 20)
    again = _groups(rng, 10.0, 5, 20)
    slower = stats.repeat_ratio(twice, base)
    same = stats.repeat_ratio(again, base)
    p = stats.holm([slower.p_value, same.p_value])
    assert stats.verdict(slower, p[0], band=0.05, alpha=0.05) == ("slower", None)
    assert stats.verdict(same, p[1], band=0.05, alpha=0.05)[0] in ("same", "undecided")
    assert slower.low > 1.8 and slower.high < 2.0


def test_too_few_repeats_is_undecided_whatever_the_ratio():
    rng = np.random.default_rng(3)
    comparison = stats.repeat_ratio(_groups(rng, 20.0, 1, 50), _groups(rng, 10.0, 1, 50))
    verdict, why = stats.verdict(comparison, 1e-9, band=0.05, alpha=0.05)
    assert verdict == "undecided" and "too few repeats" in why


def test_beyond_the_band_but_not_significant_is_undecided():
    comparison = stats.RepeatRatio(ratio=1.2, low=1.1, high=1.3, p_value=0.2, repeats=(5, 5))
    verdict, why = stats.verdict(comparison, 0.2, band=0.05, alpha=0.05)
    assert verdict == "undecided" and "not significant" in why


def test_the_test_counts_repeats_not_steps():
    # A/A draws of one process-level distribution (10% between processes, 1% within): many
    # tight steps per repeat must not make two runs' processes look different.
    rng = np.random.default_rng(5)

    def processes(n):
        return [10.0 * (1 + rng.normal(0, 0.10)) * (1 + rng.normal(0, 0.01, 200)) for _ in range(n)]

    pooled, ours = [], []
    for _ in range(200):
        a, b = processes(5), processes(5)
        pooled.append(scipy_stats.mannwhitneyu(np.concatenate(a), np.concatenate(b)).pvalue)
        ours.append(stats.repeat_test(a, b))
    pooled_rate = np.mean(np.array(pooled) < 0.05)
    ours_rate = np.mean(np.array(ours) < 0.05)
    assert pooled_rate > 0.8  # a test on the pooled steps calls most A/A pairs different
    assert ours_rate < 0.10  # the repeat-level test keeps near its 5%


def test_a_ratio_beyond_the_band_whose_interval_reaches_into_it_is_undecided():
    # The A/A row of causal_transformer: 0.83x, significant, its interval up to 0.953.
    comparison = stats.RepeatRatio(ratio=0.832, low=0.759, high=0.953, p_value=0.01, repeats=(5, 5))
    verdict, why = stats.verdict(comparison, 0.04, band=0.05, alpha=0.05)
    assert verdict == "undecided" and "reaches into the band" in why
    clear = stats.RepeatRatio(ratio=0.8, low=0.7, high=0.9, p_value=0.01, repeats=(5, 5))
    assert stats.verdict(clear, 0.04, band=0.05, alpha=0.05) == ("faster", None)


def test_a_reference_without_samples_gets_a_band_verdict():
    comparison = stats.RepeatRatio(ratio=0.9, low=None, high=None, p_value=None, repeats=(5, 0))
    assert stats.verdict(comparison, None, band=0.05, alpha=0.05) == ("faster", None)


def test_noise_warnings_name_the_spread_and_a_disagreeing_repeat():
    rng = np.random.default_rng(4)
    noisy = [list(10 * (1 + rng.normal(0, 0.3, 50))) for _ in range(3)]
    warnings = stats.noise_warnings([10.0, 10.2, 14.0], noisy)
    assert any("wide spread" in w for w in warnings)
    assert any(w.startswith("repeat 3 reads 14") for w in warnings)
    assert stats.noise_warnings([10.0], [[10.0, 10.1, 9.9]]) == []
    assert any("too few" in w for w in stats.noise_warnings([10.0, 10.0], [[10.0], [10.0]]))


def test_paired_rounds_find_a_constant_overhead():
    rng = np.random.default_rng(5)
    bare = 10 * (1 + rng.normal(0, 0.05, 31))
    tool = bare * 1.03 * (1 + rng.normal(0, 0.002, 31))
    result = stats.paired(tool, bare)
    assert result.low < 1.03 < result.high and result.p_value < 1e-6


def test_the_host_drift_is_the_ratio_of_the_probe_medians_with_an_interval():
    rng = np.random.default_rng(9)
    run = 264 * (1 + rng.normal(0, 0.01, 6))
    reference = 300 * (1 + rng.normal(0, 0.01, 6))
    host = stats.drift(run, reference)
    assert host.ratio == pytest.approx(np.median(run) / np.median(reference))
    assert host.low <= host.ratio <= host.high and host.high - host.low < 0.05
    assert host.readings == (6, 6)
    single = stats.drift([264.0], [300.0])  # one reading a side: the point is the interval
    assert single.low == single.ratio == single.high == pytest.approx(0.88)
    with pytest.raises(ValueError):
        stats.drift([], [300.0])


def test_a_change_must_clear_the_band_around_the_drift():
    host = stats.drift([264.0, 265.0, 263.0], [300.0, 301.0, 299.0])  # ~0.88
    floor, ceiling = stats.drift_band(host, 0.05)
    assert floor == pytest.approx(host.ratio * 0.95)
    assert ceiling == pytest.approx(host.ratio * 1.05)
    explained = stats.RepeatRatio(0.878, 0.72, 0.92, 0.001, (5, 5))  # the A/A row of issue 17
    assert not stats.beyond_drift(explained, host, 0.05)
    beyond = stats.RepeatRatio(0.5, 0.45, 0.55, 0.001, (5, 5))
    assert stats.beyond_drift(beyond, host, 0.05)
    # Slower while the host ran faster: the drift does not explain it.
    assert stats.beyond_drift(stats.RepeatRatio(1.2, 1.1, 1.3, 0.001, (5, 5)), host, 0.05)
    steady = stats.drift([300.0], [300.0])
    assert not stats.beyond_drift(stats.RepeatRatio(1.2, 1.04, 1.3, 0.001, (5, 5)), steady, 0.05)
    assert stats.beyond_drift(stats.RepeatRatio(1.2, None, None, None, (1, 1)), steady, 0.05)


@pytest.mark.parametrize("repeats", [1, 2, 3, 4, 7])
def test_replicates_are_the_median_of_resampled_means_exactly(repeats):
    """The bootstrap's fast loop gives exactly what np.median of np.mean gives, draw by draw."""
    source = np.random.default_rng(repeats)
    groups = [source.normal(10, 1, size) for size in (1, 5, 20, 100, 3, 8, 2)[:repeats]]

    def by_definition(rng):
        out = np.empty(stats.RESAMPLES)
        for index in range(stats.RESAMPLES):
            drawn = rng.integers(0, repeats, repeats)
            means = [
                groups[i][rng.integers(0, groups[i].size, groups[i].size)].mean() for i in drawn
            ]
            out[index] = np.median(means)
        return out

    fast = stats.replicates(groups, np.random.default_rng(0))
    assert np.array_equal(fast, by_definition(np.random.default_rng(0)))
