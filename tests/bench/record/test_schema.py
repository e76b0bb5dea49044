"""The results schema: what it accepts, what it rejects and how it says so."""

import copy
import json
import os
from pathlib import Path

import pydantic
import pytest

from dew.bench.record import schema, validate
from dew.bench.record.schema import BenchmarkRun, StepRow, read_run, write_run
from dew.bench.record.schema import __main__ as schema_command

REPO = Path(__file__).resolve().parents[3]


def step_row(**fields):
    row = {
        "architecture": "simple_dit",
        "sample": "64x64x3",
        "batch": 16,
        "params": 19835568,
        "ms_per_step": 7.9,
        "p10_ms": 8.8,
        "p50_ms": 9.1,
        "p90_ms": 10.0,
        "util": 0.382,
        "status": "ok",
    }
    row.update(fields)
    return row


def document(**fields):
    doc = {
        "schema_version": schema.SCHEMA_VERSION,
        "kind": "step",
        "created": "2026-11-29T11:00:00Z",
        "command": "python tools/benchmark_step.py --preset small",
        "settings": {"preset": "small", "steps": 100, "warmup": 2},
        "environment": {
            name: None for name in schema.Environment.model_fields if name != "processes"
        },
        "idle_check": None,
        "rows": [step_row()],
    }
    doc.update(fields)
    return doc


def with_row(**fields):
    return document(rows=[step_row(**fields)])


def errors_of(doc):
    with pytest.raises(pydantic.ValidationError) as caught:
        BenchmarkRun.model_validate_json(json.dumps(doc))
    return validate.describe_errors(caught.value)


def without(key):
    doc = document()
    del doc[key]
    return doc


def row_without(key):
    doc = document()
    del doc["rows"][0][key]
    return doc


BAD_DOCUMENTS = {
    "missing field": (without("command"), "$.command: Field required"),
    "missing row identity": (row_without("architecture"), "$.rows[0]: a row needs"),
    "missing status": (row_without("status"), "$.rows[0].status: Field required"),
    "wrong type": (with_row(batch="sixteen"), "$.rows[0].batch: Input should be a valid integer"),
    "negative time": (with_row(ms_per_step=-7.9), "$.rows[0].ms_per_step: Input should be greater"),
    "negative count": (with_row(params=-1), "$.rows[0].params: Input should be greater"),
    "unordered percentiles": (
        with_row(p10_ms=9.5, p50_ms=9.1),
        "$.rows[0]: percentiles out of order: p10_ms=9.5 > p50_ms=9.1",
    ),
    "unknown row field": (with_row(ms_per_stp=7.9), "$.rows[0].ms_per_stp: Extra inputs"),
    "unknown top-level field": (document(comment="hi"), "$.comment: Extra inputs"),
    "newer schema_version": (
        document(schema_version=schema.SCHEMA_VERSION + 1),
        f"schema_version {schema.SCHEMA_VERSION + 1} is newer than this dew reads",
    ),
    "util out of range": (with_row(util=1.7), "$.rows[0].util: Input should be less than"),
    "bad status": (with_row(status="done"), "$.rows[0].status: Input should be 'ok' or 'failed'"),
    "failed without error": (with_row(status="failed"), "a failed row needs its error"),
    "ok with error": (with_row(error="boom"), "an ok row carries no error"),
    "bad kind": (document(kind="train"), "$.kind: Input should be 'step' or 'data'"),
    "data row in a step run": (
        document(rows=[{"dataset": "oxford-flowers", "batch": 8, "status": "ok"}]),
        "rows[0] is a data row in a 'step' run",
    ),
    "bad date": (document(created="last tuesday"), "$.created: not a valid datetime or date"),
    "secret in env flags": (
        document(
            environment={
                **document()["environment"],
                "env_flags": {"XLA_FLAGS": "", "HF_TOKEN": "x"},
            }
        ),
        "environment variable 'HF_TOKEN' may not be recorded",
    ),
}


