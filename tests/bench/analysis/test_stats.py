"""The statistics behind intervals and verdicts (dew.bench.analysis.stats), fed with figures drawn
from known distributions: a verdict must find a real difference, never call two draws of one
distribution faster or slower, mirror exactly when the sides swap, and say why it is undecided."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from dew.bench.analysis import stats

INTERLEAVED = stats.Noise(0.0, 0.0, math.inf, "no run level")
MIRROR = {"faster": "slower", "slower": "faster", "same": "same", "undecided": "undecided"}


def _figures(rng, centre: float, repeats: int, spread: float = 0.01) -> list[float]:
    """`repeats` processes' figures around `centre` (each process off by `spread`)."""
    return list(centre * np.exp(rng.normal(0, spread, repeats)))


def _verdict(diff: stats.Difference, p: float | None = None, band: float = 0.05) -> str:
    return stats.verdict(diff, diff.p_value if p is None else p, band=band, alpha=0.05)[0]


def _point(ratio: float, p: float | None = 1e-9) -> stats.Difference:
    """A difference with no spread left: its interval is the ratio itself."""
    return stats.Difference(ratio, ratio, ratio, 0.0, math.inf, p, (5, 5))


def test_holm_matches_the_step_down_definition():
    adjusted = stats.holm([0.01, 0.04, 0.03, None, 0.005])
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1 -> max(0.06, 0.04)=0.06
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, None, 0.02], nan_ok=True)
    assert stats.holm([0.5, 0.9]) == [1.0, 1.0]  # capped at 1, still monotone


# --- one row -------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_a_side_is_the_log_summary_of_the_figures():
    side = stats.side([10.0, 20.0, 40.0])
    assert side.mean == pytest.approx(math.log(20.0)) and side.n == 3
    assert side.var == pytest.approx(np.var(np.log([10, 20, 40]), ddof=1))
    assert stats.side([7.0]) == stats.Side(math.log(7.0), None, 1)
    for bad in ([], [0.0, 1.0], [-1.0], [math.inf]):
        with pytest.raises(ValueError):
            stats.side(bad)


def test_the_row_interval_holds_the_geometric_mean_and_narrows_with_more_repeats():
    rng = np.random.default_rng(1)
    few, many = _figures(rng, 10.0, 3, 0.05), _figures(rng, 10.0, 12, 0.05)
    for figures in (few, many):
        low, high = stats.row_interval(figures)
        assert low < math.exp(np.mean(np.log(figures))) < high
    assert np.subtract(*stats.row_interval(many)[::-1]) < np.subtract(
        *stats.row_interval(few)[::-1]
    )
    assert stats.row_interval([10.0]) is None  # one repeat: no interval at all


@pytest.mark.parametrize("repeats", [3, 5, 7])
def test_the_row_interval_covers_the_true_centre_95_percent_of_the_time(repeats):
    rng = np.random.default_rng(repeats)
    draws = 3000  # the rate's standard error is 0.4 points
    covered = 0
    for figures in 20.0 * np.exp(rng.normal(0, 0.08, (draws, repeats))):
        low, high = stats.row_interval(figures)
        covered += low <= 20.0 <= high
    assert 0.93 <= covered / draws <= 0.97


# --- two rows ------------------------------------------------------------------------------


def test_a_real_difference_is_slower_and_the_same_distribution_is_not():
    rng = np.random.default_rng(2)
    base = stats.side(_figures(rng, 10.0, 5))
    twice = stats.side(_figures(rng, 19.0, 5))
    again = stats.side(_figures(rng, 10.0, 5))
    slower = stats.compare_sides(twice, base, INTERLEAVED)
    same = stats.compare_sides(again, base, INTERLEAVED)
    p = stats.holm([slower.p_value, same.p_value])
    assert stats.verdict(slower, p[0], band=0.05, alpha=0.05) == ("slower", None)
    assert stats.verdict(same, p[1], band=0.05, alpha=0.05)[0] not in ("faster", "slower")
    assert 1.8 < slower.low < 1.9 < slower.high < 2.0 and slower.repeats == (5, 5)
    assert slower.ratio == pytest.approx(math.exp(twice.mean - base.mean), rel=1e-12)


def test_the_run_level_widens_the_interval_between_two_records():
    rng = np.random.default_rng(3)
    run, ref = stats.side(_figures(rng, 11.0, 5)), stats.side(_figures(rng, 10.0, 5))
    alone = stats.compare_sides(run, ref, INTERLEAVED)
    records = stats.compare_sides(run, ref, stats.Noise(0.03, 0.0, math.inf, "two runs"))
    assert records.ratio == alone.ratio
    assert records.se == pytest.approx(math.sqrt(alone.se**2 + 2 * 0.03**2))
    assert records.low < alone.low and records.high > alone.high
    assert _verdict(alone) == "slower" and _verdict(records) == "undecided"


