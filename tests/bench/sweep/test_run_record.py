"""dew.bench.sweep.run_record: a step run's record opened or resumed, its cases split into
done and to-do, each repeat accepted into its row and written, --repeats auto's stops, and
the line a stop signal ends with. No case is run: the rows are made here."""

from __future__ import annotations

from pathlib import Path

import pytest

from dew.bench.analysis.repeats import step_repeat
from dew.bench.record.schema import StepRow, read_run
from dew.bench.sweep.presets import Case
from dew.bench.sweep.run_record import (
    RecordNotWritten,
    Result,
    Rounds,
    RunRecord,
    merge_repeat,
)
from dew.bench.sweep.settings import Options

REPO = Path(__file__).resolve().parents[3]
# A CPU record of the repository: its environment stands for the one a run captures.
EARLIER = REPO / "results/runs/20261202T104418Z-cpu-smoke-cpu-1515e41-dirty/step.json"
DIT, UVIT = Case(architecture="simple_dit", batch=8), Case(architecture="uvit", batch=8)


def _options(**overrides) -> Options:
    return Options(**{"preset": "cpu-smoke", "steps": 3, "warmup": 0, **overrides})


def _open(cases=(DIT, UVIT), previous=None, path=None, **options) -> RunRecord:
    return RunRecord.open(
        _options(**options), cases, previous=previous, environment=read_run(EARLIER).environment,
        idle_check=None, command="test", warnings=["a warning"], path=path,
    )  # fmt: skip


def _repeat(case: Case, ms: float, status: str = "ok") -> StepRow:
    """One repeat's row as a case's process makes it."""
    if status != "ok":
        return StepRow(**case.row_fields(), status="failed", error="it broke")
    repeats = [step_repeat(ms, [ms, ms * 1.01, ms * 0.99], 1.0)]
    return StepRow(**case.row_fields(), status="ok", ms_per_step=ms, repeats=repeats,
                   samples_per_s=8e3 / ms, gflop_per_step=0.5)  # fmt: skip


def _result(record: RunRecord, case: Case, ms: float, status: str = "ok") -> Result:
    return Result(record.cases.index(case), case, _repeat(case, ms, status), seconds=1.0)


# --- open, resume ----------------------------------------------------------------------------


def test_a_new_record_holds_this_runs_cases_and_no_row():
    record = _open()
    run = record.run
    assert (run.kind, run.command, run.note, run.rows) == ("step", "test", "a warning", [])
    assert [c["architecture"] for c in run.settings.cases] == ["simple_dit", "uvit"]
    assert record.rounds == Rounds(1) and record.finished == 0


def test_resume_keeps_the_earlier_rows_cases_and_start(tmp_path):
    earlier = _open(cases=[DIT], path=str(tmp_path / "run.json"))
    earlier.accept(_result(earlier, DIT, 10.0))
    previous = read_run(tmp_path / "run.json")
    record = _open(cases=[UVIT], previous=previous)
    assert record.run.created == previous.created
    assert record.run.rows == previous.rows  # simple_dit's row stays, unselected
    assert [c["architecture"] for c in record.run.settings.cases] == ["simple_dit", "uvit"]


def test_rounds_follow_the_options():
    assert Rounds.of(_options(repeats=3)) == Rounds(3)
    assert Rounds.of(_options(repeats=3, compile_only=True)) == Rounds(1)
    auto = Rounds.of(_options(repeats="auto", target_mde=20.0, max_repeats=6))
    assert auto == Rounds(6, auto=True, target=0.2)


# --- split, accept ---------------------------------------------------------------------------


def test_split_reruns_what_is_not_ok_and_counts_what_the_record_holds():
    record = _open(repeats=2)
    record.accept(_result(record, DIT, 10.0))
    record.accept(_result(record, UVIT, 5.0, status="failed"))
    assert record.finished == 2
    done, todo = record.split(0)  # round 1 again (a --resume): simple_dit is ok, uvit failed
    assert done == [0] and todo == [(1, UVIT)]
    done, todo = record.split(1)  # round 2: simple_dit holds one repeat, it needs two
    assert done == [] and todo == [(0, DIT), (1, UVIT)]
    assert record.finished == 3


def test_accept_merges_each_repeat_into_its_row_with_the_rounds_host_readings():
    record = _open(repeats=3)
    for ms, busy in ((10.0, None), (12.0, "load 9.0"), (11.0, None)):
        row = record.accept(_result(record, DIT, ms), busy=busy, probe_ms=3.14159)
    assert row == record.run.rows[0] and len(record.run.rows) == 1
    assert [r.ms_per_step for r in row.repeats] == [10.0, 12.0, 11.0]
    assert row.ms_per_step == 11.0 and row.ms_per_step_ci95 is not None
    assert [r.host_busy for r in row.repeats] == [None, "load 9.0", None]
    assert {r.host_probe_ms for r in row.repeats} == {3.1416}
    assert "repeat 2: the host was busy (load 9.0)" in row.warnings
    assert row.samples_per_s == pytest.approx(8e3 / 11.0)  # follows the median


