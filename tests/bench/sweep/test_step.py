"""Behaviour of the step benchmark around the measurement: failures stay in their row,
--resume keeps every row and reuses only what was measured the same way, every row is on
disk as soon as it exists, bad input is one line and exit 2 before any work. The
end-to-end run of a real case is tests/test_benchmark_step.py.
"""

from __future__ import annotations

import gc
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dew.bench.analysis import tables as report
from dew.bench.common.cli import UsageError
from dew.bench.record.schema import StepRow, read_run, write_run
from dew.bench.sweep import presets, timing
from dew.bench.sweep import run as step
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options
from dew.bench.sweep.step_command import main
from dew.models import registry


def _options(**overrides) -> Options:
    base = dict(preset="cpu-smoke", steps=1, warmup=0, mesh={"fsdp": 8, "min_shard_size": 256})
    return Options(**{**base, **overrides})


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# --- the timing loop ------------------------------------------------------------------------


def test_time_steps_threads_state_through_warmup_and_both_windows():
    @jax.jit
    def add_one(state, batch):
        state = state + batch
        return state, {"train/loss": state.sum()}

    state, metrics, timings = timing.time_steps(
        add_one, jnp.zeros(3), jnp.ones(3), steps=4, warmup=2
    )
    # warmup + dispatch window + synced window, each step applied once to the threaded state
    np.testing.assert_array_equal(state, np.full(3, 2 + 4 + 4))
    assert float(metrics["train/loss"]) == 30.0
    assert len(timings.synced_ms) == 4
    assert timings.ms_per_step > 0 and min(timings.synced_ms) > 0


def test_the_synced_window_spans_a_second_or_its_steps_never_under_twenty():
    assert timing.synced_steps(100, 5.0) == 100  # 0.5 s: all of them
    assert timing.synced_steps(100, 40.0) == 25  # a second's worth
    assert timing.synced_steps(100, 65.0) == 20  # never fewer than twenty
    assert timing.synced_steps(4, 500.0) == 4  # nor more than the steps asked for
    slept = []

    def slow(state, batch):  # 60 ms a step: the dispatch window reads >= 60 ms/step
        time.sleep(0.06)
        slept.append(1)
        return state + batch, {}

    _, _, timings = timing.time_steps(slow, 0, 1, steps=30, warmup=0)
    assert len(timings.synced_ms) == 20 and len(slept) == 30 + 20


def test_the_objects_alive_before_the_windows_are_frozen_through_them_and_only_then():
    # A host-bound step pays for each full collection a walk over every object in the
    # process; what the harness held before the windows is left out of it (timing.py).
    ballast = [object() for _ in range(10_000)]
    frozen_during = []

    def step(state, batch):
        frozen_during.append(gc.get_freeze_count())
        return state + batch, {}

    timing.time_steps(step, 0, 1, steps=3, warmup=1)
    assert len(frozen_during) == 7 and min(frozen_during) >= len(ballast)
    assert gc.get_freeze_count() == 0  # left as it was found
    with pytest.raises(ZeroDivisionError):
        timing.time_steps(lambda state, batch: (1 / 0, {}), 0, 1, steps=1, warmup=1)
    assert gc.get_freeze_count() == 0  # and after a step that raises


def test_percentiles_are_numpys_linear_ones():
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 9.0, 7.0]
    got = timing.percentiles(values)
    for q in (10, 50, 90):
        assert got[f"p{q}_ms"] == pytest.approx(np.percentile(values, q))


# --- presets --------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", [presets.SMALL, presets.CPU_SMOKE], ids=lambda p: p.name)
def test_presets_cover_every_registry_entry(preset):
    covered = {case.architecture for case in preset.cases}
    missing = set(registry.names()) - covered - set(presets.NO_STEP_OF_THEIR_OWN)
    assert not missing, f"registry entries without a {preset.name} case: {sorted(missing)}"


def test_cpu_smoke_is_batch_8_on_an_fsdp_8_mesh():
    assert all(case.batch == 8 for case in presets.CPU_SMOKE.cases)
    assert presets.CPU_SMOKE.mesh == {"fsdp": 8, "min_shard_size": 256}


def test_cases_json_keeps_the_presets_batch_and_names_bad_fields():
    (case,) = presets.merge_cases(
        presets.SMALL, [{"architecture": "causal_transformer", "head_chunks": 1}]
    )
    assert (case.batch, case.head_chunks, case.moe) == (16, 1, False)
    with pytest.raises(ValueError, match="unknown Case field 'heads'.*head_chunks"):
        presets.merge_cases(presets.SMALL, [{"architecture": "simple_dit", "heads": 5}])