def test_many_draws_of_one_distribution_are_never_faster_or_slower():
    rng = np.random.default_rng(4)
    noise = stats.Noise(0.02, 0.05, 20.0, "simulated")
    called = 0
    for _ in range(300):
        # each record has its own run level; the processes spread 5% around it
        run = 10.0 * math.exp(rng.normal(0, 0.02)) * np.exp(rng.normal(0, 0.05, 5))
        ref = 10.0 * math.exp(rng.normal(0, 0.02)) * np.exp(rng.normal(0, 0.05, 5))
        called += _verdict(stats.compare_sides(stats.side(run), stats.side(ref), noise)) in (
            "faster",
            "slower",
        )
    assert called <= 0.05 * 300


def test_differences_of_many_rows_at_once_match_one_row_at_a_time():
    rng = np.random.default_rng(5)
    noise = stats.Noise(0.02, 0.04, 12.0, "table")
    sides = [
        (stats.side(_figures(rng, 10.0, 5, 0.03)), stats.side(_figures(rng, 11.0, 3, 0.05))),
        (stats.side(_figures(rng, 10.0, 4, 0.03)), stats.side([12.0])),
        (stats.side([9.0]), stats.side(_figures(rng, 10.0, 6, 0.02))),
        (stats.side([9.0]), stats.side([10.0])),
    ]
    nan = float("nan")

    def column(which, name):
        value = [getattr(pair[which], name) for pair in sides]
        return [nan if v is None else v for v in value]

    out = stats.differences(
        column(0, "mean"), column(0, "var"), column(0, "n"),
        column(1, "mean"), column(1, "var"), column(1, "n"), noise,
    )  # fmt: skip
    for index, (run, ref) in enumerate(sides):
        one = stats.compare_sides(run, ref, noise)
        assert math.log(one.ratio) == pytest.approx(out["d"][index], rel=1e-12)
        assert math.log(one.low) == pytest.approx(out["low"][index], rel=1e-12)
        assert math.log(one.high) == pytest.approx(out["high"][index], rel=1e-12)
        assert one.se == pytest.approx(out["se"][index]) and one.p_value == pytest.approx(
            out["p"][index]
        )


@pytest.mark.parametrize("seed", range(6))
def test_swapping_the_sides_mirrors_ratio_interval_and_verdict(seed):
    rng = np.random.default_rng(seed)
    noise = stats.Noise(0.02, 0.06, 9.0, "table")
    seen = set()
    for truth in (0.5, 0.97, 1.0, 1.03, 2.0):
        n_run, n_ref = rng.choice([1, 2, 3, 5, 7], 2)
        run = stats.side(_figures(rng, 10.0 * truth, int(n_run), rng.uniform(0.005, 0.1)))
        ref = stats.side(_figures(rng, 10.0, int(n_ref), rng.uniform(0.005, 0.1)))
        ab, ba = stats.compare_sides(run, ref, noise), stats.compare_sides(ref, run, noise)
        assert ab.ratio * ba.ratio == pytest.approx(1, abs=1e-12)
        assert ab.low * ba.high == pytest.approx(1, abs=1e-12)
        assert ab.high * ba.low == pytest.approx(1, abs=1e-12)
        assert (ab.se, ab.df, ab.p_value) == (ba.se, ba.df, ba.p_value)
        assert ab.repeats == ba.repeats[::-1]
        swapped = {"run": "reference", "reference": "run"}
        assert ba.one_draw == swapped.get(ab.one_draw, ab.one_draw)
        assert _verdict(ba) == MIRROR[_verdict(ab)]
        seen.add(_verdict(ab))
    assert seen & {"faster", "slower"}  # the mirror was tested on a real change too


def test_a_one_process_reference_is_one_draw_with_a_prediction_interval():
    rng = np.random.default_rng(6)
    figures = _figures(rng, 10.0, 5, 0.03)
    run = stats.side(figures)
    one = stats.Side(math.log(10.5), None, 1)  # a published table: one process
    mean = stats.Side(math.log(10.5), run.var, 5)  # the same figure as a mean of five
    drawn = stats.compare_sides(run, one, INTERLEAVED)
    averaged = stats.compare_sides(run, mean, INTERLEAVED)
    assert drawn.one_draw == "reference" and averaged.one_draw is None
    assert drawn.ratio == averaged.ratio
    assert drawn.se == pytest.approx(math.sqrt(run.var * (1 / 5 + 1)))  # borrowed spread
    assert drawn.low < averaged.low and drawn.high > averaged.high
    assert stats.compare_sides(one, run, INTERLEAVED).one_draw == "run"


