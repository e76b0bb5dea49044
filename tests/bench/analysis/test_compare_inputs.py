"""compare on input a user can type wrong: one line `<prog>: error: ...`, exit 2, no
traceback, nothing printed before it and no file changed."""

import json
import math
import shutil
from pathlib import Path

import pytest

from dew.bench.analysis import compare_command, matching
from dew.bench.record.schema import read_run

PUBLISHED = Path(__file__).resolve().parents[3] / "results" / "published"
FIRST = PUBLISHED / "2026-09-02-rtx4080-6b0f119-small.json"
RERUN = PUBLISHED / "2026-09-05-rtx4080-9886c20-rerun.json"
LOADER = PUBLISHED / "oxford-flowers-loader.json"

pytestmark = pytest.mark.usefixtures("pinned_noise")  # conftest: the A/A records' table


def one_error_line(capsys) -> str:
    out, err = capsys.readouterr()
    assert out == "", "nothing is printed before a usage error"
    assert err.startswith(f"{compare_command.PROG}: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


@pytest.fixture
def records(tmp_path):
    """Copies of the 09-05 rerun (run) and the 09-02 table (reference)."""
    run, ref = tmp_path / "run.json", tmp_path / "ref.json"
    shutil.copyfile(RERUN, run)
    shutil.copyfile(FIRST, ref)
    return run, ref


def test_plot_onto_an_input_is_refused_and_the_input_kept(records, capsys):
    run, ref = records
    for target in (ref, run):
        before = target.read_bytes()
        assert compare_command.main([str(run), str(ref), "--plot", str(target)]) == 2
        err = one_error_line(capsys)
        assert f"--plot {target} is also an input of this run" in err
        assert target.read_bytes() == before
    # --overwrite does not make an input an output.
    assert compare_command.main([str(run), str(ref), "--plot", str(ref), "--overwrite"]) == 2
    assert "is also an input" in one_error_line(capsys)
    assert ref.read_bytes() == FIRST.read_bytes()


def test_plot_onto_an_existing_file_needs_overwrite(records, tmp_path, capsys):
    run, ref = records
    chart = tmp_path / "chart.png"
    chart.write_bytes(b"an earlier chart")
    assert compare_command.main([str(run), str(ref), "--plot", str(chart)]) == 2
    assert f"--plot {chart} exists; pass --overwrite" in one_error_line(capsys)
    assert chart.read_bytes() == b"an earlier chart"
    # The published figures are one draw each: every row undecided, INCONCLUSIVE (exit 3).
    assert compare_command.main([str(run), str(ref), "--plot", str(chart), "--overwrite"]) == 3
    assert "\nINCONCLUSIVE: 4 comparable rows: 4 undecided" in capsys.readouterr().out
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chart.png", "ref.json", "run.json"]


def test_unwritable_plot_is_refused_before_the_comparison_is_printed(records, tmp_path, capsys):
    run, ref = records
    (tmp_path / "file.txt").write_text("a regular file")
    chart = tmp_path / "file.txt" / "chart.png"
    assert compare_command.main([str(run), str(ref), "--plot", str(chart)]) == 2
    err = one_error_line(capsys)  # and no REPRODUCED on stdout
    assert f"--plot {chart}" in err and "not a directory" in err
    directory = tmp_path / "charts"
    directory.mkdir()
    assert compare_command.main([str(run), str(ref), "--plot", str(directory)]) == 2
    assert "is a directory" in one_error_line(capsys)


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    binary = tmp_path / "chart.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00binary")
    directory = tmp_path / "records"
    directory.mkdir()
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"kind": "step",')
    files = {
        "binary": (binary, "is not a text file"),
        "directory": (directory, "is a directory"),
        "missing": (tmp_path / "missing.json", "no such file"),
        "bad JSON": (bad_json, "not JSON: "),
        "empty": (tmp_path / "empty.json", "is empty (0 bytes); give a results record"),
    }
    files["empty"][0].write_text("")
    for name, value in (("list", [1, 2]), ("number", 3), ("null", None), ("string", "x")):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(value))
        files[f"JSON {name}"] = (path, "not a results record: the JSON is")
    return files


@pytest.mark.parametrize(
    "kind",
    ["binary", "directory", "missing", "bad JSON", "empty", "JSON list", "JSON number"]
    + ["JSON null", "JSON string"],
)
@pytest.mark.parametrize("role", ["RUN", "REFERENCE"])
def test_a_file_that_is_no_record_is_one_line_naming_it(tmp_path, capsys, kind, role):
    path, problem = _bad_files(tmp_path)[kind]
    argv = [str(path), str(FIRST)] if role == "RUN" else [str(RERUN), str(path)]
    assert compare_command.main(argv) == 2
    err = one_error_line(capsys)
    assert f"{role} {path}" in err and problem in err


def test_a_record_with_no_rows_is_not_compared(tmp_path, capsys):
    empty = tmp_path / "empty-run.json"
    document = json.loads(FIRST.read_text())
    document["rows"] = []
    empty.write_text(json.dumps(document))
    assert compare_command.main([str(empty), str(FIRST)]) == 2
    assert f"RUN {empty}: $.rows: the record has no rows" in one_error_line(capsys)


def test_a_step_record_against_a_loader_record_is_one_line(capsys):
    assert compare_command.main([str(RERUN), str(LOADER)]) == 2
    err = one_error_line(capsys)
    assert f"RUN {RERUN} is a step record and REFERENCE {LOADER} a data record" in err
    assert compare_command.main([str(LOADER), str(RERUN)]) == 2
    assert "is a data record" in one_error_line(capsys)


