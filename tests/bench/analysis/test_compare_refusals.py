"""`dew compare` of records that hold no comparison: a timing no step can take, and one
measurement given twice. Each is one line on stderr, exit 2, never a traceback or a verdict
(a repeat of 1e308 ms ended in an OverflowError, exit 1; a byte copy read REPRODUCED)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dew.bench.record import validate
from dew.bench.record.schema.base import TIMING_BOUNDS
from dew.commands.main import main as dew

RUNS = Path(__file__).resolve().parents[3] / "results" / "runs"
AA1 = RUNS / "20261203T085226Z-cpu-smoke-aa1-cpu-8c7e84d" / "step.json"
AA2 = RUNS / "20261203T085756Z-cpu-smoke-aa2-cpu-8c7e84d" / "step.json"


def one_error_line(capsys) -> str:
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.startswith("dew compare: error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("value", [1e308, 1e-300, 2e9, 5e-7])
@pytest.mark.parametrize("where", ["repeat", "row"])
def test_a_timing_no_step_can_take_is_one_line_naming_file_row_and_field(
    tmp_path, capsys, where, value
):
    data = json.loads(AA1.read_text())
    if where == "repeat":
        data["rows"][1]["repeats"][2]["ms_per_step"] = value
        field = "$.rows[1].repeats[2].ms_per_step"
    else:
        data["rows"][1]["ms_per_step"] = value
        field = "$.rows[1].ms_per_step"
    run = tmp_path / "run.json"
    run.write_text(json.dumps(data))
    assert dew(["compare", str(run), str(AA2)]) == 2
    err = one_error_line(capsys)
    assert f"RUN {run}: {field}: a timing of {value:g} cannot be a step's time" in err, err
    # The bound is the schema's: validate refuses the record too (an invalid file, exit 1).
    assert validate.main([str(run)]) == 1
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and field in err and "[1e-06, 1e+09]" in err


def test_timings_at_the_bounds_are_compared(tmp_path, capsys):
    """The schema's bounds hold no overflow: a row of 1e-6 and 1e9 ms repeats still ends in
    a verdict (and a run a billion times slower is NOT REPRODUCED)."""
    low, high = TIMING_BOUNDS
    data = json.loads(AA1.read_text())
    for row in data["rows"]:
        for i, repeat in enumerate(row["repeats"]):
            repeat["ms_per_step"] = (low, high)[i % 2]
        row["ms_per_step"] = low  # the median of 5 at low, high, low, high, low
    run = tmp_path / "run.json"
    run.write_text(json.dumps(data))
    assert dew(["compare", str(run), str(AA2)]) in (1, 3)
    assert "Traceback" not in capsys.readouterr().err
    for row in data["rows"]:
        for repeat in row["repeats"]:
            repeat["ms_per_step"] = high
        row["ms_per_step"] = high
    run.write_text(json.dumps(data))
    assert dew(["compare", str(run), str(AA2)]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_a_byte_copy_of_a_record_is_no_reproduction(tmp_path, capsys):
    copy = tmp_path / "copy.json"
    shutil.copyfile(AA1, copy)
    assert dew(["compare", str(copy), str(AA1)]) == 2
    err = one_error_line(capsys)
    assert (f"RUN {copy} and REFERENCE {AA1} hold the same measurements (every repeat "
            "identical): a record cannot reproduce itself") in err  # fmt: skip


def test_two_records_of_one_measurement_are_no_reproduction(tmp_path, capsys):
    """Another date, another order of rows, the same repeats: still one measurement."""
    data = json.loads(AA1.read_text())
    data["created"] = "2027-01-01T00:00:00+00:00"
    data["rows"] = data["rows"][::-1]
    for row in data["rows"]:
        row["repeats"] = row["repeats"][::-1]
    same = tmp_path / "same.json"
    same.write_text(json.dumps(data))
    assert dew(["compare", str(AA1), str(same), "--format", "json"]) == 2
    assert "hold the same measurements" in one_error_line(capsys)
    # One repeat of one row measured again: a comparison, whatever its verdict.
    data["rows"][0]["repeats"][0]["ms_per_step"] *= 1.01
    same.write_text(json.dumps(data))
    assert dew(["compare", str(AA1), str(same), "--format", "json"]) in (0, 1, 3)
    assert json.loads(capsys.readouterr().out)["outcome"]
