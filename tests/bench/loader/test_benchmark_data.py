"""tools/benchmark_data.py: the seed's syntax, the row and record it writes, the keep-up
verdict against a step results file, and one-line errors for bad input: exit 2, one
`tools/benchmark_data.py: error:` line, before any measurement, every file left as it was."""

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dew.bench.loader.data_command import keep_up_verdicts, main
from dew.bench.record.schema import (
    SCHEMA_VERSION,
    BenchmarkRun,
    DataRow,
    Environment,
    Settings,
    StepRow,
    read_run,
)
from dew.bench.record.schema import write_run as write_record
from dew.data.sources import write_prepared
from dew.data.synthetic import CLASS_NAMES, synthetic_record


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    records = [synthetic_record(1, i, (64, 128)) for i in range(48)]
    path = tmp_path_factory.mktemp("prepared") / "oxford_flowers102" / "2.1.1"
    return write_prepared(path, "oxford_flowers102", {"train": records}, CLASS_NAMES)


def one_error_line(capsys) -> str:
    """The one stderr line in the shared format (its message); nothing measured on stdout."""
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("tools/benchmark_data.py: error: "), lines[0]
    assert captured.out == "", captured.out  # refused before the measurement
    return lines[0].removeprefix("tools/benchmark_data.py: error: ")


def snapshot(*paths: Path) -> dict[str, bytes | None]:
    return {str(p): p.read_bytes() if p.is_file() else None for p in paths}


def step_run(rows: list[StepRow]) -> BenchmarkRun:
    empty = {name: None for name in Environment.model_fields}
    return BenchmarkRun(
        schema_version=1,
        kind="step",
        created=datetime(2026, 11, 29, tzinfo=UTC),
        command="tools/benchmark_step.py --preset cpu-smoke",
        settings=Settings(preset="cpu-smoke", steps=10, warmup=2),
        environment=Environment(**empty),
        idle_check=None,
        rows=rows,
    )


SEED_SYNTAX = (
    "data:oxford-flowers --batch 8 --data.image-size 64 --steps 3 --warmup 2 --idle-check off"
)


def test_seed_syntax_writes_a_valid_record_and_the_verdict(prepared, tmp_path, capsys):
    slow = StepRow(status="ok", architecture="slow_dit", sample="64x64x3", samples_per_s=0.001)
    fast = StepRow(status="ok", architecture="fast_dit", sample="64x64x3", samples_per_s=1e9)
    video = StepRow(status="ok", architecture="video_dit", sample="4x64x64x3", samples_per_s=1e9)
    small = StepRow(status="ok", architecture="tiny_unet", sample="32x32x3", samples_per_s=5.0)
    failed = StepRow(status="failed", architecture="broken", sample="64x64x3", error="OOM")
    tokens = StepRow(
        status="ok", architecture="lm", sample="16 tokens", samples_per_s=5.0, case={"moe": True}
    )
    rows = [slow, fast, video, small, failed, tokens]
    against = write_record(tmp_path / "step.json", step_run(rows))
    out = tmp_path / "data.json"
    argv = SEED_SYNTAX.split() + ["--data.loading.workers", "0", "--data.loading.threads", "1"]
    argv += [
        "--data.path",
        str(prepared),
        "--json-out",
        str(out),
        "--against",
        str(tmp_path / "step.json"),
    ]
    assert main(argv) == 0

    record = read_run(out)
    assert record.kind == "data" and len(record.rows) == 1
    row = record.rows[0]
    assert isinstance(row, DataRow)
    assert (row.dataset, row.batch, row.image_size, row.workers, row.threads) == (
        "oxford-flowers",
        8,
        64,
        0,
        1,
    )
    assert row.samples_per_s > 0 and 0 < row.p50_ms <= row.p95_ms and row.first_batch_s > 0
    assert record.settings.loader["path"] == str(prepared)
    # schema 2: the raw samples of the one in-process repeat; one process has no interval
    assert record.schema_version == SCHEMA_VERSION and record.settings.repeats == 1
    assert len(row.repeats) == 1 and len(row.repeats[0].intervals_ms) == 3
    assert row.samples_per_s_ci95 is None

    stdout = capsys.readouterr().out
    verdicts = keep_up_verdicts(row, against)
    assert [line in stdout for line in verdicts] == [True] * 6
    by_arch = {line.split()[0]: line for line in verdicts}
    assert "keeps up" in by_arch["slow_dit"]
    assert "starves the model" in by_arch["fast_dit"]
    assert "starves the model" in by_arch["video_dit"]  # compared at its frames' size
    assert "not compared" in by_arch["tiny_unet"]
    assert "no samples/s" in by_arch["broken"]
    assert by_arch["lm"].startswith("lm (moe)")
    assert "not compared: its samples are not images" in by_arch["lm"]


def test_synthetic_images_in_memory(capsys):
    argv = "data:synthetic-images --batch 2 --steps 2 --warmup 1 --data.num-records 8".split()
    assert main(argv + ["--data.loading.workers", "0", "--data.loading.threads", "0"]) == 0
    assert "synthetic-images batch 2 at 64 px, workers 0, threads 0:" in capsys.readouterr().out


