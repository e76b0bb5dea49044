"""A sweep compiles cases in parallel and times them one at a time (dew.bench.sweep.waves): real
child processes, real compiles; the record's phase timestamps say whether a compile ever
ran during a timed window."""

from __future__ import annotations

import pytest

from dew.bench.record.schema import read_run
from dew.bench.runtime.phases import COMPILING, occupancy, of_rows, overlaps
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
