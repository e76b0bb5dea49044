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
