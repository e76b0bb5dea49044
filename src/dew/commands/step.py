"""`dew step`: the step benchmark, `tools/benchmark_step.py` (dew.bench.sweep.step_command)."""

from __future__ import annotations

SUMMARY = "time one compiled training step per case (tools/benchmark_step.py)"


def main(argv: list[str]) -> int:
    from dew.bench.sweep.step_command import main as benchmark_step

    return benchmark_step(argv, prog="dew step")
