"""Issue 51: the verdict's inputs. What two records cannot show is said first; a history's
levels carry honest degrees of freedom and a level estimated at nothing is not known to be
nothing; a quiet kind (a TPU) reaches REPRODUCED; every gate judges what the verdict judges;
compare and ab share one equivalence test; the compared records stay out of their own
noise; a zero-noise history gives no NaN p."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from test_ab import make_run

from dew.bench.analysis import ab, compare_command, compare_report, comparison, judge
from dew.bench.analysis.levels import fit, history
from dew.bench.analysis.levels import noise as noise_model
from dew.bench.analysis.repeats import step_repeat, summarize_step
from dew.bench.record.schema import read_run, write_run

REPO = Path(__file__).resolve().parents[3]
FIRST = REPO / "results" / "published" / "2026-09-02-rtx4080-6b0f119-small.json"


def _device(record, platform: str, kind: str):
    environment = record.environment.model_copy(deep=True)
    environment.devices.platform, environment.devices.kind = platform, kind
    return record.model_copy(update={"environment": environment})


def _record(seed: int, *, process: float, shift: float = 0.0, scale=(1.0, 1.0, 1.0, 1.0),
            repeats: int = 3, platform="tpu", kind="TPU v5 lite", count: int = 4):  # fmt: skip
    """Four rows of the published table on another device, `repeats` repeats each, their
    logs spread by `process` around the row's figure x scale (and a whole-record shift)."""
    rng = np.random.default_rng(seed)
    base = _device(read_run(FIRST), platform, kind)
    timed = [row for row in base.rows if row.ms_per_step is not None][:count]
    record_shift = rng.normal(0, shift)
    rows = []
    for row, factor in zip(timed, scale[:count], strict=True):
        level = row.ms_per_step * factor * math.exp(record_shift)
        runs = []
        for figure in level * np.exp(rng.normal(0, process, repeats)):
            steps = figure * (1 + rng.normal(0, 0.001, 20))
            runs.append(step_repeat(float(steps.mean()), steps, None))
        rows.append(summarize_step(row.model_copy(update={"ms_per_step": level}), runs))
    return base.model_copy(update={"rows": rows, "schema_version": 2})


def _write(folder: Path, name: str, record) -> Path:
    path = folder / name / "step.json"
    path.parent.mkdir(parents=True)
    write_run(path, record)
    return path


