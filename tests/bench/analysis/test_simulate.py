"""Issue 59's goals for the verdicts, on simulated comparisons of known truth run through the
code compare runs (dew.bench.analysis.simulate): rows of mixed noise as on the v5e (0.05% to
5%), their levels drifted 3x and 10x beyond their history, an outlier repeat, a busy side."""

import math

import numpy as np
import pytest

from dew.bench.analysis import calibration, comparison, outliers
from dew.bench.analysis.levels import row_noise, spread
from dew.bench.analysis.repeats import step_repeat, summarize_step
from dew.bench.analysis.simulate import simulate
from dew.bench.common.files import REPO_ROOT
from dew.bench.record.schema import read_run

TRIALS = 1500
ALLOWED = 0.05 + 2 * math.sqrt(0.05 * 0.95 / TRIALS)  # 5%, less two simulation errors
THREE = ("3 vs 3", 3, 3)


@pytest.mark.parametrize("regime", [calibration.MIXED, calibration.MIXED_UNSEEN],
                         ids=lambda r: r.name)  # fmt: skip
@pytest.mark.parametrize("drift", calibration.DRIFTS)
def test_rows_of_mixed_noise_hold_the_goals_whatever_the_drift(regime, drift):
    # At ec83e06 an 18-case A/A pair of such rows read NOT REPRODUCED 31% of the time at
    # 3 v 3 (the rows without history shrunk with 20 df toward the quiet rows' 0.045%).
    null = simulate(regime, calibration.MIXED_RECORDS, THREE, 0.0, trials=TRIALS, drift=drift)
    assert null.not_reproduced <= ALLOWED, null
    three = simulate(regime, calibration.MIXED_RECORDS, THREE, 0.03, trials=TRIALS, drift=drift)
    assert three.reproduced <= ALLOWED, three  # a +3% change never passes as the same
    # a device-bound row 5% slower is found: at 6538a3d 58% at 3x (the simulated history
    # weighed rows 100x apart in noise alike, the quiet rows' run levels the noisy ones'),
    # 2% at 10x (the median of rows ten times noisier too wide to judge it against). Where
    # only 4 rows have history, 10x still falls short (75%: docs/calibration.md).
    if drift <= 3.0 or regime is calibration.MIXED:
        five = simulate(regime, calibration.MIXED_RECORDS, THREE, 0.05, trials=TRIALS,
                        drift=drift)  # fmt: skip
        assert five.power >= 0.8, five


@pytest.mark.parametrize("regime", [calibration.MIXED, calibration.MIXED_UNSEEN],
                         ids=lambda r: r.name)  # fmt: skip
def test_one_process_a_side_on_a_host_three_times_noisier_than_its_history(regime):
    # a published table against one run: no row's repeats can show the drift, the 18 rows'
    # spread can (at 6538a3d: 80.8% false NOT REPRODUCED where every row has history)
    one = ("1 vs 1", 1, 1)
    null = simulate(regime, calibration.MIXED_RECORDS, one, 0.0, trials=TRIALS, drift=3.0)
    assert null.not_reproduced <= ALLOWED, null
    five = simulate(regime, calibration.MIXED_RECORDS, one, 0.05, trials=TRIALS)
    assert five.power >= 0.8, five  # and at the history's own noise still found


def test_one_repeat_off_is_named_and_never_called_a_change():
    off = simulate(calibration.MIXED, 3, THREE, 0.0, trials=TRIALS, outlier=calibration.OUTLIER)
    assert off.flagged >= 0.95 and off.not_reproduced <= ALLOWED, off
    clean = simulate(calibration.MIXED, 3, THREE, 0.0, trials=TRIALS)
    assert clean.flagged <= outliers.ALPHA + 2 * math.sqrt(outliers.ALPHA / TRIALS), clean


def test_a_busy_side_holds_back_what_it_could_have_made():
    cpu, mixed = calibration.REGIMES[0], calibration.MIXED
    # a burner beside 3 of 4 rows of the run, those rows twice as slow: without the bound
    # the clean row reads faster against the moved median
    burner = calibration.simulate_busy("run", cpu, 1.0, 1.0, skip_first=True)
    held = simulate(cpu, 8, THREE, 0.0, trials=TRIALS, busy=burner)
    bare = simulate(cpu, 8, THREE, 0.0, trials=TRIALS,
                    busy=burner.__class__(burner.side, burner.rows, 1.0, 0.0))  # fmt: skip
    assert held.not_reproduced <= ALLOWED < bare.not_reproduced, (held, bare)
    # a busy reference as slow as its bound, a real +30%: never REPRODUCED
    reference = calibration.simulate_busy("reference", cpu, 1.0, 1.0)
    masked = simulate(cpu, 8, THREE, 0.30, trials=TRIALS, busy=reference)
    assert masked.reproduced == 0.0
    # the lease's agent beside every repeat of both sides: an A/A pair reads no change, a
    # row 10% slower is found (at ec83e06 any busy run repeat held back every `slower`)
    agent = calibration.simulate_busy("both", mixed, calibration.AGENT, calibration.AGENT)
    assert simulate(mixed, 3, THREE, 0.0, trials=TRIALS, busy=agent).not_reproduced <= ALLOWED
    found = simulate(mixed, 3, THREE, 0.10, trials=TRIALS, busy=agent)
    assert found.power >= 0.8 and found.reproduced == 0.0, found