def test_one_process_on_both_sides_takes_the_noise_tables_process_level():
    run, ref = stats.Side(math.log(11.0), None, 1), stats.Side(math.log(10.0), None, 1)
    quiet = stats.compare_sides(run, ref, stats.Noise(0.0, 0.01, math.inf, "quiet"))
    noisy = stats.compare_sides(run, ref, stats.Noise(0.0, 0.10, math.inf, "noisy"))
    assert quiet.one_draw == noisy.one_draw == "both"
    assert quiet.se == pytest.approx(0.01 * math.sqrt(2))
    assert noisy.se == pytest.approx(0.10 * math.sqrt(2))
    assert _verdict(quiet) == "slower" and _verdict(noisy) == "undecided"
    with_run = stats.compare_sides(run, ref, stats.Noise(0.05, 0.10, math.inf, "both"))
    assert with_run.se == pytest.approx(math.sqrt(2 * 0.10**2 + 2 * 0.05**2))


# --- verdicts ------------------------------------------------------------------------------


def test_the_band_is_symmetric_in_log_space():
    floor, ceiling = stats.band_limits(0.05)
    assert (floor, ceiling) == (pytest.approx(1 / 1.05), pytest.approx(1.05))
    assert math.log(floor) == pytest.approx(-math.log(ceiling))
    assert _verdict(_point(1 / 1.05 - 1e-9)) == "faster"
    assert _verdict(_point(1 / 1.049)) == "same"
    assert _verdict(_point(1.05 + 1e-9)) == "slower"
    assert _verdict(_point(1.049)) == "same"
    # 0.951 was inside a band of [0.95, 1.05]; 1/0.951 = 1.0515 is beyond, and so is it.
    assert _verdict(_point(0.951)) == "faster" and _verdict(_point(1 / 0.951)) == "slower"


def test_beyond_the_band_but_not_significant_is_undecided():
    diff = stats.Difference(1.2, 1.1, 1.3, 0.04, 8.0, 0.01, (5, 5))
    verdict, why = stats.verdict(diff, 0.2, band=0.05, alpha=0.05)
    assert verdict == "undecided" and "not significant" in why and "0.2" in why
    assert stats.verdict(diff, 0.01, band=0.05, alpha=0.05) == ("slower", None)
    # The same row among twenty alike: Holm takes it over alpha.
    adjusted = stats.holm([0.01] * 20)
    assert adjusted[0] == pytest.approx(0.2)
    assert stats.verdict(diff, adjusted[0], band=0.05, alpha=0.05)[0] == "undecided"


def test_a_ratio_beyond_the_band_whose_interval_reaches_into_it_is_undecided():
    # The A/A row of causal_transformer: 0.83x, significant, its interval up to 0.953.
    reaches = stats.Difference(0.832, 0.759, 0.953, 0.06, 8.0, 0.01, (5, 5))
    verdict, why = stats.verdict(reaches, 0.04, band=0.05, alpha=0.05)
    assert verdict == "undecided" and "reaches into the band" in why and "0.759-0.953" in why
    clear = stats.Difference(0.8, 0.7, 0.9, 0.06, 8.0, 0.01, (5, 5))
    assert stats.verdict(clear, 0.04, band=0.05, alpha=0.05) == ("faster", None)
    inside = stats.Difference(1.01, 0.9, 1.12, 0.06, 8.0, 0.8, (5, 5))
    verdict, why = stats.verdict(inside, 0.8, band=0.05, alpha=0.05)
    assert verdict == "undecided" and why.startswith("inside the band, but its interval")
    tight = stats.Difference(1.01, 0.97, 1.04, 0.02, 8.0, 0.6, (5, 5))
    assert stats.verdict(tight, 0.6, band=0.05, alpha=0.05) == ("same", None)


