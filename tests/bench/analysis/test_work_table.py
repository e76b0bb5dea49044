"""The work count on a row and in the step table: beside GFLOP/step and util where it
departs from them (a mixture of experts on a TPU), the seed's table where it does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from dew.bench.analysis import tables
from dew.bench.analysis.repeats import step_repeat, summarize_step
from dew.bench.sweep import case_run
from dew.bench.sweep.presets import Case
from dew.bench.sweep.program_labels import flop_figures
from dew.telemetry.instrumentation import hlo_flops, mfu

FIXTURES = Path(__file__).parents[2] / "telemetry" / "fixtures"
MOE = Case(architecture="causal_transformer", batch=8, moe=True)
TIMED = {"ms_per_step": 0.01, "p10_ms": 0.01, "p50_ms": 0.01, "p90_ms": 0.01}
V5E = "TPU v5 lite"


def timed_row(fixture: str, case: Case = MOE):
    """A row of the fixture's program as the timing would leave it, at 0.01 ms on a v5e."""
    figures = {**flop_figures(hlo_flops((FIXTURES / fixture).read_text())), **TIMED}
    for count, util in (("gflop_per_step", "util"), ("work_gflop_per_step", "work_util")):
        figures[util] = mfu(figures[count] * 1e9, TIMED["ms_per_step"] / 1e3, V5E)
    return case_run.make_row(case, figures, status="ok")


def test_a_moe_row_records_both_counts_and_the_table_shows_both():
    row = timed_row("tpu_moe_layer.hlo")
    assert row.gflop_per_step == pytest.approx(0.050528256)  # every expert's rows
    assert row.work_gflop_per_step == pytest.approx(0.009633792)  # the rows routed
    assert row.work_uncounted_custom_calls["tpu_custom_call"] == 1
    assert row.work_util == pytest.approx(row.util * 9_633_792 / 50_528_256)
    header, line = tables.step_table([row]).strip().splitlines()
    cells = dict(zip(header.split("\t"), line.split("\t"), strict=False))
    assert cells["GFLOP/step"] == "0.0505" and cells["work GFLOP"] == "0.00963"
    assert cells["util"] == tables.percent(row.util)
    assert cells["work util"] == tables.percent(row.work_util)
    compile_only = tables.step_table([row], compile_only=True).splitlines()[0].split("\t")
    assert compile_only[4:6] == ["GFLOP/step", "work GFLOP"]


def test_where_the_counts_agree_the_table_is_the_seeds():
    row = timed_row("cublas_gemm.hlo", Case(architecture="simple_dit", batch=16))
    assert row.work_gflop_per_step == row.gflop_per_step
    assert tuple(tables.step_table([row]).splitlines()[0].split("\t")) == tables.STEP_HEADERS


def test_repeats_scale_the_work_util_with_the_step_time_as_they_do_util():
    row = timed_row("tpu_moe_layer.hlo")
    repeats = [step_repeat(ms, [ms] * 3, 1.0) for ms in (0.02, 0.02, 0.02)]
    summary = summarize_step(row, repeats)
    assert summary.util == pytest.approx(row.util / 2)
    assert summary.work_util == pytest.approx(row.work_util / 2)
