"""validate's exit codes: 0 every record valid, 1 a record invalid (or with no rows), 2 a
file that is no JSON object or a bad command line, each such file one line naming it."""

import json
from pathlib import Path

import pytest

from dew.bench.record import validate

PUBLISHED = Path(__file__).resolve().parents[3] / "results" / "published"
FIRST = PUBLISHED / "2026-09-02-rtx4080-6b0f119-small.json"
ERROR = f"{validate.PROG}: error: "
RESULTS = PUBLISHED.parent


def write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


@pytest.fixture
def bad_files(tmp_path):
    directory = tmp_path / "a-directory.json"
    directory.mkdir()
    return {
        "binary": (write(tmp_path / "chart.json", b"\x89PNG\r\n\x1a\n\x00"), "not a text file"),
        "directory": (directory, "is a folder with no .json file in it"),
        "missing": (tmp_path / "missing.json", "no such file"),
        "bad JSON": (write(tmp_path / "bad.json", '{"rows": ['), "not JSON: "),
        "JSON list": (write(tmp_path / "list.json", "[]"), "the JSON is a list, not an object"),
        "JSON number": (write(tmp_path / "n.json", "7"), "the JSON is a number, not an object"),
        "JSON null": (write(tmp_path / "null.json", "null"), "the JSON is null, not an object"),
    }


@pytest.mark.parametrize(
    "kind", ["binary", "directory", "missing", "bad JSON", "JSON list", "JSON number", "JSON null"]
)
def test_a_file_that_is_no_record_is_one_line_and_exit_2(bad_files, capsys, kind):
    path, problem = bad_files[kind]
    assert validate.main([str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"{ERROR}{path}") and problem in err


def test_a_record_with_no_rows_is_invalid_not_ok(tmp_path, capsys):
    document = json.loads(FIRST.read_text())
    document["rows"] = []
    empty = write(tmp_path / "empty.json", json.dumps(document))
    assert validate.main([str(empty)]) == 1
    out, err = capsys.readouterr()
    assert "ok" not in out
    assert err == f"{empty}: $.rows: the record has no rows, so it holds no result\n"


def test_every_file_is_checked_and_the_worst_decides(tmp_path, bad_files, capsys):
    document = json.loads(FIRST.read_text())
    document["rows"][0]["ms_per_step"] = -1
    invalid = write(tmp_path / "invalid.json", json.dumps(document))
    missing = bad_files["missing"][0]
    assert validate.main([str(FIRST), str(invalid)]) == 1
    capsys.readouterr()
    assert validate.main([str(missing), str(FIRST), str(invalid)]) == 2
    out, err = capsys.readouterr()
    assert f"{FIRST}: ok (step run, 12 rows, 0 failed)" in out
    assert f"{ERROR}{missing}: no such file\n" in err
    assert f"{invalid}: $.rows[0].ms_per_step: Input should be greater" in err
    assert err.endswith("2 of 3 files invalid (1 not a JSON object)\n")


@pytest.mark.parametrize(
    "argv, expected",
    [([], "missing PATH"), ([str(FIRST), "--strict"], "unrecognized argument --strict")],
)
def test_bad_command_line_is_one_line_and_exit_2(capsys, argv, expected):
    assert validate.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(ERROR) and expected in err


def test_load_names_the_file_and_its_first_problem(tmp_path):
    document = json.loads(FIRST.read_text())
    del document["command"], document["kind"]
    broken = write(tmp_path / "broken.json", json.dumps(document))
    with pytest.raises(validate.UsageError) as caught:
        validate.load(broken, "RUN")
    message = str(caught.value)
    assert message.startswith(f"RUN {broken}: $.") and "(+1 more;" in message
    assert validate.load(FIRST).kind == "step"


def test_the_committed_results_folder_passes_whole(capsys):
    """Every file dew wrote under results/ (records, noise.json, ab-plan.json, compare.json,
    the schemas), walked from the folder, each checked as what it is."""
    assert validate.main([str(RESULTS)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    kinds = ("step run", "data run", "run level", "superseded records", "A/B plan",
             "comparison", "JSON Schema", "wall time", "step exit")  # fmt: skip
    for kind in kinds:
        assert f": ok ({kind}" in out, kind


# One file of each of dew's other kinds, and a change that breaks its own model.
DOCUMENTS = {
    "run level": ("noise.json", lambda d: d["kinds"]["cpu"].update(process=-0.1), "$.kinds"),
    "superseded records": (
        "superseded.json",
        lambda d: d["records"].update({"runs/x/step.json": "no such reason"}),
        "$",
    ),
    "A/B plan": (
        "runs/20261204T174405Z-ab-cpu-smoke-cpu-cbb6b2f/ab-plan.json",
        lambda d: d["order"][0].update(side="C"),
        "$.order[0].side",
    ),
    "comparison": (
        "runs/20261204T173319Z-cpu-smoke-o0-cpu-cbb6b2f/compare.json",
        lambda d: d.update(outcome="PROBABLY FINE"),
        "$.outcome",
    ),
    "JSON Schema": ("schema/step_row.schema.json", lambda d: d.update(type="array"), "$.type"),
    "wall time": (
        "runs/20261207T054932Z-reproduce-tpu-v5e-89b95f9/wall.json",
        lambda d: d.update(wall_s=-1),
        "$.wall_s",
    ),
    "step exit": (
        "runs/20261207T054932Z-reproduce-tpu-v5e-89b95f9/done.json",
        lambda d: d.update(exit="three"),
        "$.exit",
    ),
}


@pytest.mark.parametrize("kind", DOCUMENTS)
def test_each_other_kind_is_checked_against_its_own_model(tmp_path, capsys, kind):
    name, breaks, where = DOCUMENTS[kind]
    document = json.loads((RESULTS / name).read_text())
    good = write(tmp_path / "good.json", json.dumps(document))
    breaks(document)
    bad = write(tmp_path / "bad.json", json.dumps(document))
    assert validate.main([str(good)]) == 0
    assert capsys.readouterr().out == f"{good}: ok ({kind})\n"
    assert validate.main([str(bad)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"{bad}: {where}") and "Traceback" not in err


def test_a_folder_is_walked_and_foreign_json_in_it_skipped(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    record = write(tmp_path / "run" / "step.json", FIRST.read_text())
    foreign = write(tmp_path / "dataset_info.json", '{"name": "not dew\'s"}')
    assert validate.main([str(tmp_path)]) == 0
    out, _ = capsys.readouterr()
    assert f"{record}: ok (step run" in out and f"{foreign}: skipped" in out
    # named on its own, a JSON object is held to the record schema
    assert validate.main([str(foreign)]) == 1


def test_compare_refuses_dews_other_json_by_its_kind(capsys):
    with pytest.raises(validate.UsageError, match="is a run level dew wrote, not a results"):
        validate.load(RESULTS / "noise.json", "RUN")


def test_what_compare_writes_today_is_a_valid_comparison(capsys):
    from dew.bench.analysis import compare_command
    from dew.bench.record.schema.documents import check_document, document_kind

    runs = RESULTS / "runs"
    run = runs / "20261204T173319Z-cpu-smoke-o0-cpu-cbb6b2f" / "step.json"
    reference = runs / "20261204T173319Z-cpu-smoke-default-cpu-cbb6b2f" / "step.json"
    assert compare_command.main([str(run), str(reference), "--format", "json"]) in (0, 1, 3)
    text = capsys.readouterr().out
    assert document_kind(json.loads(text)) == "comparison"
    assert check_document("comparison", text) is None