def test_the_test_counts_repeats_not_steps():
    # A/A draws of one process-level distribution (10% between processes, 1% within): many
    # tight steps per repeat must not make two runs' processes look different. The repeat
    # figures are what compare_sides tests; the steps only feed the noise warnings.
    rng = np.random.default_rng(5)

    def processes(n):
        return [10.0 * (1 + rng.normal(0, 0.10)) * (1 + rng.normal(0, 0.01, 200)) for _ in range(n)]

    pooled, ours = [], []
    for _ in range(200):
        a, b = processes(5), processes(5)
        pooled.append(scipy_stats.mannwhitneyu(np.concatenate(a), np.concatenate(b)).pvalue)
        figures_a, figures_b = [s.mean() for s in a], [s.mean() for s in b]
        diff = stats.compare_sides(stats.side(figures_a), stats.side(figures_b), INTERLEAVED)
        ours.append(diff.p_value)
    assert np.mean(np.array(pooled) < 0.05) > 0.8  # the pooled steps call most pairs different
    assert np.mean(np.array(ours) < 0.05) < 0.10  # the repeat-level test keeps near its 5%


# --- what a comparison could detect --------------------------------------------------------


def _detect(repeats: int, run_level: float, tests: int = 1) -> stats.Detectable:
    side = stats.Side(0.0, 0.05**2, repeats)
    noise = stats.Noise(run_level, 0.05, 20.0, "table")
    return stats.detectable(side, side, noise, tests=tests, band=0.05, alpha=0.05)


def test_the_detectable_change_falls_with_repeats_down_to_its_floor():
    mdes = [_detect(n, 0.02).mde for n in (2, 3, 5, 10, 30)]
    assert mdes == sorted(mdes, reverse=True) and len(set(mdes)) == len(mdes)
    floor = _detect(5, 0.02).floor
    assert 0.05 < floor < mdes[-1]  # the run level keeps it above the band
    assert _detect(5, 0.0).floor == pytest.approx(0.05)  # interleaved: the band alone
    assert _detect(5, 0.02, tests=17).mde > _detect(5, 0.02).mde  # Holm's first step costs


def test_the_detectable_change_is_called_most_of_the_time():
    # At the row's MDE the verdict rule calls the change in about 80% of comparisons.
    rng = np.random.default_rng(7)
    noise = stats.Noise(0.0, 0.05, math.inf, "process only")
    change = stats.detectable(
        stats.Side(0.0, 0.05**2, 5), stats.Side(0.0, 0.05**2, 5), noise, tests=1, band=0.05,
        alpha=0.05,
    ).mde  # fmt: skip
    called = 0
    for _ in range(400):
        run = stats.side(np.exp(rng.normal(math.log1p(change), 0.05, 5)))
        ref = stats.side(np.exp(rng.normal(0, 0.05, 5)))
        called += _verdict(stats.compare_sides(run, ref, noise)) == "slower"
    assert 0.65 <= called / 400 <= 0.95


def test_no_number_of_repeats_detects_less_than_the_floor():
    # With a run level of few degrees of freedom (the A/A table's pooled df is a few) the
    # Welch-Satterthwaite df grows with the process part: the MDE is not monotone in the
    # repeats, so the floor is a minimum over them, never above what some repeats reach.
    noise = stats.Noise(0.04245, 0.10479, 3.49, "the committed table's pooled cpu level")
    side = stats.Side(0.0, 0.09**2, 5)
    detect = stats.detectable(side, side, noise, tests=4, band=0.05, alpha=0.05)
    assert detect.repeats_for(detect.mde) is not None  # five repeats a side reach it
    assert detect.mde >= detect.floor


def test_repeats_for_a_target_is_the_fewest_that_reach_it_or_none_below_the_floor():
    detect = _detect(3, 0.02)
    assert detect.repeats_for(detect.floor * 0.99) is None
    target = 0.15
    n = detect.repeats_for(target)
    assert n is not None and n > 3

    def at(k: int) -> stats.Detectable:
        return stats.Detectable(detect.var, 2.0 * (k - 1), (k, k), detect.noise, 1, 0.05, 0.05)

    assert at(n).mde <= target < at(n - 1).mde
    assert _detect(3, 0.0).repeats_for(0.5) == 2  # an easy target: the fewest possible


# --- paired rounds -------------------------------------------------------------------------


def _paired(a, b) -> stats.Paired:
    """One case's rounds through judge.paired_arrays, the test `dew ab` runs."""
    from dew.bench.analysis import judge

    return judge.paired(a, b)


