"""Behaviour of the step benchmark around the measurement: failures stay in their row,
--resume skips what is done, every row is on disk as soon as it exists, bad input is one
line and exit 2. The end-to-end run of a real case is tests/bench/test_benchmark_step.py.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dew.bench import presets, report, step
from dew.bench.presets import Case
from dew.bench.schema import StepRow, read_run, write_run
from dew.models import registry


def _options(**overrides) -> step.Options:
    base = dict(preset="cpu-smoke", steps=1, warmup=0, mesh={"fsdp": 8, "min_shard_size": 256})
    return step.Options(**{**base, **overrides})


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# --- the timing loop ------------------------------------------------------------------------


def test_time_steps_threads_state_through_warmup_and_both_windows():
    @jax.jit
    def add_one(state, batch):
        state = state + batch
        return state, {"train/loss": state.sum()}

    state, metrics, timings = step.time_steps(add_one, jnp.zeros(3), jnp.ones(3), steps=4, warmup=2)
    # warmup + dispatch window + synced window, each step applied once to the threaded state
    np.testing.assert_array_equal(state, np.full(3, 2 + 4 + 4))
    assert float(metrics["train/loss"]) == 30.0
    assert len(timings.synced_ms) == 4
    assert timings.ms_per_step > 0 and min(timings.synced_ms) > 0


def test_percentile_matches_numpy():
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 9.0, 7.0]
    for q in (10, 50, 90):
        assert step.percentile(values, q) == pytest.approx(np.percentile(values, q))


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
    # XLA aborts the whole process on a flag it does not know: the child dies, the sweep lives.
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


def test_resume_skips_ok_rows_and_reruns_the_rest(tmp_path):
    out = tmp_path / "run.json"
    done = Case(architecture="simple_dit", batch=8)
    again = Case(architecture="uvit", batch=8, model={"no_such_field": 1})
    earlier = step.run(
        _options(isolate=False), [again], json_out=str(out), log=lambda line: None
    ).model_dump(mode="json")
    # An earlier run measured `done` (figures as such a run writes them) and failed `again`.
    ok_row = StepRow(
        **step.row_identity(done), status="ok", params=270_832, ms_per_step=12.5, loss=1.0
    )
    earlier["rows"] = [ok_row.model_dump(mode="json"), *earlier["rows"]]
    write_run(out, earlier)

    lines = []
    record = step.run(
        _options(isolate=False), [done, again], json_out=str(out), resume=True, log=lines.append
    )
    assert record.rows[0] == ok_row  # kept as it was, not measured again
    assert record.rows[1].status == "failed"  # the failed row was run again
    assert "skipped" in lines[0] and "skipped" not in lines[1]
    assert read_run(out).rows == record.rows


# --- usage errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--architectures", "nope"], ["'nope'", "simple_dit"]),
        (["--cases", '[{"architecture": "simple_dit", "heads": 5}]'], ["'heads'", "head_chunks"]),
        (["--cases", '[{"architecture": "nope"}]'], ["'nope'", "simple_dit"]),
        (["--cases", "not json"], ["--cases"]),
        (["--steps", "0"], ["--steps", "0"]),
        (["--preset", "big"], ["'big'", "cpu-smoke"]),
        (["--no-such-flag"], ["--no-such-flag"]),
        (["--mesh", '{"fsdpp": 2}'], ["'fsdpp'", "min_shard_size"]),
        (["--resume"], ["--json-out"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, named):
    assert step.main(argv) == 2
    captured = capsys.readouterr()
    (line,) = _lines(captured.err)
    for word in named:
        assert word in line
    assert captured.out == ""


def test_the_table_has_the_seeds_columns_in_both_formats():
    row = StepRow(
        **step.row_identity(Case(architecture="unet", batch=16)),
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
    assert json.dumps(row.case) and row.case_key()[0] == "unet"
