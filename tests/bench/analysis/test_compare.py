"""compare: the 09-05 rerun against the 09-02 table must read as the seed reads it."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from dew.bench.analysis import compare_command, compare_report, comparison
from dew.bench.analysis.levels import noise
from dew.bench.record.schema import read_run, write_run

PUBLISHED = Path(__file__).resolve().parents[3] / "results" / "published"
FIRST = PUBLISHED / "2026-09-02-rtx4080-6b0f119-small.json"
RERUN = PUBLISHED / "2026-09-05-rtx4080-9886c20-rerun.json"
RUNS = PUBLISHED.parent / "runs"
AA2_A = RUNS / "20261202-cpu-smoke-stats-aa2-a" / "step.json"
AA2_B = RUNS / "20261202-cpu-smoke-stats-aa2-b" / "step.json"
OPT0 = RUNS / "20261202-cpu-smoke-stats-opt0" / "step.json"  # XLA at -O0: slower
MIRROR = {"faster": "slower", "slower": "faster"}


pytestmark = pytest.mark.usefixtures("pinned_noise")  # conftest: the A/A records' table
QUIET = noise.NoiseModel(
    noise.Noise(0.003, math.inf, 0.0, math.inf, 0.0, math.inf, "rows exact to 0.3%"),
    {},
    "rows exact to 0.3%",
)  # what the seed's reading took for granted: a figure is the row's, give or take 0.3%


@pytest.fixture
def rerun_vs_first(pinned_noise):
    return comparison.compare(read_run(RERUN), read_run(FIRST))


def rows_by_label(cmp):
    return {r.label: r for r in cmp.rows}


def test_two_published_figures_are_one_draw_each_so_no_change_is_decided(rerun_vs_first):
    # The seed read simple_dit as faster and the decoder as 7% slower. Each published figure
    # is one process of one run: against the weak GPU prior (an RTX 4080 has no A/A history
    # here), neither change is shown, and nothing is shown the same either: INCONCLUSIVE.
    rows = rows_by_label(rerun_vs_first)
    dit = rows["simple_dit"]
    assert (dit.run.ms_per_step, dit.reference.ms_per_step) == (7.02, 7.9)
    assert dit.comparable and dit.difference.one_draw == "both"
    assert dit.difference.ratio == pytest.approx(7.02 / 7.9, rel=1e-12)
    assert dit.verdict == "undecided" and "not significant (Holm p" in dit.why
    assert any(note.startswith("both have one process: judged as one draw") for note in dit.notes)
    assert dit.noise.source.startswith("RTX 4080 has no A/A history: the weak GPU prior")
    assert rerun_vs_first.band == 2.0  # a GPU's band
    decoder = rows["causal_transformer"]
    assert decoder.verdict == "undecided"
    assert decoder.change == pytest.approx(0.07, abs=0.005)
    assert rows["video_dit"].verdict == "undecided"
    assert rows["hierarchical_mmdit"].verdict == "undecided"
    # Same backbone: the 99,840 extra params are the condition table moved into the state.
    assert any("+99,840" in note and "condition" in note for note in dit.notes)
    assert rerun_vs_first.outcome == "INCONCLUSIVE" and not rerun_vs_first.reproduced
    assert rerun_vs_first.detectable > 0.1  # two single draws could not have seen +10%


def test_taken_as_exact_the_published_figures_read_as_the_seed_reads_them():
    cmp = comparison.compare(read_run(RERUN), read_run(FIRST), noise=QUIET)
    rows = rows_by_label(cmp)
    assert rows["simple_dit"].verdict == "faster"
    assert rows["causal_transformer"].verdict == "slower"
    assert cmp.outcome == "NOT REPRODUCED"


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


def test_clocks_locked_on_one_side_only_are_a_stack_difference():
    from dew.bench.record.stack import stack_differences

    run, ref = json.loads(RERUN.read_text()), json.loads(RERUN.read_text())
    card = {"index": 0, "sm_clock_mhz": 1980, "memory_clock_mhz": 3201}
    run["environment"]["locked_clocks"] = {"mode": "max", "cards": [card], "restored": True}
    diffs, _ = stack_differences(run, ref)
    assert [(d.what, d.run, d.reference) for d in diffs] == [("GPU clocks locked", "max", "off")]
    assert stack_differences(ref, ref)[0] == []  # neither locked: no difference


def test_rows_without_partner_and_failed_rows_are_reported(rerun_vs_first):
    rows = rows_by_label(rerun_vs_first)
    assert rows["causal_transformer (head_chunks=1)"].verdict == "no reference row"
    moe = rows["causal_transformer (moe)"]
    assert moe.verdict.startswith("failed") and not moe.counts
    assert rows["unet"].run is None and rows["unet"].verdict == "not in this run"
    assert len(rerun_vs_first.counted) == 4


def test_cli_markdown_exit_status_columns_and_plot(tmp_path, capsys, pinned_noise):
    png = tmp_path / "chart.png"
    assert compare_command.main([str(RERUN), str(FIRST), "--plot", str(png)]) == 3  # INCONCLUSIVE
    out = capsys.readouterr().out
    assert "| commit | 9886c20 | 6b0f119 |" in out
    assert "| against the shift | p (Holm) | MDE | n for 10% | verdict |" in out
    dit = next(line for line in out.splitlines() if line.startswith("| simple_dit |"))
    assert dit.startswith("| simple_dit | 7.02 | 7.90 | 0.889 (-11.1%) [0.8")
    # Two single draws cannot reach a 10% MDE with any number of repeats: the run levels.
    assert re.search(r" \| \d+% \| never \(floor \d+%\) \| undecided \|$", dit), dit
    header = out.split("Stack differences")[0]
    assert "- noise assumed: process 2.0% (2 df), a row's run level 1.0% (2 df)" in header
    assert "from RTX 4080 has no A/A history: the weak GPU prior" in header
    assert "- the whole run is " in header
    assert "\nINCONCLUSIVE: 4 comparable rows: 4 undecided" in out
    assert re.search(r"could not detect a change of less than \d+% in every row", out)
    assert re.search(r"To detect 10%: no number of repeats .*, or \d+ interleaved rounds", out)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # --strict makes INCONCLUSIVE a failure; a target above the floor gets a number of repeats.
    assert compare_command.main([str(RERUN), str(FIRST), "--strict"]) == 1
    capsys.readouterr()
    argv = [str(RERUN), str(FIRST), "--target-mde", "200", "--format", "text"]
    assert compare_command.main(argv) == 3
    out = capsys.readouterr().out
    assert "n for 200%" in out and "never" not in out.split("Ratios are")[0]


def test_a_copy_of_a_record_against_it_is_refused_and_default_reference(tmp_path, capsys):
    copy = tmp_path / "mine.json"
    write_run(copy, read_run(FIRST))
    # The default reference is the newest record of its device kind and preset sharing the
    # most of its cases: 09-02 itself (the 09-05 rerun shares 4 of its 12).
    assert compare_command.default_reference(read_run(copy), copy) == FIRST
    # The same figures twice are one measurement, not a reproduction (read INCONCLUSIVE
    # here, and REPRODUCED where the rows had repeats): one line, exit 2, --strict or not.
    for strict in ([], ["--strict"]):
        assert compare_command.main([str(copy), *strict]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1
        assert "hold the same measurements (every repeat identical)" in err


def test_the_default_reference_is_of_the_runs_device_and_preset_or_none(tmp_path, capsys):
    """Issue 42: a cpu-smoke record picked the RTX 4080's small table (every row another
    model, nothing compared); now the newest cpu-smoke CPU record sharing its cases, or one
    line saying there is none and how to give one."""
    aa = read_run(AA2_A)
    found = compare_command.default_reference(aa, AA2_A)
    assert found is not None and found != AA2_A
    reference = read_run(found)
    assert reference.settings.preset == "cpu-smoke"
    assert reference.environment.devices.kind == aa.environment.devices.kind
    lonely = aa.model_copy(deep=True)
    lonely.environment.devices.kind = "NVIDIA B300"
    lonely.environment.devices.platform = "gpu"  # a B300 is no cpu device (validate's check)
    copy = tmp_path / "lonely.json"
    write_run(copy, lonely)
    assert compare_command.default_reference(lonely, copy) is None
    assert compare_command.main([str(copy)]) == 3
    line = capsys.readouterr().out.strip()
    said = f"INCONCLUSIVE: nothing to hold {copy} against: no record of NVIDIA B300, preset "
    assert line.startswith(said + "cpu-smoke") and "give REFERENCE" in line
    assert compare_command.main([str(copy), "--format", "json"]) == 3
    alone = json.loads(capsys.readouterr().out)
    assert alone["reference"] is None and alone["kind"] == "step"


def test_different_model_is_not_comparable(tmp_path):
    run = read_run(FIRST)
    changed = run.model_copy(deep=True)
    changed.rows[0].gflop_per_step = run.rows[0].gflop_per_step * 2
    changed.rows[0].ms_per_step = run.rows[0].ms_per_step * 3
    cmp = comparison.compare(changed, run)
    row = cmp.rows[0]
    assert row.verdict == "different model, not comparable" and not row.counts
    assert any("GFLOP/step differs" in note for note in row.notes)
    assert len(cmp.counted) == 11 and not any(r.changed for r in cmp.counted)  # the others


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    broken = tmp_path / "broken.json"
    broken.write_text("{}")
    assert compare_command.main([str(broken), str(FIRST)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{compare_command.PROG}: error: RUN {broken}: $.")
    assert err.count("\n") == 1
    assert compare_command.main([str(RERUN), str(FIRST), "--band", "-1"]) == 2
    assert "--band -1" in capsys.readouterr().err


def test_loader_records_compare_on_throughput():
    loader = read_run(PUBLISHED / "oxford-flowers-loader.json")
    slower = loader.model_copy(deep=True)
    slower.rows[1].samples_per_s = loader.rows[1].samples_per_s / 4  # 8 workers: 1/4 as fast
    cmp = comparison.compare(slower, loader)
    verdicts = [r.verdict for r in cmp.rows]
    # The unchanged row is one draw a side (undecided); a quarter of the throughput is
    # beyond the widest prediction interval the table allows (no device kind: the CPU
    # prior, this VM's own wide levels; half the throughput is not beyond it).
    assert verdicts == ["undecided", "slower"]
    assert cmp.rows[1].change == pytest.approx(3.0)  # four times the time per sample
    assert cmp.rows[1].difference.ratio == pytest.approx(4.0)  # ms per batch, run / ref
    assert cmp.rows[1].difference.low > 1.05
    assert not cmp.reproduced
    # The interval is shown in the throughput's own direction: inverted.
    from dew.bench.analysis import compare_report

    _, low, high = compare_report.shown_estimate(cmp.rows[1], cmp.rate)
    assert low < 0.25 < high < 1 / 1.05


@pytest.mark.parametrize("flags", [["--alpha", "2"], ["--alpha", "0"], ["--band", "-5"]])
def test_bad_alpha_and_band_are_one_line_and_exit_2(capsys, flags):
    assert compare_command.main([str(RERUN), str(FIRST), *flags]) == 2
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
    assert {r.verdict for r in same.counted} <= {"same", "undecided"} and not same.reproduced
    assert same.outcome == "INCONCLUSIVE"  # the GPU prior's shift alone spans a 2% band
    run, reference = _with_samples(first, 2.0, 3), _with_samples(first, 1.0, 4)
    slower = comparison.compare(run, reference)
    # Every row twice as slow: the whole run's shift is slower, no row apart from it.
    assert slower.shift.word == "slower" and slower.outcome == "NOT REPRODUCED"
    assert {r.verdict for r in slower.counted} == {"undecided"}
    assert all(r.difference.low < 2 < r.difference.high for r in slower.counted)
    # Two records are two runs: the run levels widen what 1% between processes shows.
    none = noise.Noise(0.01, math.inf, 0.0, math.inf, 0.0, math.inf, "interleaved")
    interleaved = comparison.compare(run, reference, noise=noise.NoiseModel(none, {}, ""))
    for wide, narrow in zip(slower.counted, interleaved.counted, strict=True):
        assert wide.difference.ratio == narrow.difference.ratio
        assert wide.difference.low < narrow.difference.low and narrow.difference.low > 1.95
        assert narrow.difference.high < 2.05 < wide.difference.high
    # Quiet and well known, one row slower: that row is slower against the shift.
    quiet = noise.NoiseModel(noise.Noise(0.01, 100, 0.002, 100, 0.002, 100, "q"), {}, "q")
    one = reference.model_copy(update={"rows": [
        r.model_copy(update={"repeats": [x.model_copy(update={"ms_per_step": 1.2 * x.ms_per_step})
                                         for x in r.repeats]}) if i == 0 and r.repeats else r
        for i, r in enumerate(reference.rows)]})  # fmt: skip
    found = comparison.compare(one, reference, noise=quiet)
    assert [r.verdict for r in found.counted][0] == "slower" and found.outcome == "NOT REPRODUCED"
    assert found.shift.word == "same"
    # Two repeats a side: INCONCLUSIVE, exit 3, 1 with --strict.
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_run(a, _with_samples(first, 1.0, 5, repeats=2))
    write_run(b, _with_samples(first, 1.0, 6, repeats=2))
    assert compare_command.main([str(a), str(b)]) == 3
    assert compare_command.main([str(a), str(b), "--strict"]) == 1


def _busy(record):
    """The record with every repeat taken while the idle check found the host busy."""
    rows = [
        row.model_copy(
            update={
                "repeats": [
                    r.model_copy(update={"host_busy": "pid 1 used 99%"}) for r in row.repeats
                ]
            }
        )
        if row.repeats
        else row
        for row in record.rows
    ]
    return record.model_copy(update={"rows": rows})


def test_a_change_measured_on_a_busy_host_is_undecided():
    first = read_run(FIRST)
    slower = _with_samples(first, 2.0, 7)
    busy = _busy(slower).rows
    reference = _with_samples(first, 1.0, 8)
    assert comparison.compare(slower, reference).shift.word == "slower"  # when idle
    cmp = comparison.compare(slower.model_copy(update={"rows": busy}), reference)
    assert {r.verdict for r in cmp.counted} == {"undecided"} and cmp.outcome == "INCONCLUSIVE"
    assert cmp.shift.word == "undecided"
    assert cmp.shift.why == "the whole run slower while the host was busy for 12 rows"
    # Fewer than three rows have no shift: each row's own change meets the gate.
    two = [row for row in busy if row.repeats][:2]
    cmp = comparison.compare(slower.model_copy(update={"rows": two}), reference)
    assert cmp.shift is None and {r.verdict for r in cmp.counted} == {"undecided"}
    assert all("while the host was busy for 5 of 5 run repeats" in r.why for r in cmp.counted)


def test_a_busy_side_undecides_only_the_change_it_could_have_made():
    # Other work takes time from the side it ran beside: a busy reference can make the run
    # read faster, never slower, so a slower run against it stands and a faster one does not.
    first = read_run(FIRST)
    slower, reference = _with_samples(first, 2.0, 7), _with_samples(first, 1.0, 8)
    cmp = comparison.compare(slower, _busy(reference))
    assert cmp.shift.word == "slower" and cmp.outcome == "NOT REPRODUCED"
    cmp = comparison.compare(reference, _busy(slower))  # the run faster, the reference busy
    assert cmp.shift.word == "undecided" and cmp.outcome == "INCONCLUSIVE"
    assert cmp.shift.why == "the whole run faster while the host was busy for 12 rows"
    # Without a shift (two rows): each row's own change meets the same gate.
    two = [row for row in _busy(reference).rows if row.repeats][:2]
    cmp = comparison.compare(slower, reference.model_copy(update={"rows": two}))
    assert cmp.shift is None and {r.verdict for r in cmp.counted} == {"slower"}
    two = [row for row in _busy(slower).rows if row.repeats][:2]
    cmp = comparison.compare(reference, slower.model_copy(update={"rows": two}))
    assert {r.verdict for r in cmp.counted} == {"undecided"}
    assert all(
        "faster while the host was busy for 5 of 5 ref repeats" in r.why for r in cmp.counted
    )


# --- the host probe: drift between the runs ---------------------------------------------------


def _on_cpu(record):
    """The record as a CPU host's: the host probe times the CPU, so its drift gates only
    comparisons of CPU records."""
    environment = record.environment.model_copy(deep=True)
    environment.devices.platform = "cpu"
    environment.devices.kind = "cpu"  # a GPU's kind on platform cpu: validate refuses it
    return record.model_copy(update={"environment": environment})


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
    # On a quiet host (a run level of 1%) a 12% change would read faster without the probe.
    quiet = noise.NoiseModel(noise.Noise(0.01, math.inf, 0.0, math.inf, 0.01, math.inf,
                                             "quiet"), {}, "quiet")  # fmt: skip
    run = _on_cpu(_with_samples(first, 0.88, 11))
    reference = _on_cpu(_with_samples(first, 1.0, 12))
    two = [row for row in run.rows if row.repeats][:2]  # no shift: each row meets the gate
    run2 = run.model_copy(update={"rows": two})
    without = comparison.compare(run2, reference, noise=quiet)
    assert {r.verdict for r in without.counted} == {"faster"}  # what compare said before
    assert without.host is None
    cmp = comparison.compare(
        _with_probes(run2, 264.0, 13), _with_probes(reference, 300.0, 14), noise=quiet
    )
    assert cmp.host.ratio == pytest.approx(0.88, abs=0.02) and cmp.host.readings == (5, 5)
    assert {r.verdict for r in cmp.counted} == {"undecided"} and not cmp.reproduced
    for row in cmp.counted:
        assert row.why.startswith(
            "the host ran 12% faster during the run than the reference (host probe); "
            "the change is within that"
        ), row.why
    # With every row, the whole run's shift is what the drift explains.
    whole = comparison.compare(
        _with_probes(run, 264.0, 13), _with_probes(reference, 300.0, 14), noise=quiet
    )
    assert whole.shift.word == "undecided" and whole.shift.why.startswith("the host ran 12%")
    # Between GPU records the probe (a CPU's speed) gates nothing.
    gpu = comparison.compare(_with_probes(_with_samples(first, 0.88, 11), 264.0, 13),
                             _with_probes(_with_samples(first, 1.0, 12), 300.0, 14),
                             noise=quiet)  # fmt: skip
    assert gpu.host is None and gpu.shift.word == "faster"
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_run(a, _with_probes(run, 264.0, 13))
    write_run(b, _with_probes(reference, 300.0, 14))
    assert compare_command.main([str(a), str(b), "--run-noise", "1"]) == 3
    out = capsys.readouterr().out
    header = out.split("Stack differences")[0]
    assert "- host drift: the host probe read 0.88" in header
    assert "(5 and 5 readings): the host ran 12% faster during the run" in header
    assert "the whole run's shift 1.0% (inf df), from --run-noise 1" in header
    assert "(the host ran 12% faster during the run than the reference" in header
    assert compare_command.main([str(a), str(b), "--run-noise", "1", "--strict"]) == 1


def test_a_real_change_on_a_steady_host_stays_slower():
    first = read_run(FIRST)
    run = _with_probes(_on_cpu(_with_samples(first, 2.0, 15)), 300.0, 16)
    reference = _with_probes(_on_cpu(_with_samples(first, 1.0, 17)), 300.0, 18)
    known = noise.NoiseModel(noise.Noise(0.01, 100, 0.01, 100, 0.02, 100, "known"), {}, "")
    cmp = comparison.compare(run, reference, noise=known)
    assert cmp.host.ratio == pytest.approx(1.0, abs=0.02)
    assert cmp.shift.word == "slower" and cmp.outcome == "NOT REPRODUCED"
    # The host twice as slow during the run explains the same 2x: undecided.
    slow_host = comparison.compare(_with_probes(run, 600.0, 16), reference, noise=known)
    assert slow_host.shift.word == "undecided" and slow_host.outcome == "INCONCLUSIVE"
    assert slow_host.shift.why.startswith(
        "the host ran 100% slower during the run than the reference"
    )


def test_records_without_probes_compare_as_before_and_say_so(tmp_path, capsys):
    first = read_run(FIRST)
    run = _with_samples(first, 2.0, 19)
    reference = _with_samples(first, 1.0, 20)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_run(a, _with_probes(run, 300.0, 21))
    write_run(b, reference)  # an older record: no probe readings
    assert compare_command.main([str(a), str(b)]) == 1  # slower, as before the probe existed
    out = capsys.readouterr().out
    assert out.count("no host probe in") == 1
    assert f"- no host probe in REFERENCE {b}: drift between the runs not checked" in out
    assert "the whole run slower (+" in out.split("Verdict")[1]
    # The published records: neither side has readings, said once.
    assert compare_command.main([str(RERUN), str(FIRST), "--format", "text"]) == 3
    out = capsys.readouterr().out
    assert out.count("no host probe in") == 1
    assert f"no host probe in RUN {RERUN} or REFERENCE {FIRST}" in out
    assert "INCONCLUSIVE: 4 comparable rows: 4 undecided" in out


# --- --format json ------------------------------------------------------------------------------


def _strict(name: str):
    raise ValueError(f"{name} is not JSON")


def compare_json(capsys, *argv: str) -> tuple[int, dict]:
    """compare --format json: the exit status and the one JSON object it printed."""
    code = compare_command.main([*argv, "--format", "json"])
    out = capsys.readouterr().out
    return code, json.loads(out, parse_constant=_strict)  # no NaN or Infinity either


def test_json_is_one_object_with_each_rows_statistics(capsys):
    code, document = compare_json(capsys, str(OPT0), str(AA2_A))
    # -O0 is 42% slower over the whole run, but 4 committed A/A records (3 df of shift)
    # cannot show that beyond this host's run-to-run shift; the decoder, slowed far less
    # than the rest, is faster against the shift (the host's drift, which moves every row
    # alike, no longer hides it: issue 51): NOT REPRODUCED, never REPRODUCED.
    assert code == 1 and document["outcome"] == "NOT REPRODUCED" and document["exit"] == 1
    assert document["reproduced"] is False
    assert document["noise"]["source"].startswith("cpu: 4 records in 1 A/A groups")
    assert document["noise"]["shift"] > 0 and document["timing"] == "ms_per_step"
    # -O0 slows every row, the shift undecided at this host's 12% between runs: uvit's whole
    # change, that run-to-run shift included, still lies beyond the band (and the drift's)
    assert document["summary"].startswith("NOT REPRODUCED: 4 comparable rows: 1 faster, 1 "
                                          "slower, 2 undecided")  # fmt: skip
    shift = document["shift"]
    assert shift["ratio"] == pytest.approx(1.42, abs=0.01) and shift["interval"][0] > 1.05
    assert shift["verdict"] == "undecided" and shift["p_holm"] > 0.05
    rows = {row["label"]: row for row in document["rows"]}
    assert list(rows) == ["uvit", "simple_dit", "causal_transformer", "causal_transformer (moe)"]
    for row in rows.values():
        assert {"label", "judged", "changes", "p_holm", "verdict", "reason", "mde"} <= set(row)
        judged = "total" if row["label"] == "uvit" else "against_shift"
        assert row["judged"] == judged and list(row["changes"])[0] == judged
        low, high = row["changes"]["total"]["interval"]
        assert 0 < low < high and 0 <= row["p_holm"] <= 1 and row["mde"] > 0.05
        assert row["repeats"] == [5, 5] and row["one_process"] is None
        assert (row["reason"] is None) == (row["verdict"] != "undecided")
        against = row["changes"]["against_shift"]
        assert against["interval"][0] < against["ratio"] < against["interval"][1]
    uvit = rows["uvit"]["changes"]
    # The judged ratio (of the repeats' geometric means), not the medians' (issue 40).
    assert uvit["total"]["ratio"] != uvit["median_ratio"]
    assert uvit["median_ratio"] == pytest.approx(52.9916 / 29.5794)


def test_json_names_a_given_run_level(capsys):
    code, document = compare_json(capsys, str(AA2_A), str(AA2_B), "--run-noise", "3")
    assert document["noise"]["source"] == "--run-noise 3" and document["noise"]["shift"] == 0.03
    assert document["noise"]["shift_df"] is None  # taken as known (inf is no JSON)
    assert {row["run_noise"] for row in document["rows"]} == {0.0}


@pytest.mark.parametrize(("run", "reference"), [(AA2_A, AA2_B), (OPT0, AA2_A)])
def test_swapping_the_records_gives_reciprocal_ratios_and_mirrored_verdicts(capsys, run, reference):
    code_ab, ab = compare_json(capsys, str(run), str(reference))
    code_ba, ba = compare_json(capsys, str(reference), str(run))
    assert code_ab == code_ba
    rows_ba = {row["label"]: row for row in ba["rows"]}
    assert len(ab["rows"]) == len(rows_ba) == 4
    for row in ab["rows"]:
        other = rows_ba[row["label"]]
        assert row["judged"] == other["judged"]
        for name in ("against_shift", "total"):
            mine, theirs = row["changes"][name], other["changes"][name]
            assert mine["ratio"] * theirs["ratio"] == pytest.approx(1, abs=1e-12)
            assert mine["interval"][0] * theirs["interval"][1] == pytest.approx(1, abs=1e-12)
            assert mine["interval"][1] * theirs["interval"][0] == pytest.approx(1, abs=1e-12)
        assert row["p_holm"] == pytest.approx(other["p_holm"], rel=1e-12)
        assert row["mde"] == pytest.approx(other["mde"], rel=1e-12)
        assert other["verdict"] == MIRROR.get(row["verdict"], row["verdict"])
    drift_ab, drift_ba = ab["host_drift"], ba["host_drift"]
    assert drift_ab["ratio"] * drift_ba["ratio"] == pytest.approx(1, abs=1e-12)
    assert drift_ab["interval"][0] * drift_ba["interval"][1] == pytest.approx(1, abs=1e-12)
    assert ab["shift"]["ratio"] * ba["shift"]["ratio"] == pytest.approx(1, abs=1e-12)
    assert ab["outcome"] == ba["outcome"]


def test_the_ratio_beside_an_interval_is_the_one_its_verdict_judged(capsys):
    """A row's figure is the median of its repeats, the verdict's estimate the ratio of
    their geometric means; with skewed repeats the two differ, and the cell that shows the
    interval shows the estimate it belongs to (never "-22% ... inside the band")."""
    run, reference = read_run(AA2_A), read_run(AA2_B)
    judged = {r.label: r.difference.ratio for r in comparison.compare(run, reference).counted}
    assert compare_command.main([str(AA2_A), str(AA2_B)]) in (0, 1, 3)
    cells = {}
    for line in capsys.readouterr().out.splitlines():
        parts = [part.strip() for part in line.strip("|").split("|")]
        if len(parts) > 4 and parts[0] in judged:
            cells[parts[0]] = parts[3]
    assert cells.keys() == judged.keys()
    for label, ratio in judged.items():
        assert cells[label].startswith(f"{ratio:.3f} ("), (label, cells[label], ratio)


def test_an_xla_flag_set_by_the_tool_is_a_stack_difference(capsys):
    """Issue 42: an -O0 run (--xla-flags) against a default one read "Stack differences:
    none recorded" while the site named the flag; both use stack_differences now."""
    o0 = RUNS / "20261203T090404Z-cpu-smoke-aa-o0-cpu-8c7e84d" / "step.json"
    default = RUNS / "20261203T085226Z-cpu-smoke-aa1-cpu-8c7e84d" / "step.json"
    assert compare_command.main([str(o0), str(default)]) in (1, 3)
    stack = capsys.readouterr().out.split("### Stack differences")[1].split("### Rows")[0]
    assert "| option xla_flags | --xla_backend_optimization_level=0 | unset |" in stack


def test_the_summarys_percentages_are_the_judged_ratios():
    """The verdict line's "+x%" beside a changed row is the ratio its interval and verdict
    judged (of the repeats' geometric means), not the ratio of the medians (issue 40: the
    old summary read "+37.6%" beside a judged 1.363)."""
    cmp = comparison.compare(read_run(OPT0), read_run(AA2_A), noise=QUIET)
    line = compare_report.summary(cmp)
    changed = [r for r in cmp.counted if r.changed]
    assert changed, line
    for r in changed:  # 4 rows: the change against the shift is the one judged
        assert f"{r.label} {r.verdict} ({r.relative[0] - 1:+.1%} against the shift)" in line
    medians = {r.label: r.run.ms_per_step / r.reference.ms_per_step for r in changed}
    assert any(f"{medians[r.label] - 1:+.1%}" != f"{r.relative[0] - 1:+.1%}" for r in changed)