@pytest.mark.parametrize("kind", sorted(BAD_DOCUMENTS))
def test_rejects_bad_document_with_a_readable_message(kind):
    doc, expected = BAD_DOCUMENTS[kind]
    lines = errors_of(doc)
    assert any(expected in line for line in lines), lines
    assert all("\n" not in line for line in lines)


def test_a_minimal_document_and_a_date_only_one_are_valid():
    run = BenchmarkRun.model_validate_json(json.dumps(document()))
    assert run.rows[0].ms_per_step == 7.9
    dated = BenchmarkRun.model_validate(document(created="2026-09-02"))
    assert dated.model_dump(mode="json")["created"] == "2026-09-02"  # no invented midnight


def test_failed_row_and_nan_loss_round_trip(tmp_path):
    doc = document(
        rows=[
            step_row(loss=float("nan"), loss_finite=False),
            {
                "architecture": "causal_transformer",
                "case": {"moe": True},
                "status": "failed",
                "error": "RESOURCE_EXHAUSTED",
            },
        ]
    )
    path = write_run(tmp_path / "run.json", doc)
    back = read_run(tmp_path / "run.json")
    assert back.rows[0].loss is None and back.rows[0].loss_finite is False  # JSON has no NaN
    assert back.rows[1].status == "failed" and back.rows[1].case == {"moe": True}
    assert path.kind == "step"


def test_write_run_validates_first_and_leaves_the_old_file(tmp_path):
    target = tmp_path / "runs" / "run.json"
    write_run(target, BenchmarkRun.model_validate(document()))
    before = target.read_text()
    bad = document(rows=[step_row(p10_ms=99.0)])
    with pytest.raises(pydantic.ValidationError):
        write_run(target, bad)
    assert target.read_text() == before
    assert sorted(p.name for p in target.parent.iterdir()) == ["run.json"]  # no temp left
    assert oct(os.stat(target).st_mode & 0o777) == "0o644"


def test_key_tells_rows_apart_and_label_names_them():
    a = StepRow(**step_row(head_chunks=1))
    b = StepRow(**step_row(head_chunks=2))
    c = StepRow(**step_row(head_chunks=1))
    assert a.key() != b.key() and a.key() == c.key()
    assert a.label() == "simple_dit (head_chunks=1)"
    # The batch is one identity wherever a record keeps it: the column or the case.
    in_case = StepRow(**step_row(batch=None, case={"batch": 16, "moe": True}))
    assert in_case.key() == StepRow(**step_row(case={"moe": True})).key()
    assert in_case.label() == "simple_dit (moe)"


def test_exported_json_schema_is_current(tmp_path):
    exported = REPO / "results" / "schema"
    stale = [
        name
        for name, text in schema.json_schemas().items()
        if not (exported / name).exists() or (exported / name).read_text() != text
    ]
    assert not stale, f"run `python -m dew.bench.record.schema --export results/schema`: {stale}"
    assert schema_command.main(["--export", str(tmp_path)]) == 0
    for name in schema.SCHEMA_FILES:
        assert (tmp_path / name).read_text() == (exported / name).read_text()
        version = json.loads((tmp_path / name).read_text())["x-schema-version"]
        assert version == schema.SCHEMA_VERSION


def test_validate_cli_reports_paths_and_exit_status(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(document()))
    bad_doc = copy.deepcopy(document())
    bad_doc["rows"][0]["p90_ms"] = -1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(bad_doc))
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert validate.main([str(good)]) == 0
    assert validate.main([str(good), str(bad)]) == 1  # an invalid record: 1
    assert validate.main([str(good), str(bad), str(broken)]) == 2  # not JSON: bad input, 2
    err = capsys.readouterr().err
    assert f"{bad}: $.rows[0].p90_ms: Input should be greater than 0" in err
    assert f"{validate.PROG}: error: {broken}: not JSON" in err
