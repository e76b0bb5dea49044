"""Issue 63's examples: no record lost to another output's path or passed off as whole, a
record checked against itself, compare refusing what cannot be compared. Each of these read
otherwise at ec83e06 (named in each test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dew.commands.main import main as dew

RUNS = Path(__file__).resolve().parents[2] / "results" / "runs"
AA1 = RUNS / "20261202-cpu-smoke-stats-aa1-a" / "step.json"
AA2 = RUNS / "20261202-cpu-smoke-stats-aa1-b" / "step.json"
COMPILE_ONLY = RUNS / "20261203T072252Z-small-compile-only-cpu-d90a3f0" / "step.json"
LOADER = RUNS / "20261203-first-gpu-run-cpu"  # data-workers-0.json, data-workers-8.json
LOADER_AGAIN = RUNS / "20261203T072745Z-cpu-smoke-cpu-d90a3f0" / "data-workers-0.json"


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def edited(tmp_path: Path, source: Path, name: str, change) -> Path:
    data = json.loads(source.read_text())
    change(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


# --- every output against every other, before anything runs -----------------------------


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--log-dir", "x.json"], "--json-out and --log-dir are the same path"),
        (["--log-dir", "x.json/logs"], "is inside --json-out"),
        (["--profile-dir", "x.json"], "--json-out and --profile-dir are the same path"),
        (["--compilation-cache-dir", "x.json"], "are the same path"),
    ],
)
def test_two_outputs_at_one_path_are_refused_even_under_check_only(
    tmp_path, monkeypatch, capsys, flags, said
):
    # ec83e06: --json-out x.json --log-dir x.json passed --check-only, ran, and lost its
    # record to the folder of logs made where it was to go
    monkeypatch.chdir(tmp_path)
    argv = ["step", "--architectures", "simple_dit", "--compile-only", "--json-out", "x.json"]
    assert dew([*argv, *flags, "--check-only"]) == 2
    assert said in one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []  # a refusal makes nothing


def test_resume_of_a_missing_record_says_it_starts_one(tmp_path, monkeypatch, capsys):
    # ec83e06: silent. pyperf's --append begins a missing file too, so it is not refused
    monkeypatch.chdir(tmp_path)
    argv = ["step", "--architectures", "simple_dit", "--compile-only", "--json-out", "gone.json"]
    dew([*argv, "--resume", "--check-only"])
    assert "--resume: gone.json does not exist yet; starting a new record" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("content", "said"),
    [("", "--resume {path} is empty (0 bytes)"), ("loader", "--resume: {path} is a 'data' record")],
)
def test_check_only_reads_the_record_resume_continues(tmp_path, capsys, content, said):
    # found by issue 63's probe: --check-only passed --resume of an empty file
    path = tmp_path / "run.json"
    path.write_text(
        content if content != "loader" else (LOADER / "data-workers-0.json").read_text()
    )
    argv = ["step", "--architectures", "simple_dit", "--compile-only", "--json-out", str(path)]
    assert dew([*argv, "--resume", "--check-only"]) == 2
    assert said.format(path=path) in one_error_line(capsys)


def test_an_empty_file_is_named_empty(tmp_path, capsys):
    # ec83e06: "not JSON: Expecting value at line 1 column 1"
    empty = tmp_path / "run.json"
    empty.write_text("")
    assert dew(["validate", str(empty)]) == 2
    assert f"{empty} is empty (0 bytes); give a results record" in one_error_line(capsys)


# --- a partial record says so, and so do validate and compare ---------------------------


def cut(data: dict) -> None:
    data["partial"] = "stopped by SIGINT: 3 of 4 cases finished"
    data["rows"] = data["rows"][:3]


def test_validate_calls_a_partial_record_partial(tmp_path, capsys):
    # ec83e06: a stopped run's record read "ok (1 rows, 0 failed)" (no field said otherwise)
    part = edited(tmp_path, AA1, "part.json", cut)
    assert dew(["validate", str(part)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{part}: valid but PARTIAL (step run, 3 rows, 0 failed; stopped by")
    assert ": ok" not in out


def test_compare_names_a_partial_sides_missing_rows_first(tmp_path, capsys):
    part = edited(tmp_path, AA1, "part.json", cut)
    dew(["compare", str(part), str(AA2), "--format", "text"])
    headline = capsys.readouterr().out.splitlines()[2]
    assert headline.startswith(
        f"PARTIAL RUN {part} (stopped by SIGINT: 3 of 4 cases finished); it lacks "
        "causal_transformer (moe)."
    ), headline
    dew(["compare", str(part), str(AA2), "--format", "json"])
    assert json.loads(capsys.readouterr().out)["partial"].startswith(f"PARTIAL RUN {part} (")


# --- validate holds a record against itself ----------------------------------------------


def test_a_device_kind_of_another_platform_is_invalid(tmp_path, capsys):
    # ec83e06: platform cpu with kind "TPU v5 lite" passed validate
    def tpu_kind(data):
        data["environment"]["devices"]["kind"] = "TPU v5 lite"

    wrong = edited(tmp_path, AA1, "kind.json", tpu_kind)
    assert dew(["validate", str(wrong)]) == 1
    assert "kind 'TPU v5 lite' is no device of platform 'cpu'" in capsys.readouterr().err


def test_a_row_figure_outside_its_repeats_is_invalid(tmp_path, capsys):
    # ec83e06: a row's ms/step far beside repeats of ~33 ms passed validate (1e308 is now
    # past the schema's bounds: 440 stands inside them)
    def inflate(data):
        data["rows"][0]["ms_per_step"] = 440.0

    wrong = edited(tmp_path, AA1, "big.json", inflate)
    assert dew(["validate", str(wrong)]) == 1
    assert "$.rows[0].ms_per_step: 440 is outside its 5 repeats'" in capsys.readouterr().err


def test_every_committed_record_agrees_with_itself(capsys):
    assert dew(["validate", str(RUNS.parent)]) == 0, capsys.readouterr().err


# --- compare refuses what cannot be compared ---------------------------------------------


def test_loader_rows_of_other_workers_are_refused(capsys):
    # ec83e06: 8 workers against 0 matched by name and judged
    run, ref = LOADER / "data-workers-8.json", LOADER / "data-workers-0.json"
    assert dew(["compare", str(run), str(ref)]) == 2
    assert "share no comparable row" in one_error_line(capsys)


def test_a_loader_comparison_suggests_no_dew_ab(capsys):
    # ec83e06: "Run `dew ab` with 62 rounds", which cannot run the loader
    dew(["compare", str(LOADER / "data-workers-0.json"), str(LOADER_AGAIN)])
    out = capsys.readouterr().out
    assert "Comparison" in out and "dew ab" not in out and "nox -s ab" not in out


def test_a_timed_run_against_a_compile_only_reference_is_refused(capsys):
    # ec83e06: exit 3 under a garbled headline
    assert dew(["compare", str(AA1), str(COMPILE_ONLY)]) == 2
    assert f"REFERENCE {COMPILE_ONLY} is compile-only" in one_error_line(capsys)