# --- failures stay in their row -------------------------------------------------------------


def test_a_failing_case_fails_its_row_while_the_others_complete(tmp_path):
    out = tmp_path / "run.json"
    cases = [
        Case(architecture="simple_dit", batch=8, model={"heads": 5}),  # 5 does not divide 64
        Case(architecture="simple_dit", batch=8),
    ]
    options = _options(compile_only=True, compilation_cache_dir="off", isolate=False)
    record = step.run(options, cases, json_out=str(out), log=lambda line: None)

    bad, good = record.rows
    assert bad.status == "failed" and "heads 5" in bad.error and "\n" not in bad.error
    assert good.status == "ok" and good.params > 0 and good.gflop_per_step > 0
    assert step.exit_code(record) == 1
    assert read_run(out).rows == record.rows


def test_a_crashing_process_is_a_failed_row_not_a_failed_run(tmp_path):
    # XLA aborts the whole process on a flag it does not know: the child dies, the sweep lives
    # (the command line refuses such a flag up front; step.run alone must still survive it).
    options = _options(isolate=True, xla_flags="--xla_no_such_flag_for_dew=1")
    record = step.run(options, [Case(architecture="simple_dit", batch=8)], log=lambda line: None)
    (row,) = record.rows
    assert row.status == "failed"
    assert "process" in row.error and "\n" not in row.error


def test_each_row_is_on_disk_when_its_progress_line_appears(tmp_path):
    out = tmp_path / "run.json"
    cases = [
        Case(architecture="simple_dit", batch=8, model={"no_such_field": 1}),
        Case(architecture="uvit", batch=8, model={"no_such_field": 1}),
    ]
    seen = []

    def log(line):
        seen.append((line, [row.architecture for row in read_run(out).rows]))

    step.run(_options(isolate=False), cases, json_out=str(out), log=log)
    assert [rows for _, rows in seen] == [["simple_dit"], ["simple_dit", "uvit"]]
    assert "no_such_field" in seen[0][0] and "valid:" in seen[0][0]


def _earlier_record(path, cases, **options) -> None:
    """A record as an earlier run left it: rows failed fast (unknown model field)."""
    step.run(_options(isolate=False, **options), cases, json_out=str(path), log=lambda _: None)


def _ok_row(case: Case) -> StepRow:
    return StepRow(**case.row_fields(), status="ok", params=270_832, ms_per_step=12.5, loss=1.0)


def test_resume_skips_ok_rows_and_reruns_the_rest(tmp_path):
    out = tmp_path / "run.json"
    done = Case(architecture="simple_dit", batch=8)
    again = Case(architecture="uvit", batch=8, model={"no_such_field": 1})
    _earlier_record(out, [again])
    earlier = read_run(out).model_dump(mode="json")
    # An earlier run measured `done` (figures as such a run writes them) and failed `again`.
    earlier["rows"] = [_ok_row(done).model_dump(mode="json"), *earlier["rows"]]
    write_run(out, earlier)

    lines = []
    record = step.run(
        _options(isolate=False), [done, again], json_out=str(out), resume=True, log=lines.append
    )
    assert record.rows[0] == _ok_row(done)  # kept as it was, not measured again
    assert record.rows[1].status == "failed"  # the failed row was run again
    assert len(record.rows) == 2  # replaced in place, not appended
    assert "kept" in lines[0] and "kept" not in lines[1]
    assert read_run(out).rows == record.rows


def test_resume_keeps_the_rows_this_run_does_not_select(tmp_path):
    # simple_dit and uvit, then --resume with uvit alone: both rows stay in the record.
    out = tmp_path / "run.json"
    bad = {"no_such_field": 1}
    _earlier_record(out, [Case(architecture="simple_dit", batch=8, model=bad)])
    earlier = read_run(out).model_dump(mode="json")
    uvit = Case(architecture="uvit", batch=8, model=bad)
    step.run(_options(isolate=False), [uvit], json_out=str(out), resume=True, log=lambda _: None)
    after = read_run(out)
    assert [row.architecture for row in after.rows] == ["simple_dit", "uvit"]
    assert after.rows[0] == StepRow.model_validate(earlier["rows"][0])
    assert {c["architecture"] for c in after.settings.cases} == {"simple_dit", "uvit"}


