"""scripts/first_gpu_run.py as a user runs it: bad input is one line and exit 2 before
anything is written; on CPU (`--platform cpu --preset cpu-smoke`) every stage runs and
leaves its files in the one output directory (slow tier)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "first_gpu_run.py"


def run(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("first_gpu_run: error: ") and "Traceback" not in done.stderr
    assert done.stdout == ""
    return line.removeprefix("first_gpu_run: error: ")


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--bogus", "1"], "unrecognized argument --bogus; valid: --out, --wheels"),
        (["--preset", "cpu-smoke"], "--preset cpu-smoke runs on CPU: pass --platform cpu"),
        (["--preset", "huge"], "--preset 'huge' is not valid; valid: small, cpu-smoke"),
        (["--platform", "tpu"], "--platform 'tpu' is not valid; valid: cuda, cpu"),
        (["--budget-s", "ten"], "--budget-s 'ten' is not a number of seconds"),
        (["--budget-s", "nan"], "--budget-s must be 60..86400 seconds (got nan)"),
        (["--steps", "0"], "--steps must be a whole number >= 1 (got '0')"),
        (["--architectures"], "--architectures needs at least one name"),
        (["--out"], "--out needs a value"),
    ],
)
def test_bad_flags_are_one_line(argv, expected):
    assert one_line(run(*argv)).startswith(expected)


def test_an_existing_output_directory_is_refused_and_left_as_it_was(tmp_path):
    (tmp_path / "step.json").write_text("an earlier run")
    line = one_line(run("--platform", "cpu", "--preset", "cpu-smoke", "--out", str(tmp_path)))
    assert line == f"--out {tmp_path} exists and is not an empty directory; give a new one"
    assert [p.name for p in tmp_path.iterdir()] == ["step.json"]
    assert (tmp_path / "step.json").read_text() == "an earlier run"


def test_an_output_that_cannot_be_made_is_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    line = one_line(run("--platform", "cpu", "--preset", "cpu-smoke", "--out", str(blocker / "o")))
    assert line.startswith(f"--out {blocker / 'o'}: cannot write there")


def test_help_is_exit_0():
    done = run("--help")
    assert done.returncode == 0 and "first run of dew" in done.stdout


@pytest.mark.slow
def test_every_stage_runs_on_cpu(tmp_path):
    out = tmp_path / "run"
    done = run(
        "--platform", "cpu", "--preset", "cpu-smoke", "--architectures", "simple_dit",
        "--steps", "2", "--out", str(out), timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = (out / "summary.md").read_text()
    for stage in ("install", "step benchmark", "loader", "compare", "validate"):
        assert f"- {stage}: ok" in summary
    step = json.loads((out / "step.json").read_text())
    (row,) = step["rows"]
    assert row["gpu"]["note"] == "no NVIDIA GPU: platform cpu"
    assert "no NVIDIA GPU: platform cpu" in (out / "gpu.md").read_text()
    assert "### Stack differences" in (out / "compare.md").read_text()
    assert {"data-workers-0.json", "data-workers-8.json"} <= {p.name for p in out.iterdir()}