def test_the_spread_of_row_levels_is_read_as_limma_reads_it():
    rng = np.random.default_rng(4)
    truth = 0.01**2 * 4 / rng.chisquare(4, (400, 60))  # rows' levels, a prior of 4 df
    var = truth * rng.chisquare(6, truth.shape) / 6
    s0, d0 = spread.fit_spread(var, np.full(60, 6.0))
    assert np.median(d0) == pytest.approx(4, rel=0.25)
    assert math.sqrt(np.median(s0)) == pytest.approx(0.01, rel=0.1)
    same = 0.0005**2 * rng.chisquare(6, (400, 18)) / 6  # rows alike: d0 large or inf
    _, d0 = spread.fit_spread(same, np.full(18, 6.0))
    assert np.mean(d0 > 15) > 0.7


def test_a_prior_may_widen_what_the_repeats_show_never_narrow_it():
    # a row 10x noisier today than its history: its repeats' level, not the history's
    var, _ = row_noise.moderated(np.array([[0.01]]), 3, np.array([[0.01]]), 3, 0.01, 20.0)
    assert var[0, 0] == pytest.approx(0.01)
    # one row of many so: its repeats stand alone
    rows = np.array([[0.01] + [1e-4] * 17])
    var, df = row_noise.moderated(rows, 3, rows, 3, np.full(18, 0.01), 20.0)
    assert var[0, 0] == pytest.approx(0.01) and df[0, 0] == 4
    # every row 3x noisier: each row's prior scaled by today's pooled level first
    rows = np.full((1, 18), 9e-6)
    var, _ = row_noise.moderated(rows, 3, rows, 3, np.full(18, 0.001), 20.0)
    assert np.all(var > 5e-6)
    # a row as its history says keeps the history's weight
    var, df = row_noise.moderated(np.array([[1e-6]]), 3, np.array([[0.9e-6]]), 3, 0.001, 20.0)
    assert df[0, 0] == 24


TABLE = REPO_ROOT / "results/runs/20261206T162051Z-small-tpu-v5e-04f0382/step.json"


def _drawn_like(record, seed: int, repeats: int):
    """An A/A partner of the v5e's 18-case table: each row drawn around its own level with
    its own repeats' spread (flux_transformer's 4.8%, diffusion_gemma's 0.01%), its run
    level 40% of that."""
    rng = np.random.default_rng(seed)
    rows = []
    for row in record.rows:
        logs = np.log([r.ms_per_step for r in row.repeats])
        spread_ = max(float(np.std(logs, ddof=1)), 1e-4)
        centre = float(np.mean(logs)) + rng.normal(0, 0.4 * spread_)
        drawn = [step_repeat(math.exp(centre + rng.normal(0, spread_)), [1.0], None)
                 for _ in range(repeats)]  # fmt: skip
        rows.append(summarize_step(row, drawn))
    return record.model_copy(update={"rows": rows})


@pytest.mark.parametrize("repeats", [1, 3])
def test_an_18_case_aa_pair_of_rows_at_their_own_noise_never_reads_a_change(repeats):
    # At ec83e06 (14 rows without history shrunk with 20 df toward the four device-bound
    # rows' 0.045%) these pairs read NOT REPRODUCED 17 of 20 times at 1 v 1, 10 at 3 v 3.
    table = read_run(TABLE)
    outcomes = [comparison.compare(_drawn_like(table, seed, repeats),
                                   _drawn_like(table, 100 + seed, repeats)).outcome
                for seed in range(10)]  # fmt: skip
    assert "NOT REPRODUCED" not in outcomes, outcomes


def test_a_repeat_off_in_a_real_record_is_named_in_the_first_line():
    # the float32 run of 4a3ac6a: hybrid_dit's third repeat 6.85 ms against 6.09 and 6.09
    from dew.bench.analysis import compare_report

    runs = REPO_ROOT / "results" / "runs"
    run = read_run(runs / "20261206T132422Z-small-f32-tpu-v5e-4a3ac6a" / "step.json")
    ref = read_run(runs / "20261206T161309Z-small-aa1-tpu-v5e-04f0382" / "step.json")
    cmp = comparison.compare(run, ref)
    line = compare_report.headline(cmp)
    assert "A repeat stands out: hybrid_dit repeat 3 of 3 in the run reads +12.4%" in line, line
    assert "more repeats of that row" in line
    assert [(o.label, o.side, o.index) for o in cmp.outliers] == [("hybrid_dit", "run", 3)]
    row = next(r for r in cmp.counted if r.label == "hybrid_dit")
    assert any("kept, and named" in note for note in row.notes)
