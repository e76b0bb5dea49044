"""scripts/sweep_time.py: input that benchmark_step refuses is one line and exit 2, before
any sweep is timed (it used to time two failed sweeps and exit 1); its JSON goes only where
--out says, never under results/ (records of the schema only)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "sweep_time.py"


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--preset", "nope"], "--preset 'nope' is not valid; valid: small, cpu-smoke"),
        (["--extra=--compile-jobs -1"], "--compile-jobs -1 is not a number"),
        (["--steps", "0"], "--steps must be at least 1 (got 0)"),
    ],
)
def test_input_benchmark_step_refuses_is_one_line_and_exit_2(tmp_path, argv, said):
    out = tmp_path / "sweep.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *argv, "--out", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sweep_time: error: "), lines
    assert said in lines[0]
    assert (
        "tools/benchmark_step.py: error" not in lines[0] and not out.exists() and done.stdout == ""
    )


def test_an_out_under_results_is_one_line_and_exit_2_before_any_sweep():
    out = ROOT / "results" / "sweeps" / "cpu-smoke.sweep.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sweep_time: error: --out "), lines
    assert "holds records of the schema only" in lines[0]
    assert not out.exists() and done.stdout == ""