def _truncated(prepared, tmp_path):
    copy = shutil.copytree(prepared, tmp_path / "truncated")
    shard = copy / "oxford_flowers102-train.array_record-00000-of-00001"
    shard.write_bytes(shard.read_bytes()[:5000])
    return copy


def _corrupt_jpeg(prepared, tmp_path):
    records = [synthetic_record(1, i, (64, 128)) for i in range(16)]
    records[3] = {**records[3], "image": b"GIF89a not a jpeg at all"}
    return write_prepared(
        tmp_path / "corrupt", "oxford_flowers102", {"train": records}, CLASS_NAMES
    )


FAST = ["--data.loading.workers", "0", "--data.loading.threads", "0"]


@pytest.mark.parametrize(
    "extra, expected",
    [
        (
            [],
            "oxford-flowers reads only a prepared TFDS version directory: pass --data.path",
        ),
        (
            ["--data.path", "{tmp}"],
            "{tmp} is not a prepared dataset (no dataset_info.json); "
            "make one with tools/prepare_dataset.py",
        ),
        (["--data.path", "{tmp}/nowhere"], "no such directory: {tmp}/nowhere"),
        (["--data.path", "{truncated}"], "array_record-00000-of-00001 is truncated"),
        (["--data.path", "{corrupt}"], "record 3 (image_00004.jpg): cannot decode its JPEG"),
        (
            ["--data.path", "{prepared}", "--data.loading.workers", "-1"],
            "--data.loading.workers must be >= 0, got -1",
        ),
        (["--data.path", "{prepared}", "--data.split", "val"], "split 'val' not in"),
        (["--data.path", "{prepared}", "--batch", "0"], "--batch must be at least 1 (got 0)"),
        (
            # 100000 px was the report (an OOM kill, or "cannot decode its JPEG:" with no
            # reason); just past the bound, so a regression here measures instead of OOMing.
            ["--data.path", "{prepared}", "--data.image-size", "4097"],
            "--data.image-size must be 1..4096 px, got 4097 (a larger square only upsamples",
        ),
    ],
    ids=[
        "no-path",
        "not-prepared",
        "path-missing",
        "truncated",
        "corrupt-jpeg",
        "negative-workers",
        "bad-split",
        "zero-batch",
        "huge-image-size",
    ],
)
def test_bad_input_is_one_line(prepared, tmp_path, capsys, extra, expected):
    places = {"tmp": tmp_path, "prepared": prepared}
    if "{truncated}" in extra:
        places["truncated"] = _truncated(prepared, tmp_path)
    if "{corrupt}" in extra:
        places["corrupt"] = _corrupt_jpeg(prepared, tmp_path)
    extra = [arg.format(**places) for arg in extra]
    assert main(SEED_SYNTAX.split() + FAST + extra) == 2
    captured = capsys.readouterr()
    stderr = captured.err.strip().splitlines()
    assert len(stderr) == 1, stderr
    assert stderr[0].startswith("tools/benchmark_data.py: error: "), stderr[0]
    assert expected.format(**places) in stderr[0]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["data:flowers"],
            "unknown dataset 'data:flowers'; valid: data:oxford-flowers, data:synthetic-images",
        ),
        ([], "missing the subcommand; valid: data:oxford-flowers, data:synthetic-images"),
        (
            ["data:oxford-flowers", "--data.loading.workers", "two"],
            "--data.loading.workers: 'two' is not an integer",
        ),
        (["data:oxford-flowers", "--bogus", "3"], "unrecognized argument --bogus;"),
    ],
    ids=["unknown-dataset", "no-dataset", "workers-not-a-number", "unknown-flag"],
)
def test_bad_command_line_is_one_line(capsys, argv, expected):
    assert main(argv) == 2
    assert one_error_line(capsys).startswith(expected)


# --- a dataset is timed under its own name ------------------------------------------------


def test_a_synthetic_set_is_not_timed_as_oxford_flowers(prepared_synthetic, tmp_path, capsys):
    # It ran and wrote a record labelled oxford-flowers over synthetic images.
    out = tmp_path / "data.json"
    argv = SEED_SYNTAX.split() + FAST + ["--data.path", str(prepared_synthetic)]
    assert main(argv + ["--json-out", str(out)]) == 2
    assert one_error_line(capsys) == (
        f"--data.path {prepared_synthetic} holds the prepared dataset 'synthetic_images' (the "
        "name in its dataset_info.json), not 'oxford_flowers102', which data:oxford-flowers "
        f"reads; run it as data:synthetic-images --data.path {prepared_synthetic}"
    )
    assert not out.exists()


def test_oxford_flowers_is_not_timed_as_synthetic_images(prepared, capsys):
    argv = ["data:synthetic-images", "--steps", "2", "--warmup", "1", *FAST]
    assert main(argv + ["--data.path", str(prepared)]) == 2
    assert one_error_line(capsys).endswith(
        f"which data:synthetic-images reads; run it as data:oxford-flowers --data.path {prepared}"
    )