def test_paired_rounds_find_a_constant_overhead():
    rng = np.random.default_rng(5)
    bare = 10 * (1 + rng.normal(0, 0.05, 7))  # the host's hour moves both sides
    tool = bare * 1.10 * (1 + rng.normal(0, 0.005, 7))
    result = _paired(tool, bare)
    assert result.ratio == pytest.approx(1.10, abs=0.01) and result.rounds == 7
    assert result.low < 1.10 < result.high and result.p_value < 1e-6
    diff = result.difference()
    assert (diff.ratio, diff.low, diff.high, diff.df) == (result.ratio, result.low, result.high, 6)
    assert stats.verdict(diff, result.p_value, band=0.05, alpha=0.05) == ("slower", None)
    assert result.detectable(tests=1, band=0.05, alpha=0.05).mde < 0.10
    # Unpaired, the host's 5% between rounds hides the same 10%.
    unpaired = stats.compare_sides(stats.side(tool), stats.side(bare), INTERLEAVED)
    assert unpaired.high - unpaired.low > 5 * (result.high - result.low)


def test_one_paired_round_has_no_p_and_rounds_without_a_spread_are_exact():
    assert _paired([11.0], [10.0]).p_value is None
    flat = _paired([11.0, 22.0], [10.0, 20.0])  # issue 51: no NaN, no missing p
    assert flat.p_value == 0.0 and flat.ratio == pytest.approx(1.1) == flat.low == flat.high


# --- noise warnings -------------------------------------------------------------------------


def test_noise_warnings_name_the_spread_and_a_disagreeing_repeat():
    rng = np.random.default_rng(4)
    noisy = [list(10 * (1 + rng.normal(0, 0.3, 50))) for _ in range(3)]
    warnings = stats.noise_warnings([10.0, 10.2, 14.0], noisy)
    assert any("wide spread" in w for w in warnings)
    assert any(w.startswith("repeat 3 reads 14") for w in warnings)
    assert stats.noise_warnings([10.0], [[10.0, 10.1, 9.9]]) == []
    two = stats.noise_warnings([10.0, 10.0], [[10.0], [10.0]])
    assert any(w.startswith("2 repeats: their spread is a guess") for w in two)


# --- the host's drift ------------------------------------------------------------------------


def test_the_host_drift_is_the_ratio_of_the_probe_medians_with_an_interval():
    rng = np.random.default_rng(9)
    run = 264 * (1 + rng.normal(0, 0.01, 6))
    reference = 300 * (1 + rng.normal(0, 0.01, 6))
    host = stats.drift(run, reference)
    assert host.ratio == pytest.approx(np.median(run) / np.median(reference))
    assert host.low <= host.ratio <= host.high and host.high - host.low < 0.05
    assert host.readings == (6, 6)
    assert stats.drift(run, reference) == host  # seeded from the readings: deterministic
    single = stats.drift([264.0], [300.0])  # one reading a side: the point is the interval
    assert single.low == single.ratio == single.high == pytest.approx(0.88)
    with pytest.raises(ValueError):
        stats.drift([], [300.0])


@pytest.mark.parametrize("seed", range(4))
def test_the_drift_interval_mirrors_exactly_when_the_sides_swap(seed):
    rng = np.random.default_rng(seed)
    run = 264 * (1 + rng.normal(0, 0.03, rng.integers(2, 9)))
    reference = 300 * (1 + rng.normal(0, 0.03, rng.integers(2, 9)))
    ab, ba = stats.drift(run, reference), stats.drift(reference, run)
    assert ab.ratio * ba.ratio == pytest.approx(1, abs=1e-12)
    assert ab.low * ba.high == pytest.approx(1, abs=1e-12)
    assert ab.high * ba.low == pytest.approx(1, abs=1e-12)
    assert ab.readings == ba.readings[::-1]


def test_a_change_must_clear_the_band_around_the_drift():
    host = stats.drift([264.0, 265.0, 263.0], [300.0, 301.0, 299.0])  # ~0.88
    floor, ceiling = stats.drift_band(host, 0.05)
    assert floor == pytest.approx(host.ratio / 1.05)  # symmetric in log space around h
    assert ceiling == pytest.approx(host.ratio * 1.05)
    assert not stats.beyond_drift(0.72, 0.92, 0.878, host, 0.05)  # the A/A row of issue 17
    assert stats.beyond_drift(0.45, 0.55, 0.5, host, 0.05)
    # Slower while the host ran faster: the drift does not explain it.
    assert stats.beyond_drift(1.1, 1.3, 1.2, host, 0.05)
    steady = stats.drift([300.0], [300.0])
    assert not stats.beyond_drift(1.04, 1.3, 1.2, steady, 0.05)
    assert stats.beyond_drift(1.06, 1.3, 1.2, steady, 0.05)
    assert stats.beyond_drift(0.7, 0.94, 0.8, steady, 0.05)
    assert not stats.beyond_drift(0.7, 0.96, 0.8, steady, 0.05)  # 0.96 > 1/1.05