def test_a_failed_repeat_after_ok_ones_is_a_warning_and_a_failed_row_is_replaced():
    ok = _repeat(DIT, 10.0)
    kept = merge_repeat(merge_repeat(None, ok), _repeat(DIT, 0, status="failed"))
    assert kept.status == "ok" and kept.warnings[-1] == "repeat 2 failed: it broke"
    failed = merge_repeat(None, _repeat(DIT, 0, status="failed"))
    assert merge_repeat(failed, ok).status == "ok"


# --- write -----------------------------------------------------------------------------------


def test_every_accepted_row_is_on_disk_and_only_where_this_process_writes(tmp_path):
    out = tmp_path / "run.json"
    record = _open(path=str(out))
    record.accept(_result(record, DIT, 10.0))
    assert read_run(out).rows == record.run.rows
    record.accept(_result(record, UVIT, 5.0))
    assert read_run(out) == record.run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]  # no temporary left
    follower = _open(path=str(tmp_path / "other.json"))
    follower.writes = False  # process 1 of a multi-process run
    follower.accept(_result(follower, DIT, 10.0))
    assert not (tmp_path / "other.json").exists()


def test_a_write_that_fails_keeps_the_file_and_says_what_the_record_keeps(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    record = _open(path=str(blocker / "run.json"))
    with pytest.raises(RecordNotWritten) as failed:
        record.accept(_result(record, DIT, 10.0))
    assert failed.value.rows[0].architecture == "simple_dit"
    assert str(failed.value).endswith(
        "no record; its figures are on stdout; no further case started"
    )


@pytest.mark.parametrize("processes", [1, 2])
def test_a_run_cut_short_says_it_is_partial_until_its_end(tmp_path, processes):
    # ec83e06: one process wrote no mark at all, so a stopped run's record read as whole
    out = tmp_path / "run.json"
    record = _open(path=str(out))
    record.processes = processes
    record.accept(_result(record, DIT, 10.0))
    assert read_run(out).partial == "1 of 2 cases finished; the run had not ended at this write"
    record.accept(_result(record, UVIT, 5.0))
    record.close()
    assert read_run(out).partial is None and read_run(out).note == "a warning"


def test_a_stop_signal_marks_the_record_stopped(tmp_path):
    out = tmp_path / "run.json"
    record = _open(path=str(out))
    record.accept(_result(record, DIT, 10.0))
    record.interrupted_line("SIGINT")
    assert read_run(out).partial == "stopped by SIGINT: 1 of 2 cases finished"


# --- --repeats auto, a stop signal -----------------------------------------------------------


def test_auto_stops_a_steady_row_and_every_row_says_why(tmp_path):
    out = tmp_path / "run.json"
    record = _open(path=str(out), repeats="auto", target_mde=50.0, max_repeats=5)
    assert record.stop_measured() == [] and not record.all_stopped  # no row yet
    for ms in (10.0, 10.01, 9.99):
        record.accept(_result(record, DIT, ms))
    record.accept(_result(record, UVIT, 5.0))
    ((case, why),) = record.stop_measured()  # uvit: one repeat, too few to judge
    assert case == DIT and why.startswith("MDE ") and " at 3 repeats" in why  # this kind's noise
    assert record.split(3)[1] == [(1, UVIT)]  # a stopped case leaves the rounds
    record.close()
    dit, uvit = read_run(out).rows
    assert dit.warnings[-1] == f"repeats auto: {why}"
    assert uvit.warnings[-1] == "repeats auto: reached --max-repeats 5"


@pytest.mark.parametrize(
    ("repeats", "path", "said"),
    [
        (1, None, "1 of 2 cases finished; no --json-out, so no record keeps them"),
        (1, "missing", "1 of 2 cases finished; no record written"),
        (3, "run.json", "1 of 6 case repeats finished (2 cases x 3); the record keeps them; "
                        "--resume continues"),
    ],
)  # fmt: skip
def test_a_stop_signal_says_how_many_runs_the_record_keeps(tmp_path, repeats, path, said):
    record = _open(repeats=repeats, path=str(tmp_path / path) if path else None)
    if path == "run.json":
        record.accept(_result(record, DIT, 10.0))
    else:
        record.finished = 1
    assert record.interrupted_line() == f"interrupted: {said}"