def test_the_synthetic_set_runs_as_synthetic_images(prepared_synthetic, capsys):
    argv = ["data:synthetic-images", "--batch", "2", "--steps", "2", "--warmup", "1", *FAST]
    assert main(argv + ["--data.path", str(prepared_synthetic)]) == 0
    assert "synthetic-images batch 2 at 64 px" in capsys.readouterr().out


# --- --json-out: a record is never lost -------------------------------------------------------


def _loader_record(prepared, path: Path) -> Path:
    argv = SEED_SYNTAX.split() + FAST + ["--data.path", str(prepared), "--json-out", str(path)]
    assert main(argv) == 0
    return path


@pytest.mark.parametrize("kind", ["text", "loader-record", "step-record"])
def test_json_out_onto_an_existing_file_is_refused(prepared, tmp_path, capsys, kind):
    out = tmp_path / "out.json"
    if kind == "text":
        out.write_text("my notes\n")
    elif kind == "loader-record":
        _loader_record(prepared, out)
    else:
        write_record(out, step_run([StepRow(status="ok", architecture="dit", samples_per_s=1.0)]))
    capsys.readouterr()
    before = snapshot(out)
    argv = SEED_SYNTAX.split() + FAST + ["--data.path", str(prepared), "--json-out", str(out)]
    assert main(argv) == 2
    assert one_error_line(capsys) == f"--json-out {out} exists; pass --overwrite to replace it"
    assert snapshot(out) == before


def test_overwrite_replaces_the_record(prepared, tmp_path, capsys):
    out = tmp_path / "out.json"
    out.write_text("my notes\n")
    argv = SEED_SYNTAX.split() + FAST + ["--data.path", str(prepared), "--json-out", str(out)]
    assert main(argv + ["--overwrite"]) == 0
    assert read_run(out).kind == "data"
    assert list(tmp_path.iterdir()) == [out]  # written atomically: no temporary left


def test_against_is_never_also_the_json_out(prepared, tmp_path, capsys):
    step = write_record(
        tmp_path / "step.json", step_run([StepRow(status="ok", architecture="dit")])
    )
    assert step.kind == "step"
    path = tmp_path / "step.json"
    before = snapshot(path)
    argv = SEED_SYNTAX.split() + FAST + ["--data.path", str(prepared)]
    argv += ["--against", str(path), "--json-out", str(path), "--overwrite"]
    assert main(argv) == 2
    assert one_error_line(capsys) == (
        f"--json-out {path} is also an input of this run; write elsewhere"
    )
    assert snapshot(path) == before


def test_an_unwritable_json_out_is_refused_before_the_measurement(prepared, tmp_path, capsys):
    # It failed with a traceback after the measurement, losing it.
    blocker = tmp_path / "file.txt"
    blocker.write_text("mine")
    out = blocker / "data.json"
    argv = SEED_SYNTAX.split() + FAST + ["--data.path", str(prepared), "--json-out", str(out)]
    assert main(argv) == 2
    assert one_error_line(capsys) == f"--json-out {out}: {blocker} is not a directory"
    assert blocker.read_text() == "mine"


# --- --against: a step record, or one line naming the file ------------------------------------


@pytest.mark.parametrize(
    "make, expected",
    [
        ("directory", "--against {path} is a directory; give a file"),
        ("missing", "--against {path}: no such file"),
        ("binary", "--against {path} is not a results record (a binary file, not JSON)"),
        (
            "bad-json",
            "--against {path} is not a results record (not JSON: Expecting value: line 1 "
            "column 1 (char 0))",
        ),
        (
            "not-a-record",
            "--against {path} is not a results record: invalid BenchmarkRun.schema_version: "
            "Field required",
        ),
        (
            "loader-record",
            "--against {path} is a 'data' record (tools/benchmark_data.py); give a step "
            "record (tools/benchmark_step.py --json-out)",
        ),
    ],
    ids=["directory", "missing", "binary", "bad-json", "not-a-record", "loader-record"],
)
def test_against_a_file_that_is_not_a_step_record(prepared, tmp_path, capsys, make, expected):
    path = tmp_path / "against.json"
    if make == "directory":
        path.mkdir()
    elif make == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    elif make == "bad-json":
        path.write_text("schema_version: 1\n")
    elif make == "not-a-record":
        path.write_text('{"name": "oxford_flowers102"}')
    elif make == "loader-record":
        _loader_record(prepared, path)
        capsys.readouterr()
    before = snapshot(path)
    out = tmp_path / "data.json"
    argv = SEED_SYNTAX.split() + FAST + ["--data.path", str(prepared)]
    assert main(argv + ["--against", str(path), "--json-out", str(out)]) == 2
    assert one_error_line(capsys) == expected.format(path=path)
    assert snapshot(path) == before and not out.exists()