@pytest.mark.parametrize(
    ("then", "now", "named"),
    [
        (
            {"dtype": "bfloat16"},
            {"dtype": "float32"},
            "dtype differs: 'bfloat16' in the record, 'float32' in this run",
        ),
        (
            {"compile_only": True},
            {"compile_only": False},
            "compile_only differs: True in the record, False in this run",
        ),
        ({"steps": 1}, {"steps": 3}, "steps differs: 1 in the record, 3 in this run"),
        (
            {"xla_flags": None},
            {"xla_flags": "--xla_cpu_use_thunk_runtime=true"},
            "xla_flags differs: None in",
        ),
    ],
)
def test_resume_refuses_a_record_measured_with_other_settings(tmp_path, then, now, named):
    out = tmp_path / "run.json"
    case = Case(architecture="simple_dit", batch=8, model={"no_such_field": 1})
    _earlier_record(out, [case], **then)
    before = out.read_bytes()
    with pytest.raises(UsageError, match=named):
        step.run(
            _options(isolate=False, **now), [case], json_out=str(out), resume=True,
            log=lambda _: None,
        )  # fmt: skip
    assert out.read_bytes() == before


def test_resume_refuses_a_record_from_another_commit(tmp_path):
    out = tmp_path / "run.json"
    case = Case(architecture="simple_dit", batch=8, model={"no_such_field": 1})
    _earlier_record(out, [case])
    earlier = read_run(out).model_dump(mode="json")
    earlier["environment"]["code"] = {"commit": "0" * 40, "dirty": False, "source": "git"}
    write_run(out, earlier)
    before = out.read_bytes()
    with pytest.raises(
        UsageError,
        match=r"^--resume: the stack differs \(the record's -> this run's\): commit: 0{40} -> ",
    ):
        step.run(_options(isolate=False), [case], json_out=str(out), resume=True)
    assert out.read_bytes() == before