@pytest.mark.parametrize("count", [4, 1])
def test_a_tpu_aa_pair_reads_reproduced_and_a_36_percent_change_does_not(tmp_path, capsys,
                                                                          count):  # fmt: skip
    """Three A/A records of a TPU (three repeats a row, 0.3% between processes) and two more
    to compare, inside the same folder (compare leaves them out); records of one row too,
    whose run level the history cannot tell from the shift."""

    def record(seed, **more):
        return _record(seed, process=0.003, shift=0.001, count=count, **more)

    for seed in range(3):
        _write(tmp_path, f"aa{seed}", record(seed))
    run, ref = _write(tmp_path, "run", record(10)), _write(tmp_path, "ref", record(11))
    for a, b in ((run, ref), (ref, run)):  # both directions
        assert compare_command.main([str(a), str(b), "--history", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert "**Reproduced: every row within ±2% of the reference.**" in out
        assert "TPU v5 lite: 3 records in 1 A/A groups" in out  # the pair left out of it
    slower = _write(tmp_path.parent, f"slower{count}", record(12, scale=(1.36, 1.0, 1.0, 1.0)))
    assert compare_command.main([str(slower), str(ref), "--history", str(tmp_path)]) == 1
    assert "Not reproduced:" in capsys.readouterr().out
    whole = _write(tmp_path.parent, f"whole{count}", record(13, scale=(1.36,) * 4))
    assert compare_command.main([str(whole), str(ref), "--history", str(tmp_path)]) == 1


def test_a_tpu_run_is_held_against_its_own_kind_only(tmp_path, capsys):
    """A TPU's times beside a GPU's or another chip's are no reproduction: one line, exit 2,
    both directions; the same kind compares."""
    tpu = _write(tmp_path, "tpu", _record(1, process=0.003))
    v4 = _write(tmp_path, "v4", _record(2, process=0.003, kind="TPU v4"))
    gpu = _write(tmp_path, "gpu", _record(3, process=0.01, platform="gpu", kind="RTX 4080"))
    for a, b in ((tpu, gpu), (gpu, tpu), (tpu, v4)):
        assert compare_command.main([str(a), str(b), "--history", str(tmp_path)]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "a TPU's times are compared with records of its own kind" in line
    again = _write(tmp_path, "again", _record(4, process=0.003))
    assert compare_command.main([str(again), str(tpu), "--history", str(tmp_path)]) in (0, 3)


def test_records_that_cannot_show_the_band_say_so_first_with_what_would(tmp_path, capsys):
    """A GPU kind with no history: the prior's run levels alone span more than ±2%."""
    run = _write(tmp_path, "run", _record(1, process=0.01, platform="gpu", kind="NVIDIA X"))
    ref = _write(tmp_path, "ref", _record(2, process=0.01, platform="gpu", kind="NVIDIA X"))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert compare_command.main([str(run), str(ref), "--history", str(empty)]) == 3
    lines = capsys.readouterr().out.splitlines()
    first = lines[2]  # the line under the title
    match = re.fullmatch(r"\*\*Can't tell: this host's noise hides changes under (\d+)%, more "
                         r"than the ±2% asked for\. Run `dew ab` with (\d+) rounds to see "
                         r"±2%\.\*\*", first)  # fmt: skip
    assert match, first
    smallest = judge.smallest_band(0.01**2, 2, 0.01**2, 2)
    assert int(match[1]) == round(100 * smallest) and smallest > 0.02
    assert int(match[2]) >= 2
    assert compare_command.main([str(run), str(ref), "--history", str(empty), "--format",
                                 "json"]) == 3  # fmt: skip
    document = json.loads(capsys.readouterr().out)
    assert document["headline"] == first.strip("*")


def test_a_level_is_a_difference_of_mean_squares_with_satterthwaites_df():
    var, df, floor = fit.component(0.004, 10, 0.001, 40)
    spread = 0.004**2 / 10 + 0.001**2 / 40
    assert var == pytest.approx(0.003) and df == pytest.approx(0.003**2 / spread)
    assert df < 10  # fewer than the mean square it came from (the old fit's)
    # Estimated below nothing: not 0 known, its standard error with 2 df.
    var, df, floor = fit.component(0.001, 4, 0.002, 40)
    assert (
        var == pytest.approx(floor) == pytest.approx(math.sqrt(2 * (0.001**2 / 4 + 0.002**2 / 40)))
    )
    assert df == pytest.approx(2)


def test_a_history_with_no_run_level_does_not_know_it_is_zero(tmp_path):
    for seed in range(3):
        _write(tmp_path, f"aa{seed}", _record(seed, process=0.02, platform="gpu",
                                             kind="NVIDIA Y"))  # fmt: skip
    entry = history.fit(history.read(tmp_path))["NVIDIA Y"]
    assert entry["run"] > 0 and entry["shift"] > 0
    assert entry["run_df"] < 6 and entry["shift_df"] <= 2 + 1e-9


def test_the_host_gate_judges_the_change_against_the_shift():
    """The host 12% faster during the run moves every row; one row 11% slower than the
    rest is a change the drift does not explain (the old gate held its total, 0.98, against
    the band around the drift: undecided)."""
    from test_compare import _on_cpu, _with_probes, _with_samples

    first = read_run(FIRST)
    quiet = noise_model.NoiseModel(noise_model.Noise(0.01, math.inf, 0.002, math.inf, 0.01,
                                                     math.inf, "q"), {}, "q")  # fmt: skip
    run = _on_cpu(_with_samples(first, 0.88, 11))
    rows = [row.model_copy(update={"repeats": [r.model_copy(update={
        "ms_per_step": r.ms_per_step * 1.11}) for r in row.repeats]}) if i == 0 else row
        for i, row in enumerate(run.rows)]  # fmt: skip
    run = _with_probes(run.model_copy(update={"rows": rows}), 264.0, 13)
    reference = _with_probes(_on_cpu(_with_samples(first, 1.0, 12)), 300.0, 14)
    cmp = comparison.compare(run, reference, noise=quiet)
    assert cmp.host.ratio == pytest.approx(0.88, abs=0.02)
    first_row = cmp.counted[0]
    assert first_row.verdict == "slower" and first_row.relative[0] == pytest.approx(1.11, abs=0.02)
    assert cmp.outcome == "NOT REPRODUCED"
    row = compare_report.row_json(first_row, cmp)
    assert row["judged"] == "against_shift"
    assert list(row["changes"]) == ["against_shift", "total", "median_ratio"]
    assert row["changes"]["total"]["ratio"] == pytest.approx(0.977, abs=0.02)


def test_ab_and_compare_share_one_equivalence_level(tmp_path, capsys):
    """Five rounds whose 90% interval lies inside ±5% and whose 95% interval does not:
    `same` by the TOST compare runs (ab used its 95% interval: undecided)."""
    logs = np.array([-0.07, -0.03, 0.0, 0.03, 0.07])
    logs = logs / np.std(logs, ddof=1) * 0.0447
    se = np.std(logs, ddof=1) / math.sqrt(5)
    limit = math.log1p(0.05)
    assert 2.132 * se < limit < 2.776 * se
    a = {"uvit": [40.0] * 5}
    b = {"uvit": list(40.0 * np.exp(logs))}
    assert ab.main([str(make_run(tmp_path, a, b))]) == 0
    assert "| same |" in capsys.readouterr().out
    out = judge.paired_arrays(logs[None, None, :], band=0.05, alpha=0.05)
    assert out["word"][0, 0] == judge.SAME


def test_the_compared_records_are_left_out_of_the_cached_fit():
    cached = history.read_table()["kinds"]["cpu"]
    member = REPO / cached["groups"][0][0]
    table = history.kinds_table(None, exclude=[member])
    assert table["cpu"]["records"] == cached["records"] - 1
    assert all(str(member.relative_to(REPO)) not in group for group in table["cpu"]["groups"])
    assert history.kinds_table(None)["cpu"] == cached  # none compared: the cache itself


def test_a_zero_noise_history_gives_a_verdict_not_a_nan_p():
    out = judge.judge_arrays(np.log([[1.5]]), 0.0, 20.0, 0.0, 4.0, 0.0, 2.0, 1, 1,
                             band=0.05, alpha=0.05)  # fmt: skip
    assert not np.isnan(out["p_holm"]).any()
    assert out["word"][0, 0] == judge.SLOWER and out["outcome"][0] == 1
