"""A sweep compiles cases in parallel and times them one at a time (dew.bench.sweep.waves): real
child processes, real compiles; the record's phase timestamps say whether a compile ever
ran during a timed window."""

from __future__ import annotations

import os

import pytest

from dew.bench.record.schema import read_run
from dew.bench.runtime.phases import COMPILING, PhaseClock, cpu_totals, occupancy, of_rows, overlaps
from dew.bench.sweep import run as step
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options
from dew.bench.sweep.step_command import compile_jobs

CHEAP = [  # the cpu-smoke cases that compile fastest
    Case(architecture="causal_transformer", batch=8),
    Case(architecture="causal_transformer", batch=8, head_chunks=1),
    Case(architecture="simple_dit", batch=8),
]


def _options(**overrides) -> Options:
    base = dict(
        preset="cpu-smoke",
        steps=2,
        warmup=1,
        mesh={"fsdp": 8, "min_shard_size": 256},
        compilation_cache_dir="off",  # real compiles, whatever ran before
        compile_jobs=2,
    )
    return Options(**{**base, **overrides})


@pytest.mark.slow  # the slow tier: CI runs it (.ci/run), `nox -s tests` leaves it
def test_cases_compile_in_parallel_and_no_compile_overlaps_a_timed_window(tmp_path):
    out = tmp_path / "run.json"
    lines = []
    record = step.run(_options(), CHEAP, json_out=str(out), log=lines.append)

    assert [row.status for row in record.rows] == ["ok"] * 3
    assert [row.label() for row in record.rows] == [case.label() for case in CHEAP]
    phases = of_rows(record.rows)
    assert overlaps(phases) == []
    # ... and the compiles did run two at a time (the phases of different processes).
    compiles = [p for p in phases if p.name == "compile"]
    assert len(compiles) == 3
    assert any(
        a.start < b.start + b.seconds and b.start < a.start + a.seconds
        for i, a in enumerate(compiles)
        for b in compiles[i + 1 :]
    )
    # Each process's phases run in order, imports first, the timed windows last but one.
    for row in record.rows:
        names = [p.name for p in row.repeats[0].phases]
        assert names[0] == "imports" and names[-1] == "timed"
        assert set(COMPILING) <= set(names)
        assert row.compile_s == pytest.approx(
            next(p.seconds for p in row.repeats[0].phases if p.name == "compile"), abs=0.01
        )
    # Each compile kept its process's CPU seconds: a real XLA compile's work, every thread's.
    assert all(p.cpu_seconds is not None and p.cpu_seconds > 0.05 for p in compiles)
    assert all(p.cpu_seconds <= p.seconds * os.cpu_count() + 0.05 for p in compiles)
    assert read_run(out).rows == record.rows
    # The wall clock, split: two cases were built at once, the three timed one at a time.
    spent = occupancy(record.rows)
    assert spent["2"] > 0 and spent["timing"] > 0 and set(spent) <= {"1", "2", "timing", "other"}
    first = min(p.start for p in phases)
    wall = max(p.start + p.seconds for p in phases) - first
    assert sum(spent.values()) == pytest.approx(wall, abs=0.01)
    timed = [p for p in phases if p.name in ("warmup", "timed")]
    assert spent["timing"] == pytest.approx(sum(p.seconds for p in timed), abs=0.5)
    assert len(lines) == 3 and all(": ok (" in line for line in lines)


def test_a_case_that_fails_while_others_compile_fails_its_row_only_and_resumes(tmp_path):
    out = tmp_path / "run.json"
    bad = Case(architecture="simple_dit", batch=8, model={"heads": 5})  # 5 does not divide 64
    cases = [bad, CHEAP[0]]
    record = step.run(_options(), cases, json_out=str(out), log=lambda line: None)
    failed, ok = record.rows
    assert failed.status == "failed" and "heads 5" in failed.error and "\n" not in failed.error
    assert ok.status == "ok" and ok.ms_per_step > 0
    assert step.exit_code(record) == 1

    lines = []
    again = step.run(_options(), cases, json_out=str(out), resume=True, log=lines.append)
    assert again.rows[1] == ok  # kept, not measured again
    assert again.rows[0].status == "failed"  # run again (and fails again)
    assert any("kept" in line for line in lines)


def test_the_default_is_the_cpu_count_on_cpu_and_one_job_on_a_gpu():
    options = _options(compile_jobs=None)
    on_cpu, warnings = compile_jobs(options, "cpu", cases=18)
    assert on_cpu.compile_jobs >= 1 and warnings == []
    assert compile_jobs(options, "cpu", cases=1)[0].compile_jobs == 1
    assert compile_jobs(options, "gpu", cases=18)[0].compile_jobs == 1
    asked, warnings = compile_jobs(_options(compile_jobs=4), "gpu", cases=18)
    assert asked.compile_jobs == 4 and "autotune" in warnings[0]
    in_process, _ = compile_jobs(_options(compile_jobs=None, isolate=False), "cpu", cases=18)
    assert in_process.compile_jobs == 1


def test_a_round_splits_into_even_waves_and_one_job_times_each_case_as_it_compiles():
    from dew.bench.sweep.waves import WAVE_PER_JOB, wave_size

    assert wave_size(18, 2) == 9  # two waves of 9, not 16 and 2
    assert wave_size(2 * WAVE_PER_JOB, 2) == 2 * WAVE_PER_JOB
    assert wave_size(3, 2) == 3
    assert wave_size(18, 1) == 1


def test_a_phase_keeps_the_cpu_it_used_and_the_totals_only_where_every_phase_kept_it():
    clock = PhaseClock()
    with clock.phase("compile"):
        sum(i * i for i in range(2_000_000))  # CPU work
    with clock.phase("timed"):
        import time

        time.sleep(0.2)  # wall clock, no CPU
    clock.add("deserialize", 0.0, 1.0)  # a load in a thread: its CPU is not its own
    clock.add("compile", 0.0, 1.0, 0.5)
    busy, idle, _, _ = clock.phases
    assert busy.cpu_seconds > 0.02 and busy.cpu_seconds <= busy.seconds + 0.01
    assert idle.cpu_seconds < 0.05 and idle.seconds >= 0.2
    totals = cpu_totals(clock.phases)
    assert set(totals) == {"compile", "timed"}  # none for the load
    assert totals["compile"] == pytest.approx(busy.cpu_seconds + 0.5)


def test_the_phases_line_names_cpu_seconds_beside_a_phase_whose_every_one_kept_them():
    from dew.bench.analysis.tables import phase_totals
    from dew.bench.record.schema import Phase, StepRepeat, StepRow

    phases = [
        Phase(name="compile", start=10.0, seconds=100.0, cpu_seconds=250.0),
        Phase(name="deserialize", start=110.0, seconds=5.0),
        Phase(name="timed", start=115.0, seconds=2.0, cpu_seconds=1.5),
    ]
    repeat = StepRepeat(ms_per_step=1.0, synced_ms=[1.0], phases=phases)
    row = StepRow(architecture="unet", status="ok", repeats=[repeat])
    line = phase_totals([row])
    assert "compile 100.0 (CPU 250.0)" in line and "timed 2.0 (CPU 1.5)" in line
    assert "deserialize 5.0;" in line and "wall 107.0" in line
