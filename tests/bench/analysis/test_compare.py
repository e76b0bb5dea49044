"""compare: the 09-05 rerun against the 09-02 table must read as the seed reads it."""

from pathlib import Path

import numpy as np
import pytest

from dew.bench.analysis import compare, comparison
from dew.bench.record.schema import read_run, write_run

PUBLISHED = Path(__file__).resolve().parents[3] / "results" / "published"
FIRST = PUBLISHED / "2026-09-02-rtx4080-6b0f119-small.json"
RERUN = PUBLISHED / "2026-09-05-rtx4080-9886c20-rerun.json"


@pytest.fixture(scope="module")
def rerun_vs_first():
    return comparison.compare(read_run(RERUN), read_run(FIRST))


def rows_by_label(cmp):
    return {r.label: r for r in cmp.rows}


def test_seed_reading_simple_dit_faster_decoder_seven_percent_slower(rerun_vs_first):
    rows = rows_by_label(rerun_vs_first)
    dit = rows["simple_dit"]
    assert (dit.run.ms_per_step, dit.reference.ms_per_step) == (7.02, 7.9)
    assert dit.verdict == "faster" and dit.comparable
    decoder = rows["causal_transformer"]
    assert decoder.verdict == "slower"
    assert decoder.change == pytest.approx(0.07, abs=0.005)
    assert rows["video_dit"].verdict == "same"
    assert rows["hierarchical_mmdit"].verdict == "same"
    # Same backbone: the 99,840 extra params are the condition table moved into the state.
    assert any("+99,840" in note and "condition" in note for note in dit.notes)
    assert not rerun_vs_first.reproduced


