"""compare on a compile-only run prints the parity table (what scripts/parity_table.py did):
params ours / published, GFLOP ours / published, exit 0 only when every published row is
matched exactly (params) or within matching.GFLOP_TOLERANCE (GFLOP/step)."""

from pathlib import Path

import pytest

from dew.bench.analysis import compare_command, matching, parity
from dew.bench.record.schema import BenchmarkRun, Settings, StepRow, read_run, write_run

PUBLISHED = Path(__file__).resolve().parents[3] / "results" / "published"
FIRST = PUBLISHED / "2026-09-02-rtx4080-6b0f119-small.json"
RERUN = PUBLISHED / "2026-09-05-rtx4080-9886c20-rerun.json"


def compile_only_record(reference: Path, *, condition_in_state: bool = False) -> BenchmarkRun:
    """What `tools/benchmark_step.py --compile-only` writes for the reference's plain rows:
    the batch in the case settings, GFLOP counted to more places than published, no times,
    and one architecture the published tables never had."""
    published = read_run(reference)
    rows = []
    for row in published.rows:
        if row.head_chunks is not None or row.case or row.status != "ok":
            continue  # the sweep and the MoE rows carry no figures to hold against
        case = {"batch": row.batch}
        if condition_in_state:
            case["condition_in_state"] = True
        rows.append(
            StepRow(
                architecture=row.architecture,
                case=case,
                sample=row.sample,
                params=row.params,
                condition_params=row.condition_params,
                gflop_per_step=row.gflop_per_step * (1 + 2e-4),  # within 0.1%
                cost_analysis_gflop=row.cost_analysis_gflop,
                compile_s=12.5,
                status="ok",
            )
        )
    rows.append(
        StepRow(
            architecture="sd3_transformer",
            case={"batch": 4},
            params=33_098_560,
            gflop_per_step=97.119,
            status="ok",
        )
    )
    return published.model_copy(
        update={
            "settings": Settings(preset="small", compile_only=True, dtype="bfloat16"),
            "command": "python tools/benchmark_step.py --preset small --compile-only",
            "rows": rows,
        },
        deep=True,
    )


def test_identical_figures_are_parity_and_exit_0(tmp_path, capsys):
    record = tmp_path / "parity.json"
    write_run(record, compile_only_record(FIRST))
    assert compare_command.main([str(record), str(FIRST)]) == 0
    out = capsys.readouterr().out
    assert "Parity: params and GFLOP/step" in out
    assert "| simple_dit | 16 | 19,835,568 | 19,835,568 | 292.959 | 292.900 | +0.020% |" in out
    assert "| sd3_transformer | 4 | 33,098,560 | — |" in out and "no published row" in out
    assert "\nPARITY: 12 of 12 published rows equal" in out
    # The default reference of a small-preset run is the published table itself.
    assert compare_command.main([str(record), "--format", "text"]) == 0
    assert "\nPARITY: 12 of 12" in capsys.readouterr().out


def test_one_param_off_is_no_parity_and_exit_1(tmp_path, capsys):
    run = compile_only_record(FIRST)
    run.rows[3].params += 1  # simple_dit
    record = tmp_path / "parity.json"
    write_run(record, run)
    chart = tmp_path / "gflop.png"
    assert compare_command.main([str(record), str(FIRST), "--plot", str(chart)]) == 1
    out = capsys.readouterr().out
    assert "| simple_dit | 16 | 19,835,569 | 19,835,568 |" in out
    assert "NO PARITY: 11 of 12 published rows equal" in out
    assert "simple_dit params differ (+1)" in out
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gflop_beyond_the_tolerance_is_no_parity():
    run = compile_only_record(FIRST)
    row = run.rows[0]
    row.gflop_per_step = row.gflop_per_step * (1 + 2 * matching.GFLOP_TOLERANCE)
    rows = parity.check(run, read_run(FIRST))
    assert [r.verdict for r in rows if not r.ok and r.counts] == ["GFLOP/step differs"]
    assert not parity.passed(rows)


def test_a_failed_row_with_a_published_row_is_no_parity():
    run = compile_only_record(FIRST)
    run.rows[0] = StepRow(
        architecture="unet", case={"batch": 16}, status="failed", error="XlaRuntimeError: boom"
    )
    rows = parity.check(run, read_run(FIRST))
    assert rows[0].verdict == "failed" and rows[0].counts and not parity.passed(rows)


def test_the_rerun_holds_with_the_condition_table_in_the_state(tmp_path, capsys):
    """The 09-05 rerun's rows predate the condition_in_state setting: a run that records it
    still finds its published row (for causal_transformer among the sweep's rows too)."""
    record = tmp_path / "parity-0905.json"
    write_run(record, compile_only_record(RERUN, condition_in_state=True))
    assert compare_command.main([str(record), str(RERUN)]) == 0
    out = capsys.readouterr().out
    assert "PARITY: 4 of 4 published rows equal" in out
    assert "which does not record condition_in_state=True" in out
    assert "Published rows not in this run: causal_transformer (head_chunks=1)" in out


def test_the_table_kept_as_a_constant_misses_the_rerun_by_the_condition_encoder(capsys):
    run = compile_only_record(FIRST)  # 09-02 counts: the table was a constant
    rows = parity.check(run, read_run(RERUN))
    decoder = next(r for r in rows if r.label == "causal_transformer")
    assert decoder.verdict == "params differ (-99,840)"
    assert any("all the condition encoder's" in note for note in decoder.notes)
    assert not parity.passed(rows)


@pytest.mark.parametrize("reference", [FIRST, RERUN])
def test_a_record_against_itself_is_parity(reference):
    run = compile_only_record(reference)
    assert parity.passed(parity.check(run, run))


def test_a_row_of_another_batch_is_named_as_such():
    run = compile_only_record(FIRST)
    run.rows[0].case = {"batch": 8}  # unet at batch 8: paired by name, another case
    rows = parity.check(run, read_run(FIRST))
    unet = next(r for r in rows if r.label == "unet")
    assert unet.verdict.startswith("batch differs (8 vs 16)") and unet.counts
    assert not parity.passed(rows)
