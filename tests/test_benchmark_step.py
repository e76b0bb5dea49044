"""One cpu-smoke case through tools/benchmark_step.py, end to end, the way a user runs it:
the tool keeps working against the Trainer internals it drives."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dew.bench.record.schema import read_run

REPO = Path(__file__).resolve().parents[1]


def test_one_cpu_smoke_case_end_to_end(tmp_path):
    out = tmp_path / "smoke.json"
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
    }
    command = [
        sys.executable,
        "tools/benchmark_step.py",
        "--preset", "cpu-smoke",
        "--architectures", "simple_dit",
        "--steps", "2",
        "--warmup", "1",
        "--json-out", str(out),
        "--compilation-cache-dir", str(tmp_path / "cache"),
        "--idle-check", "off",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]

    (row,) = read_run(out).rows
    assert row.status == "ok" and row.error is None
    assert (row.architecture, row.batch, row.sample) == ("simple_dit", 8, "16x16x3")
    assert row.params > 0 and row.gflop_per_step > 0 and row.compile_s > 0
    assert row.p10_ms <= row.p50_ms <= row.p90_ms and row.ms_per_step > 0
    assert row.samples_per_s == pytest.approx(8 / (row.ms_per_step / 1e3))
    assert row.loss_finite and math.isfinite(row.loss)
    assert row.util is None and row.peak_gib is None  # a CPU has no peak FLOP/s, no allocator
    assert row.compiler_peak_gib > 0

    (progress,) = [line for line in done.stderr.splitlines() if line.startswith("[1/1]")]
    assert "simple_dit: ok" in progress
    header, line, phases = done.stdout.strip().splitlines()
    assert header.startswith("architecture\tsample\tbatch\tparams\tms/step")
    assert line.split("\t")[:3] == ["simple_dit", "16x16x3", "8"]
    # The table ends with where the time went (schema 3: the repeat's phases).
    names = [phase.name for phase in row.repeats[0].phases]
    assert names[:2] == ["imports", "trace_lower"] and names[-2:] == ["warmup", "timed"]
    assert names[2] in ("compile", "load") and "init" in names
    assert phases.startswith("# phases (s, summed over 1 rows' processes): imports ")


# --- the row a case builds, phase by phase (dew.bench.sweep.case_run.Figures) ---------------


def test_a_misspelt_figure_fails_at_the_line_that_writes_it():
    from dew.bench.sweep.case_run import Figures

    figures = Figures()
    figures.compiler_peak_gib = 1.5
    with pytest.raises(AttributeError, match="compiler_peek_gib"):
        figures.compiler_peek_gib = 1.5  # type: ignore[attr-defined]


def test_the_figures_are_step_row_fields_other_than_its_identity_and_status():
    import dataclasses

    from dew.bench.record.schema import StepRow
    from dew.bench.sweep.case_run import Figures
    from dew.bench.sweep.presets import Case

    names = {field.name for field in dataclasses.fields(Figures)}
    identity = set(Case(architecture="unet", batch=1).row_fields())
    assert names <= set(StepRow.model_fields) - identity - {"status", "error"}


def test_a_case_that_fails_keeps_what_it_measured_and_a_misspelling_is_named(monkeypatch):
    from dew.bench.sweep import case_run
    from dew.bench.sweep.presets import Case
    from dew.bench.sweep.settings import Options

    case = Case(architecture="simple_dit", batch=8)

    def prepare(case, options, figures, clock):
        figures.params, figures.gflop_per_step = 10, 1.5
        return case_run.Prepared(case, None, None, None, figures, None)

    def measure(prepared, options, figures, clock):
        figures.ms_per_step = 5.0
        figures.p50_msec = 5.0  # type: ignore[attr-defined]

    monkeypatch.setattr(case_run, "prepare", prepare)
    monkeypatch.setattr(case_run, "measure", measure)
    row = case_run.run_case(case, Options(preset="cpu-smoke"))
    assert row.status == "failed" and "'p50_msec'" in row.error
    assert (row.params, row.gflop_per_step, row.ms_per_step) == (10, 1.5, 5.0)
    assert row.p50_ms is None and row.case == {"batch": 8}


def test_a_row_from_fields_by_name_refuses_a_name_that_is_no_field():
    from dew.bench.sweep.case_run import make_row
    from dew.bench.sweep.presets import Case

    case = Case(architecture="simple_dit", batch=8)
    assert make_row(case, {"params": 10}, status="ok").params == 10
    with pytest.raises(TypeError, match="parms"):
        make_row(case, {"parms": 10}, status="ok")


@pytest.mark.parametrize("tool", ["benchmark_step", "benchmark_data", "prepare_dataset"])
def test_a_python_without_dew_is_one_line_not_a_traceback(tool, tmp_path):
    # Issue 63: the README's `python3.12 tools/benchmark_step.py --help` in a fresh shell
    # was a ModuleNotFoundError traceback. -S: this Python without its site-packages (dew)
    script = Path(__file__).resolve().parents[1] / "tools" / f"{tool}.py"
    done = subprocess.run([sys.executable, "-S", str(script), "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"this Python ({sys.executable}) cannot import dew: run the tool" in done.stderr