def test_commit_and_env_flags_are_listed_as_stack_differences(rerun_vs_first):
    diffs = {d.what: (d.run, d.reference) for d in rerun_vs_first.stack}
    assert diffs["commit"] == ("9886c20", "6b0f119")
    for flag, value in (
        ("JAX_PLATFORMS", "cuda"),
        ("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),
        ("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.8"),
    ):
        assert diffs[f"env {flag}"][0] == value
    # Same stated stack on both sides: not a difference.
    assert not any(what.startswith(("package", "driver", "device")) for what in diffs)


def test_rows_without_partner_and_failed_rows_are_reported(rerun_vs_first):
    rows = rows_by_label(rerun_vs_first)
    assert rows["causal_transformer (head_chunks=1)"].verdict == "no reference row"
    moe = rows["causal_transformer (moe)"]
    assert moe.verdict.startswith("failed") and not moe.counts
    assert rows["unet"].run is None and rows["unet"].verdict == "not in this run"
    assert len(rerun_vs_first.counted) == 4


def test_cli_markdown_exit_status_band_and_plot(tmp_path, capsys):
    png = tmp_path / "chart.png"
    assert compare.main([str(RERUN), str(FIRST), "--plot", str(png)]) == 1
    out = capsys.readouterr().out
    assert "| commit | 9886c20 | 6b0f119 |" in out
    assert "| simple_dit | 7.02 | 7.90 | 0.889 (-11.1%)" in out
    assert "causal_transformer slower (+7.0%)" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A band wide enough for the decoder's 7% and simple_dit's 11% reproduces it.
    assert compare.main([str(RERUN), str(FIRST), "--band", "12", "--format", "text"]) == 0
    assert "\nREPRODUCED: 4 comparable rows: 4 same" in capsys.readouterr().out


def test_run_against_itself_reproduces_and_default_reference(tmp_path, capsys):
    copy = tmp_path / "mine.json"
    write_run(copy, read_run(FIRST))
    # The default reference is the published record sharing the most rows: 09-02 itself.
    assert compare.default_reference(read_run(copy), copy) == FIRST
    assert compare.main([str(copy)]) == 0
    assert "\nREPRODUCED: 12 comparable rows: 12 same" in capsys.readouterr().out


def test_different_model_is_not_comparable(tmp_path):
    run = read_run(FIRST)
    changed = run.model_copy(deep=True)
    changed.rows[0].gflop_per_step = run.rows[0].gflop_per_step * 2
    changed.rows[0].ms_per_step = run.rows[0].ms_per_step * 3
    cmp = comparison.compare(changed, run)
    row = cmp.rows[0]
    assert row.verdict == "different model, not comparable" and not row.counts
    assert any("GFLOP/step differs" in note for note in row.notes)
    assert cmp.reproduced  # the other 11 rows are unchanged


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    broken = tmp_path / "broken.json"
    broken.write_text("{}")
    assert compare.main([str(broken), str(FIRST)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{compare.PROG}: error: RUN {broken}: $.") and err.count("\n") == 1
    assert compare.main([str(RERUN), str(FIRST), "--band", "-1"]) == 2
    assert "--band -1" in capsys.readouterr().err


def test_loader_records_compare_on_throughput():
    loader = read_run(PUBLISHED / "oxford-flowers-loader.json")
    slower = loader.model_copy(deep=True)
    slower.rows[1].samples_per_s = loader.rows[1].samples_per_s / 2  # 8 workers: half as fast
    cmp = comparison.compare(slower, loader)
    verdicts = [r.verdict for r in cmp.rows]
    assert verdicts == ["same", "slower"]
    assert cmp.rows[1].change == pytest.approx(1.0)  # twice the time per sample
    assert not cmp.reproduced


@pytest.mark.parametrize("flags", [["--alpha", "2"], ["--alpha", "0"], ["--band", "-5"]])
def test_bad_alpha_and_band_are_one_line_and_exit_2(capsys, flags):
    assert compare.main([str(RERUN), str(FIRST), *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flags[0] in err


def _with_samples(record, scale: float, seed: int, repeats: int = 5):
    """The record with every timed row given `repeats` repeats around scale x its ms/step."""
    from dew.bench.analysis.repeats import step_repeat, summarize_step

    rng = np.random.default_rng(seed)
    rows = []
    for row in record.rows:
        if row.ms_per_step is None:
            rows.append(row)
            continue
        level = row.ms_per_step * scale
        runs = []
        for _ in range(repeats):
            steps = level * (1 + rng.normal(0, 0.01, 20))
            runs.append(step_repeat(float(steps.mean()), steps, None))
        rows.append(summarize_step(row.model_copy(update={"ms_per_step": level}), runs))
    return record.model_copy(update={"rows": rows, "schema_version": 2})


def test_rows_with_samples_get_statistical_verdicts_and_strict_fails_undecided(tmp_path):
    first = read_run(FIRST)
    same = comparison.compare(_with_samples(first, 1.0, 1), _with_samples(first, 1.0, 2))
    assert {r.verdict for r in same.counted} <= {"same", "undecided"} and same.reproduced
    slower = comparison.compare(_with_samples(first, 2.0, 3), _with_samples(first, 1.0, 4))
    assert {r.verdict for r in slower.counted} == {"slower"} and not slower.reproduced
    assert all(r.samples.low > 1.9 for r in slower.counted)
    # Two repeats a side: every row undecided; exit 0, but 1 with --strict.
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_run(a, _with_samples(first, 1.0, 5, repeats=2))
    write_run(b, _with_samples(first, 1.0, 6, repeats=2))
    assert compare.main([str(a), str(b)]) == 0
    assert compare.main([str(a), str(b), "--strict"]) == 1


def test_a_change_measured_on_a_busy_host_is_undecided():
    first = read_run(FIRST)
    slower = _with_samples(first, 2.0, 7)
    busy = [
        row.model_copy(
            update={
                "repeats": [
                    r.model_copy(update={"host_busy": "pid 1 used 99%"}) for r in row.repeats
                ]
            }
        )
        if row.repeats
        else row
        for row in slower.rows
    ]
    cmp = comparison.compare(slower.model_copy(update={"rows": busy}), _with_samples(first, 1.0, 8))
    assert {r.verdict for r in cmp.counted} == {"undecided"}
    assert all("while the host was busy for 5 of 5 run repeats" in r.why for r in cmp.counted)


# --- the host probe: drift between the runs ---------------------------------------------------


def _with_probes(record, probe_ms: float, seed: int):
    """The record with a host-probe reading before each round (the step benchmark gives a
    round's one reading to every row's repeat of that round), jittered by 0.1%."""
    rng = np.random.default_rng(seed)
    rounds = max(len(row.repeats or []) for row in record.rows)
    readings = [round(float(probe_ms * (1 + rng.normal(0, 0.001))), 4) for _ in range(rounds)]
    rows = [
        row.model_copy(
            update={
                "repeats": [
                    repeat.model_copy(update={"host_probe_ms": reading})
                    for repeat, reading in zip(row.repeats, readings, strict=False)
                ]
            }
        )
        if row.repeats
        else row
        for row in record.rows
    ]
    return record.model_copy(update={"rows": rows})


def test_a_change_the_host_drift_explains_is_undecided_with_the_reason(tmp_path, capsys):
    # The A/A failure of issue 17: the same code, the host 12% faster during the run.
    first = read_run(FIRST)
    run, reference = _with_samples(first, 0.88, 11), _with_samples(first, 1.0, 12)
    without = comparison.compare(run, reference)
    assert {r.verdict for r in without.counted} == {"faster"}  # what compare said before
    assert without.host is None
    cmp = comparison.compare(_with_probes(run, 264.0, 13), _with_probes(reference, 300.0, 14))
    assert cmp.host.ratio == pytest.approx(0.88, abs=0.02) and cmp.host.readings == (5, 5)
    assert {r.verdict for r in cmp.counted} == {"undecided"} and cmp.reproduced
    for row in cmp.counted:
        assert row.why.startswith(
            "the host ran 12% faster during the run than the reference (host probe); "
            "the change is within that"
        ), row.why
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_run(a, _with_probes(run, 264.0, 13))
    write_run(b, _with_probes(reference, 300.0, 14))
    assert compare.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    header = out.split("Stack differences")[0]
    assert "- host drift: the host probe read 0.88" in header
    assert "(5 and 5 readings): the host ran 12% faster during the run" in header
    assert compare.main([str(a), str(b), "--strict"]) == 1


def test_a_real_change_on_a_steady_host_stays_slower():
    first = read_run(FIRST)
    run = _with_probes(_with_samples(first, 2.0, 15), 300.0, 16)
    reference = _with_probes(_with_samples(first, 1.0, 17), 300.0, 18)
    cmp = comparison.compare(run, reference)
    assert cmp.host.ratio == pytest.approx(1.0, abs=0.02)
    assert {r.verdict for r in cmp.counted} == {"slower"} and not cmp.reproduced
    # The host twice as slow during the run explains the same 2x: undecided.
    slow_host = comparison.compare(_with_probes(run, 600.0, 16), reference)
    assert {r.verdict for r in slow_host.counted} == {"undecided"}
    assert all(
        r.why.startswith("the host ran 100% slower during the run than the reference")
        for r in slow_host.counted
    )


def test_records_without_probes_compare_as_before_and_say_so(tmp_path, capsys):
    first = read_run(FIRST)
    run = _with_samples(first, 2.0, 19)
    reference = _with_samples(first, 1.0, 20)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_run(a, _with_probes(run, 300.0, 21))
    write_run(b, reference)  # an older record: no probe readings
    assert compare.main([str(a), str(b)]) == 1  # slower, as before the probe existed
    out = capsys.readouterr().out
    assert out.count("no host probe in") == 1
    assert f"- no host probe in REFERENCE {b}: drift between the runs not checked" in out
    assert "| slower" in out or " slower" in out.split("Verdict")[1]
    # The published records: neither side has readings, said once, verdicts unchanged.
    assert compare.main([str(RERUN), str(FIRST), "--format", "text"]) == 1
    out = capsys.readouterr().out
    assert out.count("no host probe in") == 1
    assert f"no host probe in RUN {RERUN} or REFERENCE {FIRST}" in out
    assert "causal_transformer slower (+7.0%)" in out
