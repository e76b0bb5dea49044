"""dew.bench.analysis.noise: the run level and the process level from A/A records (records of
one stack made at different times), the table compare reads, and its command line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from dew.bench.analysis import noise
from dew.bench.record.schema import read_run

REPO = Path(__file__).resolve().parents[3]
RUNS = REPO / "results" / "runs"
AA = sorted(RUNS.glob("20261202-cpu-smoke-stats-aa*/step.json"))  # six records, one stack


def _simulated(rng, records: int, repeats: int, run: float, process: float) -> list[list[float]]:
    """One row's repeat figures in each of `records` records: each record its own level."""
    return [
        list(20.0 * np.exp(rng.normal(0, run) + rng.normal(0, process, repeats)))
        for _ in range(records)
    ]


@pytest.mark.parametrize(("run", "process"), [(0.04, 0.08), (0.10, 0.02), (0.0, 0.05)])
def test_row_levels_recover_the_run_and_process_levels(run, process):
    rng = np.random.default_rng(int(run * 100 + process * 1000))
    levels = noise.row_levels("row", _simulated(rng, 300, 5, run, process))
    assert (levels.records, levels.process_df, levels.run_df) == (300, 300 * 4, 299)
    assert math.sqrt(levels.process_var) == pytest.approx(process, rel=0.05)
    assert math.sqrt(levels.run_var) == pytest.approx(run, abs=max(0.2 * run, 0.01))
    assert levels.run_var >= 0


def test_row_levels_need_two_records_of_two_repeats():
    assert noise.row_levels("row", [[10.0, 11.0]]) is None
    assert noise.row_levels("row", [[10.0, 11.0], [12.0]]) is None  # one repeat: no spread
    levels = noise.row_levels("row", [[10.0, 11.0], [12.0, 12.5], [9.0]])
    assert levels.records == 2 and levels.process_df == 2 and levels.run_df == 1


def test_records_of_one_stack_share_a_key_and_other_settings_do_not(aa_records):
    keys = {noise.stack_key(record) for _, record in aa_records}
    assert len(keys) == 1  # the output paths, times and the dirty tree do not count
    for other in ("20261202-cpu-smoke-stats-opt0", "20261202-cpu-smoke-stats-f32"):
        assert noise.stack_key(read_run(RUNS / other / "step.json")) not in keys


def test_estimate_groups_the_committed_records_by_stack(aa_records):
    others = [
        (name, read_run(RUNS / name / "step.json"))
        for name in ("20261202-cpu-smoke-stats-opt0", "20261202-cpu-smoke-stats-f32")
    ]
    table = noise.estimate([*aa_records, *others])  # a stack of one record adds nothing
    assert list(table) == ["cpu"]
    cpu = table["cpu"]
    assert cpu["records"] == [sorted(path for path, _ in aa_records)]
    labels = [row["label"] for row in cpu["rows"]]
    assert labels == ["uvit", "simple_dit", "causal_transformer", "causal_transformer (moe)"]
    for row in cpu["rows"]:
        assert (row["records"], row["run_df"], row["process_df"]) == (6, 5, 24)
        assert row["run"] == pytest.approx(math.sqrt(row["run_var"]), abs=1e-5)
    assert 1 <= cpu["df"] <= 20  # the run level's df: at most the records less one a row
    pooled_run = sum(r["run_var"] * r["run_df"] for r in cpu["rows"]) / 20
    pooled_process = sum(r["process_var"] * r["process_df"] for r in cpu["rows"]) / 96
    assert cpu["run"] == pytest.approx(math.sqrt(pooled_run), abs=1e-5)
    assert cpu["process"] == pytest.approx(math.sqrt(pooled_process), abs=1e-5)
    # This 2-core VM: processes spread about 10%, runs move a few percent beyond that.
    assert 0.05 < cpu["process"] < 0.2 and 0 < cpu["run"] < cpu["process"]
    assert table == noise.estimate(aa_records)


def test_for_records_uses_the_kind_the_table_measured(aa_records, aa_table):
    run, ref = aa_records[0][1], aa_records[1][1]
    model = noise.for_records(run, ref, aa_table)
    cpu = aa_table["kinds"]["cpu"]
    assert (model.pooled.run, model.pooled.process, model.pooled.df) == (
        cpu["run"],
        cpu["process"],
        cpu["df"],
    )
    assert model.source == "cpu: 6 committed A/A records (noise.json)"
    # A row measured noisier than the pool keeps its own run level; the rest take the pool's.
    noisier = {row["label"] for row in cpu["rows"] if row["run"] > cpu["run"]}
    assert set(model.rows) == noisier and noisier
    for label in noisier:
        assert model.for_row(label).run > model.pooled.run
    assert model.for_row("a row the table never saw") == model.pooled


def test_for_records_falls_back_to_the_default_for_a_kind_not_in_the_table(aa_records, aa_table):
    gpu = read_run(REPO / "results" / "published" / "2026-09-02-rtx4080-6b0f119-small.json")
    model = noise.for_records(gpu, gpu, aa_table)
    default = aa_table["default"]
    assert (model.pooled.run, model.pooled.process) == (default["run"], default["process"])
    assert model.source.startswith("default (RTX 4080 not in noise.json)")
    assert model.rows == {}
    for kind in aa_table["kinds"].values():  # conservative: no kind's pool is noisier
        assert default["run"] >= kind["run"] and default["process"] >= kind["process"]
    cpu = aa_records[0][1]
    mixed = noise.for_records(cpu, gpu, aa_table)
    assert mixed.source.startswith("default (cpu against RTX 4080 not in noise.json)")
    assert mixed.pooled.run == default["run"]
    bare = noise.for_records(cpu, cpu, {})  # no table at all: a stated 10%
    assert (bare.pooled.run, bare.pooled.process) == (0.10, 0.10)
    assert bare.source.startswith("no noise table")


def test_interleaved_rounds_assume_no_run_level():
    model = noise.NoiseModel.interleaved()
    assert model.pooled.run == 0 and model.for_row("any") == model.pooled


def test_read_table_is_none_without_a_readable_table(tmp_path):
    assert noise.read_table(tmp_path / "missing.json") is None
    broken = tmp_path / "noise.json"
    broken.write_text("{")
    assert noise.read_table(broken) is None
    broken.write_text(json.dumps({"kinds": {}}))
    assert noise.read_table(broken) == {"kinds": {}}


def test_the_command_prints_the_estimate(capsys):
    assert noise.main([str(path) for path in AA]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("cpu: run level ") and lines[0].endswith(", 4 rows)")
    assert any(line.startswith("  causal_transformer (moe): run ") for line in lines)
    assert lines[-1].startswith("default: run level ")


def _one_error_line(capsys) -> str:
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"{noise.PROG}: error: ") and err.count("\n") == 1, err
    return err


def test_the_command_refuses_no_records_and_a_single_record_in_one_line(capsys):
    assert noise.main([]) == 2
    _one_error_line(capsys)
    assert noise.main([str(AA[0])]) == 2
    assert "no two records of one stack" in _one_error_line(capsys)
    # Two records of two stacks (-O0 is another setting): still nothing to estimate.
    assert noise.main([str(AA[0]), str(RUNS / "20261202-cpu-smoke-stats-opt0" / "step.json")]) == 2
    assert "no two records of one stack" in _one_error_line(capsys)
