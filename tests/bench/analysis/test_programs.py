"""What the compiler chose, as the rows and compare read it (dew.bench.analysis.programs):
a row whose repeats compiled otherwise says so in its warnings, compare says per row
whether both sides ran the same compiled program (text column, notes, JSON `compiled`),
and a record from before fingerprints reads as it did. The fingerprints are digests as a
record holds them (dew.telemetry.fingerprint makes them; tests/telemetry tests that)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dew.bench.analysis import compare_command, comparison, programs
from dew.bench.analysis.repeats import summarize_step
from dew.bench.record.schema import StepRepeat, StepRow, read_run, write_run

pytestmark = pytest.mark.usefixtures("pinned_noise")  # conftest: the A/A records' table

PUBLISHED = Path(__file__).resolve().parents[3] / "results" / "published"
FIRST = PUBLISHED / "2026-09-02-rtx4080-6b0f119-small.json"

A = {"program": "50c058df8e9bd104", "kernels": "ba36ab31c466f7ab"}
A_OTHER_KERNELS = {"program": "50c058df8e9bd104", "kernels": "0123456789abcdef"}
A_THIRD_KERNELS = {"program": "50c058df8e9bd104", "kernels": "fedcba9876543210"}
B = {"program": "91fdad21c71d42e1", "kernels": "4c49a5ceb3cd36e9"}


def row(*prints: dict | None, ms: tuple[float, ...] | None = None) -> StepRow:
    """A simple_dit row of one repeat per fingerprint, ms/step 10, 11, 12, ... by default."""
    ms = ms or tuple(10.0 + i for i in range(len(prints)))
    repeats = [
        StepRepeat(ms_per_step=m, synced_ms=[m] * 5, compile_s=3.0, fingerprint=p)
        for m, p in zip(ms, prints, strict=True)
    ]
    template = StepRow(architecture="simple_dit", case={"batch": 8}, status="ok", ms_per_step=ms[0])
    return summarize_step(template, repeats)


def test_repeats_that_share_a_fingerprint_give_it_to_the_row_and_no_warning():
    shared = row(A, A, A)
    assert shared.fingerprint.model_dump() == A
    assert not any("compiled" in w or "kernels" in w for w in shared.warnings)


def test_two_of_three_repeats_with_other_kernels_say_so_and_why_the_spread():
    mixed = row(A, A_OTHER_KERNELS, A_THIRD_KERNELS, ms=(10.0, 14.0, 15.0))
    assert mixed.fingerprint is None  # the row has none of its own: each repeat has its
    (warning,) = [w for w in mixed.warnings if "kernels" in w]
    assert warning == (
        "2 of 3 repeats chose other kernels for the same program (ms/step 14.5 against 10 "
        "for the other 1): the spread between repeats is partly the compiler's choices"
    )


def test_a_repeat_that_compiled_another_program_says_so():
    mixed = row(A, B, A, ms=(10.0, 20.0, 10.2))
    (warning,) = [w for w in mixed.warnings if "program" in w]
    assert warning.startswith("1 of 3 repeats compiled other programs (ms/step 20 against 10.1")
    both = programs.repeats_warning(row(A, B, A_OTHER_KERNELS, A).repeats)
    assert both.startswith("2 of 4 repeats compiled otherwise (1 another program, 1 other kernels)")


def test_repeats_without_fingerprints_say_nothing():
    assert programs.repeats_warning(row(None, None, A).repeats) is None
    assert row(None, A).fingerprint is None


@pytest.mark.parametrize(
    ("run", "reference", "compiled"),
    [
        ((A, A), (A,), programs.SAME),
        ((A_OTHER_KERNELS, A_OTHER_KERNELS), (A, A), programs.OTHER_KERNELS),
        ((B, B), (A, A), programs.OTHER_PROGRAM),
        ((A, B), (A, A), programs.OTHER_PROGRAM),
        ((None,), (A,), None),
    ],
)
def test_compare_says_whether_both_sides_ran_the_same_compiled_program(run, reference, compiled):
    assert programs.between(row(*run), row(*reference)) == compiled


def record_with(path: Path, rows: list[StepRow]) -> Path:
    """The published record's stack with these rows (schema 3), written to `path`."""
    base = read_run(FIRST)
    write_run(path, base.model_copy(update={"rows": rows, "schema_version": 3}))
    return path


def test_compare_text_and_json_carry_the_compiled_program(tmp_path, capsys):
    kernels = row(A_OTHER_KERNELS, A, A_OTHER_KERNELS, ms=(10.0, 10.1, 10.2))
    run = record_with(tmp_path / "run.json", [kernels])
    ref = record_with(tmp_path / "ref.json", [row(A, A, A, ms=(10.0, 10.1, 10.3))])
    compare_command.main([str(run), str(ref), "--format", "text"])
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("simple_dit "))
    assert "same program, other kernels" in line
    note = "- simple_dit: compiled: same program, other kernels (run: program 50c058df kernels "
    assert f"{note}01234567, program 50c058df kernels ba36ab31; reference: program 50c058df" in out
    assert "- simple_dit: run: 1 of 3 repeats chose other kernels for the same program" in out
    compare_command.main([str(run), str(ref), "--format", "json"])
    (document,) = [json.loads(capsys.readouterr().out)]
    assert document["rows"][0]["compiled"] == "same program, other kernels"


def test_records_from_before_fingerprints_compare_as_before():
    cmp = comparison.compare(read_run(FIRST), read_run(FIRST))
    assert {r.compiled for r in cmp.rows} == {None}
    from dew.bench.analysis import compare_report

    text = compare_report.comparison(cmp, read_run(FIRST), read_run(FIRST), "text")
    assert "compiled" not in text.split("Ratios are")[0]
    assert all(row["compiled"] is None for row in compare_report.as_json(cmp)["rows"])


def test_a_repeat_of_the_schema_before_fingerprints_validates():
    old = {"ms_per_step": 1.0, "synced_ms": [1.0], "compile_s": None}
    assert StepRepeat.model_validate(old).fingerprint is None
    record = read_run(FIRST)
    assert all(r.fingerprint is None and r.flops_error is None for r in record.rows)
