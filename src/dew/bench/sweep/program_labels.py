"""What a compiled step is, read from its optimized program: the row's labels, not what it
measures. Every step the benchmark times, dew's own (dew.bench.sweep.case_run) and a step
of the user's (dew.bench.sweep.own_step), is compiled through `compile_and_label` (its time
on the phase clock) and labelled here, from the executable it times.

FLOPs from the optimized HLO (dew.telemetry; the custom calls the count could not count,
with their executions per step), XLA's cost analysis, the fingerprint (what the compiler
chose) and the compiler's memory estimate. A count that fails (HLO the counter cannot be
exact about, e.g. a while loop without a known trip count) stays null, `flops_error` says
why, and the case is still timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from dew.bench.common.cli import one_line
from dew.bench.common.units import GIB


def program_labels(compiled) -> dict[str, Any]:
    """The StepRow fields read from a compiled step (`jax.stages.Compiled`): gflop_per_step,
    uncounted_custom_calls, the work count's two (work_...), cost_analysis_gflop,
    fingerprint (plain JSON: they cross a pipe), flops_error and compiler_peak_gib."""
    from dew.telemetry.fingerprint import compiled_fingerprint
    from dew.telemetry.instrumentation import compiled_flop_count, cost_analysis_flops
    from dew.telemetry.memory import compiler_memory

    labels: dict[str, Any] = {}
    errors = []
    try:
        labels.update(flop_figures(compiled_flop_count(compiled)))
    except Exception as failed:  # HloParseError, or whatever else this program meets
        errors.append(f"FLOP count failed: {one_line(failed)}")
    try:
        cost = cost_analysis_flops(compiled)
        labels["cost_analysis_gflop"] = cost / 1e9 if cost is not None else None
    except Exception as failed:
        errors.append(f"cost analysis failed: {one_line(failed)}")
    try:
        labels["fingerprint"] = compiled_fingerprint(compiled).as_dict()
    except Exception as failed:
        errors.append(f"fingerprint failed: {one_line(failed)}")
    labels["flops_error"] = "; ".join(errors) or None
    peak = compiler_memory(compiled)["peak_bytes"]
    labels["compiler_peak_gib"] = peak / GIB if peak is not None else None
    return labels


def flop_figures(count) -> dict[str, Any]:
    """The row's FLOP fields from a dew.telemetry FlopCount: GFLOP/step and the work count's
    GFLOP/step and, never silently zero, each custom-call target either count could not
    count with its executions per step."""
    return {
        "gflop_per_step": count.total / 1e9,
        "uncounted_custom_calls": dict(count.unknown_custom_call_counts),
        "work_gflop_per_step": count.work / 1e9,
        "work_uncounted_custom_calls": dict(count.work_unknown_custom_call_counts),
    }


def compile_and_label(compile_: Callable[[], tuple[Any, float, float | None]], figures, clock):
    """Run `compile_` (returning the executable, the compile's seconds and the load's, None
    unless it came from the persistent cache: dew.train.trainer.compile_timed), its time on
    `clock` as "compile" (or "load"), its seconds and the program's labels on `figures`:
    how every step the benchmark times is compiled. Returns the executable."""
    began, start, cpu = time.time(), time.perf_counter(), time.process_time()
    compiled, figures.compile_s, figures.load_s = compile_()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    clock.add("compile" if figures.load_s is None else "load", began, seconds, cpu)
    with clock.phase("flop_count"):
        for name, value in program_labels(compiled).items():
            setattr(figures, name, value)
    return compiled
