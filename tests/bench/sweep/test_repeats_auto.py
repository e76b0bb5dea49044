"""--repeats auto: rounds are added until each row could detect --target-mde, the cap, or
the run level makes the target unreachable; every row says why it stopped."""

from __future__ import annotations

import numpy as np
import pytest

from dew.bench.analysis import stats
from dew.bench.analysis.repeats import auto_stop, step_repeat, summarize_step
from dew.bench.record.schema import StepRow
from dew.bench.sweep import run as step
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options, settings_record

QUIET = stats.Noise(0.0, 0.01, np.inf, "test: no run level")
NOISY = stats.Noise(0.05, 0.10, 20.0, "test: 5% run level")


def _row(figures) -> StepRow:
    template = StepRow(architecture="simple_dit", case={"batch": 8}, status="ok", ms_per_step=1.0)
    repeats = [step_repeat(value, [value] * 3, 1.0) for value in figures]
    return summarize_step(template, repeats)


def test_a_steady_row_stops_once_its_mde_reaches_the_target():
    assert auto_stop(_row([10.0, 10.1]), QUIET, tests=2, target=0.2) is None  # 2: too few
    why = auto_stop(_row([10.0, 10.1, 9.95]), QUIET, tests=2, target=0.2)
    assert why is not None and why.startswith("MDE ") and "<= target 20% at 3 repeats" in why


def test_a_noisy_row_goes_on_until_its_spread_allows_the_target():
    rng = np.random.default_rng(0)
    figures = list(10 * np.exp(rng.normal(0, 0.10, 3)))
    assert auto_stop(_row(figures), QUIET, tests=17, target=0.25) is None
    more = list(10 * np.exp(rng.normal(0, 0.10, 40)))
    assert "<= target 25%" in auto_stop(_row(more), QUIET, tests=17, target=0.25)


def test_a_target_under_the_run_levels_floor_stops_at_once_and_says_so():
    why = auto_stop(_row([10.0, 10.1, 9.95]), NOISY, tests=17, target=0.05)
    assert "the run level (5.0%) keeps it above" in why and "over the target 5%" in why


def test_a_failed_row_stops():
    failed = StepRow(architecture="simple_dit", case={"batch": 8}, status="failed", error="x")
    assert auto_stop(failed, QUIET, tests=1, target=0.2) == "failed"


def test_the_record_keeps_auto_and_the_cap():
    options = Options(preset="cpu-smoke", repeats="auto", target_mde=20.0, max_repeats=6)
    settings = settings_record(options, [Case(architecture="simple_dit", batch=8)])
    assert settings.repeats == 6
    assert settings.options["repeats"] == "auto" and settings.options["target_mde"] == 20.0
    plain = settings_record(Options(preset="cpu-smoke", repeats=3), [])
    assert plain.repeats == 3 and "target_mde" not in plain.options


@pytest.mark.slow  # real compiles: CI's slow tier
def test_a_real_sweep_stops_each_row_and_records_why(tmp_path):
    out = tmp_path / "run.json"
    cases = [Case(architecture="simple_dit", batch=8)]
    options = Options(
        preset="cpu-smoke", steps=3, warmup=0, mesh={"fsdp": 8, "min_shard_size": 256},
        isolate=False, repeats="auto", target_mde=1.0, max_repeats=5,
        compilation_cache_dir=str(tmp_path / "cache"),
    )  # fmt: skip
    lines = []
    record = step.run(options, cases, json_out=str(out), log=lines.append)
    (row,) = record.rows
    # 1% is under this host's run level (results/noise.json): more repeats cannot reach it,
    # so the row stops at the first judgement, three repeats, and says why.
    assert len(row.repeats) == 3
    assert (
        row.warnings[-1].startswith("repeats auto: MDE ")
        and "whatever the repeats" in (row.warnings[-1])
    )
    assert any(line.startswith("[auto] simple_dit: stops:") for line in lines)


def test_auto_runs_each_case_in_fresh_compiles_like_any_repeats():
    # case_run turns the persistent cache off for repeated cases: auto is repeated
    assert Options(repeats="auto", target_mde=20.0).repeated
    assert Options(repeats=3).repeated and not Options(repeats=1).repeated
