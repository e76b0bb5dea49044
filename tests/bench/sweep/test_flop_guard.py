"""A FLOP count that fails leaves the timing (issue 33): a real cpu-smoke case, compiled
and timed in this process, whose optimized HLO the counter is handed without its while
loops' known trip counts (what a GPU program can look like). The counter then fails for
real, with its own message; the row is still timed, its FLOPs and util null, the reason
in `flops_error`, its fingerprint recorded."""

from __future__ import annotations

import re

import pytest

from dew.bench.analysis import tables
from dew.bench.sweep import case_run
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options
from dew.telemetry import hlo_text, instrumentation

TRIP_COUNTS = re.compile(r', backend_config=\{"dynamic_variables[^\n]*known_trip_count[^\n]*\}')


@pytest.mark.slow  # a compile, an init and two timed windows of simple_dit: ~25 s here
def test_a_failed_flop_count_leaves_a_timed_row_with_the_reason(monkeypatch):
    parse = hlo_text.parse_module

    def without_trip_counts(text: str):
        stripped = TRIP_COUNTS.sub("", text)
        assert stripped != text  # the case has while loops whose trip counts XLA knows
        return parse(stripped)

    monkeypatch.setattr(hlo_text, "parse_module", without_trip_counts)
    # A peak for the CPU (hardware facts, faked): util would be a number if FLOPs were.
    monkeypatch.setattr(instrumentation, "peak_bf16_flops", lambda kind: 1e12)
    options = Options(
        preset="cpu-smoke", steps=2, warmup=0, mesh={"fsdp": 8, "min_shard_size": 256},
        compilation_cache_dir="off", gpu_check="off",
    )  # fmt: skip
    row = case_run.run_case(Case(architecture="simple_dit", batch=8), options)
    assert row.status == "ok" and row.error is None
    assert row.ms_per_step > 0 and row.p50_ms > 0 and len(row.repeats[0].synced_ms) == 2
    assert row.gflop_per_step is None and row.uncounted_custom_calls is None
    assert row.util is None
    assert row.flops_error.startswith("FLOP count failed: HloParseError: while %while.")
    assert "no known_trip_count in its backend_config" in row.flops_error
    assert row.cost_analysis_gflop is not None  # XLA's own figure did not fail
    assert row.fingerprint is not None and row.repeats[0].fingerprint == row.fingerprint
    (shown,) = [w for w in tables.row_warnings(row) if w.startswith("GFLOP/step not counted")]
    assert "FLOP count failed" in shown