# --- usage errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--architectures", "nope"], ["'nope'", "simple_dit"]),
        (["--cases", '[{"architecture": "simple_dit", "heads": 5}]'], ["'heads'", "head_chunks"]),
        (["--cases", '[{"architecture": "nope"}]'], ["'nope'", "simple_dit"]),
        (["--cases", "not json"], ["--cases"]),
        (["--steps", "0"], ["--steps", "0"]),
        (["--repeats", "0"], ["--repeats", "0"]),
        (["--repeats", "-1"], ["--repeats", "-1"]),
        (["--repeats", "many"], ["--repeats", "many"]),
        (["--repeats", "auto"], ["--repeats auto", "--target-mde"]),
        (["--repeats", "auto", "--target-mde", "0"], ["--target-mde 0", "percentage"]),
        (["--repeats", "auto", "--target-mde", "nan"], ["--target-mde nan", "percentage"]),
        (["--repeats", "auto", "--target-mde", "abc"], ["--target-mde", "abc"]),
        (["--repeats", "auto", "--target-mde", "20", "--max-repeats", "2"], ["--max-repeats 2"]),
        (["--repeats", "auto", "--target-mde", "20", "--compile-only"], ["--compile-only"]),
        (["--target-mde", "20"], ["--target-mde", "--repeats auto"]),
        (["--case-timeout", "0"], ["--case-timeout 0", "above 0"]),
        (["--case-timeout", "-5"], ["--case-timeout -5", "above 0"]),
        (["--case-timeout", "nan"], ["--case-timeout nan", "above 0"]),
        (["--case-timeout", "inf"], ["--case-timeout inf", "above 0"]),
        (["--case-timeout", "abc"], ["--case-timeout", "abc"]),
        (["--compile-jobs", "0"], ["--compile-jobs 0", "1 or more"]),
        (["--compile-jobs", "-2"], ["--compile-jobs -2", "1 or more"]),
        (["--compile-jobs", "2", "--no-isolate"], ["--compile-jobs 2", "--no-isolate"]),
        (["--allocator", "tcmalloc", "--no-isolate"], ["--allocator tcmalloc", "--no-isolate"]),
        (["--allocator", "jemalloc"], ["jemalloc", "tcmalloc"]),
        (["--preset", "big"], ["'big'", "cpu-smoke"]),
        (["--no-such-flag"], ["--no-such-flag"]),
        (["--mesh", '{"fsdpp": 2}'], ["'fsdpp'", "min_shard_size"]),
        (["--resume"], ["--json-out"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, named):
    assert main(argv) == 2
    captured = capsys.readouterr()
    (line,) = _lines(captured.err)
    assert line.startswith("tools/benchmark_step.py: error: ")
    for word in named:
        assert word in line
    assert captured.out == ""


def _refused(capsys, argv, *named) -> str:
    assert main(["--preset", "cpu-smoke", "--idle-check", "off", *argv]) == 2
    captured = capsys.readouterr()
    (line,) = _lines(captured.err)
    assert line.startswith("tools/benchmark_step.py: error: ") and captured.out == ""
    for word in named:
        assert word in line, line
    return line


@pytest.mark.parametrize(
    "content", [b"a text file\n", b'{"kind": "data"}', b"\x00\x01binary"], ids=str
)
def test_json_out_onto_an_existing_file_refuses_and_leaves_it(tmp_path, capsys, content):
    out = tmp_path / "r.json"
    out.write_bytes(content)
    _refused(capsys, ["--architectures", "simple_dit", "--json-out", str(out)], "--overwrite")
    assert out.read_bytes() == content


def test_resume_on_a_file_that_is_not_a_record_is_one_line(tmp_path, capsys):
    out = tmp_path / "r.json"
    out.write_bytes(b"\x00\x01binary")
    _refused(
        capsys, ["--architectures", "simple_dit", "--json-out", str(out), "--resume"], "--resume"
    )
    assert out.read_bytes() == b"\x00\x01binary"


@pytest.mark.parametrize("flag", ["--json-out", "--profile-dir", "--compilation-cache-dir"])
def test_an_unwritable_output_is_refused_before_any_work(tmp_path, capsys, flag):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    _refused(capsys, ["--architectures", "simple_dit", flag, str(blocker / "x" / "y")], flag)
    assert blocker.read_text() == "not a directory"


def test_json_out_that_is_a_directory_is_refused(tmp_path, capsys):
    _refused(capsys, ["--architectures", "simple_dit", "--json-out", str(tmp_path)], "directory")


def test_bare_architectures_is_refused_not_every_case(capsys):
    _refused(capsys, ["--architectures"], "at least one", "simple_dit")


def test_architectures_with_cases_selects_instead_of_crashing():
    cases = presets.resolve(
        "cpu-smoke", ["uvit"], json.dumps([{"architecture": "uvit"}, {"architecture": "unet"}])
    )
    assert [case.architecture for case in cases] == ["uvit"]


def test_a_negative_model_size_is_refused_before_any_case_runs(capsys):
    cases = '[{"architecture": "simple_dit", "model": {"depth": -1}}]'
    _refused(capsys, ["--cases", cases], "simple_dit", "depth")


def test_an_xla_flag_the_backend_rejects_is_refused_once(capsys):
    line = _refused(
        capsys, ["--architectures", "simple_dit", "--xla-flags", "--xla_no_such_flag_for_dew=1"]
    )
    assert "xla_no_such_flag_for_dew" in line


def test_xla_flags_take_a_value_that_starts_with_dashes():
    from dew.bench.common import cli
    from dew.bench.sweep.step_command import Args

    args = cli.parse(Args, ["--xla-flags", "--xla_backend_optimization_level=0"], prog="t")
    assert args.xla_flags == "--xla_backend_optimization_level=0"


def test_cudnn_attention_on_cpu_is_refused(capsys):
    _refused(capsys, ["--architectures", "simple_dit", "--attention-impl", "cudnn"], "cudnn")


def test_a_mesh_larger_than_the_devices_is_refused_and_a_smaller_one_warned():
    from dew.bench.sweep.preflight import Devices, check_devices

    cases = [Case(architecture="simple_dit", batch=8)]
    cpus = Devices(platform="cpu", count=8, kind="cpu")
    with pytest.raises(UsageError, match="needs 16 devices"):
        check_devices(_options(mesh={"fsdp": 16}), cases, cpus)
    (warning,) = check_devices(_options(mesh={"fsdp": 4}), cases, cpus)
    assert "uses 4 of the 8" in warning
    with pytest.raises(UsageError, match="batch 8 cannot be split"):
        check_devices(_options(mesh={"fsdp": 3}), cases, cpus)
    assert check_devices(_options(), cases, cpus) == []


def test_cpu_smoke_gives_its_processes_8_simulated_devices(monkeypatch):
    from dew.bench.sweep import preflight

    monkeypatch.setenv("XLA_FLAGS", "")
    cases = [Case(architecture="simple_dit", batch=8)]
    devices, warnings = preflight.prepare_environment(_options(), cases, log=lambda _: None)
    assert (devices.platform, devices.count, warnings) == ("cpu", 8, [])
    assert "--xla_force_host_platform_device_count=8" in os.environ["XLA_FLAGS"]


def test_the_table_has_the_seeds_columns_in_both_formats():
    row = StepRow(
        **Case(architecture="unet", batch=16).row_fields(),
        status="ok",
        sample="64x64x3",
        batch=16,
        params=10_159_299,
        ms_per_step=16.4,
        p10_ms=18.2,
        p50_ms=18.4,
        p90_ms=19.0,
        gflop_per_step=646.4,
    )
    tsv = report.step_table([row], "tsv").splitlines()
    assert tsv[0].split("\t")[:6] == [
        "architecture", "sample", "batch", "params", "ms/step", "p10 / p50 / p90 ms"
    ]  # fmt: skip
    assert tsv[1].split("\t")[:6] == ["unet", "64x64x3", "16", "10,159,299", "16.40",
                                      "18.2 / 18.4 / 19.0"]  # fmt: skip
    md = report.step_table([row], "md").splitlines()
    assert md[0].startswith("| architecture |") and md[1].startswith("|---|")
    assert json.dumps(row.case) and row.key()[0] == "unet"


@pytest.mark.slow  # the slow tier: CI runs it (.ci/run), `nox -s tests` leaves it
def test_repeats_run_in_rounds_and_keep_every_repeats_samples(tmp_path):
    out = tmp_path / "run.json"
    cases = [Case(architecture="simple_dit", batch=8), Case(architecture="uvit", batch=8)]
    lines = []
    cache = str(tmp_path / "cache")  # repeat 2 loads repeat 1's executables: a faster test
    options = _options(isolate=False, steps=3, repeats=2, compilation_cache_dir=cache)
    record = step.run(options, cases, json_out=str(out), log=lines.append)
    # Interleaved: every case once per round, not one case twice in a row.
    assert [line.split(" ")[1].rstrip(":") for line in lines] == ["simple_dit", "uvit"] * 2
    assert "repeat 2" in lines[2] and record.settings.repeats == 2
    for row in record.rows:
        assert len(row.repeats) == 2 and all(len(r.synced_ms) == 3 for r in row.repeats)
        assert row.ms_per_step == pytest.approx(np.median([r.ms_per_step for r in row.repeats]))
        low, high = row.ms_per_step_ci95
        assert low <= row.ms_per_step <= high
        assert "2 repeats: their spread is a guess (3 or more)" in row.warnings
    assert read_run(out).rows == record.rows


# --- issue 19: GPU readings, uncounted custom calls, the idle refusal's one line ------------


def test_a_cpu_smoke_row_has_every_gpu_field_null_with_its_reason(tmp_path):
    from dew.bench.sweep.case_run import run_case

    options = _options(steps=2, compilation_cache_dir=str(tmp_path / "cache"))
    row = run_case(Case(architecture="simple_dit", batch=8), options)
    assert row.status == "ok", row.error
    assert row.gpu.note == "no NVIDIA GPU: platform cpu" and row.gpu.check == "warn"
    figures = row.gpu.model_dump(exclude={"note", "check", "slowdowns"})
    assert set(figures.values()) == {None} and row.gpu.slowdowns == []
    assert row.uncounted_custom_calls == {}  # the CPU step's calls are all known
    assert "warnings" not in report.step_table([row])  # no noise on CPU
    assert StepRow.model_validate_json(row.model_dump_json()) == row


def test_a_busy_host_refusal_is_one_line_without_a_doubled_error(tmp_path, capsys):
    import subprocess
    import sys

    burn = "import sys; print('ready', flush=True)\nwhile True: pass"
    burner = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        assert burner.stdout.readline().strip() == "ready"
        out = tmp_path / "run.json"
        argv = ["--preset", "cpu-smoke", "--architectures", "simple_dit"]
        assert main([*argv, "--idle-check", "error", "--json-out", str(out)]) == 1
    finally:
        burner.kill()
        burner.wait()
        burner.stdout.close()
    err = capsys.readouterr().err
    (line,) = [line for line in _lines(err) if "error" in line]
    assert line.startswith(
        "tools/benchmark_step.py: error: host is not idle, refusing to measure: "
    )
    assert f"pid {burner.pid} " in line and not out.exists()