@pytest.mark.parametrize("band", ["-5", "100", "250", "nan", "inf"])
def test_band_outside_a_percentage_is_one_line(capsys, band):
    assert compare_command.main([str(RERUN), str(FIRST), "--band", band]) == 2
    err = one_error_line(capsys)
    assert f"--band {float(band):g} is not a percentage in [0, 100)" in err


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--target-mde", "0"], "--target-mde 0 is not a percentage in (0, 1000)"),
        (["--target-mde", "-10"], "--target-mde -10 is not a percentage in (0, 1000)"),
        (["--target-mde", "nan"], "--target-mde nan is not a percentage in (0, 1000)"),
        (["--run-noise", "-1"], "--run-noise -1 is not a percentage in [0, 100)"),
        (["--run-noise", "100"], "--run-noise 100 is not a percentage in [0, 100)"),
    ],
)
def test_target_mde_and_run_noise_outside_their_range_are_one_line(capsys, flags, expected):
    assert compare_command.main([str(RERUN), str(FIRST), *flags]) == 2
    assert expected in one_error_line(capsys)


def test_a_compile_only_run_has_no_json(tmp_path, capsys):
    document = json.loads(FIRST.read_text())
    document["settings"]["compile_only"] = True
    run = tmp_path / "compile-only.json"
    run.write_text(json.dumps(document))
    assert compare_command.main([str(run), str(FIRST), "--format", "json"]) == 2
    assert f"RUN {run} is compile-only: its parity table has md and text" in one_error_line(capsys)


@pytest.mark.parametrize(
    "argv, expected",
    [
        ([], "missing"),
        ([str(RERUN), "--format", "html"], "'html' is not valid; valid: auto, md, text, json"),
        ([str(RERUN), "--format", "yaml"], "'yaml' is not valid; valid: auto, md, text, json"),
        ([str(RERUN), "--target-mde", "abc"], "--target-mde"),
        ([str(RERUN), "--run-noise", "much"], "--run-noise"),
        ([str(RERUN), "--band", "wide"], "--band"),
        ([str(RERUN), str(FIRST), str(FIRST)], "unrecognized argument"),
        ([str(RERUN), "--colour"], "unrecognized argument --colour"),
    ],
)
def test_bad_flags_are_one_line(capsys, argv, expected):
    assert compare_command.main(argv) == 2
    assert expected in one_error_line(capsys)


def test_default_reference_skips_files_that_are_no_record(tmp_path):
    published = tmp_path / "published"
    published.mkdir()
    (published / "notes.json").write_bytes(b"\xff\xfe not a record")
    (published / "list.json").write_text("[]")
    shutil.copyfile(FIRST, published / "first.json")
    run = read_run(RERUN)
    assert compare_command.default_reference(run, RERUN, tmp_path) == published / "first.json"


def test_a_timed_runs_default_reference_is_never_compile_only(tmp_path):
    # bench-gpu compares with the default reference: a compile-only table of the device
    # and preset, which compare now refuses against a timed run (exit 2), failed the session
    from dew.bench.record.schema import write_run

    first = read_run(FIRST)
    only = first.model_copy(update={"settings": first.settings.model_copy(
        update={"compile_only": True})})  # fmt: skip
    write_run(tmp_path / "compile-only.json", only)
    run = read_run(RERUN)
    assert compare_command.default_reference(run, RERUN, tmp_path) is None
    shutil.copyfile(FIRST, tmp_path / "timed.json")
    assert compare_command.default_reference(run, RERUN, tmp_path) == tmp_path / "timed.json"


def test_same_gflop_is_the_one_tolerance():
    assert matching.same_gflop(292.9, 292.949)  # the published rounding
    assert not matching.same_gflop(292.9, 292.9 * (1 + 2 * matching.GFLOP_TOLERANCE))
    assert math.isclose(matching.GFLOP_TOLERANCE, 1e-3)


@pytest.mark.parametrize(
    ("where", "value"),
    [("repeat", math.inf), ("repeat", 0.0), ("repeat", math.nan), ("row", math.inf),
     ("row", 0.0)],
)  # fmt: skip
def test_a_timing_that_is_no_measurement_is_refused_naming_the_file_and_field(
    records, capsys, where, value
):
    """inf, NaN or 0 ms: exit 2 with the file and the field, never a verdict's 0, 1 or 3
    (inf passed the schema and ended in a ValueError, exit 1; a 0 ms repeat was dropped)."""
    run, ref = records
    data = json.loads(run.read_text())
    row = next(r for r in data["rows"] if r.get("status") == "ok")
    if where == "repeat":
        row["repeats"] = [{"ms_per_step": row["ms_per_step"], "synced_ms": []},
                          {"ms_per_step": value, "synced_ms": []}]  # fmt: skip
        field = "repeats[1].ms_per_step"
    else:
        row["ms_per_step"] = value
        field = ".ms_per_step"
    run.write_text(json.dumps(data))  # json writes inf as Infinity, NaN as NaN
    assert compare_command.main([str(run), str(ref)]) == 2
    err = one_error_line(capsys)
    assert f"RUN {run}" in err and field in err, err


@pytest.mark.parametrize("alpha", ["0.5", "0.7"])
def test_an_alpha_the_equivalence_test_cannot_use_is_refused(records, capsys, alpha):
    # TOST holds the 1 - 2 alpha interval inside the band: at 0.5 or above it has none
    run, ref = records
    assert compare_command.main([str(run), str(ref), "--alpha", alpha]) == 2
    assert f"--alpha {alpha} is not a significance level in (0, 0.5)" in one_error_line(capsys)
