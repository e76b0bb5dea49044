"""tools/benchmark_data.py: the seed's syntax, the row and record it writes, the keep-up
verdict against a step results file, and one-line errors for bad input."""

import shutil
from datetime import UTC, datetime

import pytest

from dew.bench.data import keep_up_verdicts, main
from dew.bench.schema import BenchmarkRun, DataRow, Environment, Settings, StepRow, read_run
from dew.bench.schema import write_run as write_record
from dew.data.sources import write_prepared
from dew.data.synthetic import CLASS_NAMES, synthetic_record


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    records = [synthetic_record(1, i, (64, 128)) for i in range(48)]
    path = tmp_path_factory.mktemp("prepared") / "oxford_flowers102" / "2.1.1"
    return write_prepared(path, "oxford_flowers102", {"train": records}, CLASS_NAMES)


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


SEED_SYNTAX = "data:oxford-flowers --batch 8 --data.image-size 64 --steps 3 --warmup 2"


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


@pytest.mark.parametrize(
    "extra, expected",
    [
        (
            [],
            "error: oxford-flowers reads only a prepared TFDS version directory: pass --data.path",
        ),
        (
            ["--data.path", "{tmp}"],
            "is not a prepared TFDS version directory (no dataset_info.json)",
        ),
        (["--data.path", "{truncated}"], "array_record-00000-of-00001 is truncated"),
        (["--data.path", "{corrupt}"], "error: record 3 (image_00004.jpg): cannot decode its JPEG"),
        (
            ["--data.path", "{prepared}", "--data.loading.workers", "-1"],
            "error: data.loading.workers must be >= 0, got -1",
        ),
        (["--data.path", "{prepared}", "--data.split", "val"], "error: split 'val' not in"),
        (
            ["--data.path", "{prepared}", "--against", "{tmp}/missing.json"],
            "error: --against {tmp}/missing.json: no such file",
        ),
        (
            ["--data.path", "{prepared}", "--against", "{prepared}/dataset_info.json"],
            "is not a valid results file",
        ),
    ],
    ids=[
        "no-path",
        "not-prepared",
        "truncated",
        "corrupt-jpeg",
        "negative-workers",
        "bad-split",
        "against-missing",
        "against-invalid",
    ],
)
def test_bad_input_is_one_line(prepared, tmp_path, capsys, extra, expected):
    places = {"tmp": tmp_path, "prepared": prepared}
    if "{truncated}" in extra:
        places["truncated"] = _truncated(prepared, tmp_path)
    if "{corrupt}" in extra:
        places["corrupt"] = _corrupt_jpeg(prepared, tmp_path)
    extra = [arg.format(**places) for arg in extra]
    argv = SEED_SYNTAX.split() + ["--data.loading.workers", "0", "--data.loading.threads", "0"]
    assert main(argv + extra) == 2
    stderr = capsys.readouterr().err.strip().splitlines()
    assert len(stderr) == 1, stderr
    assert expected.format(**places) in stderr[0]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["data:flowers"],
            "error: Unrecognized options: data:flowers; Available subcommands: "
            "data:oxford-flowers, data:synthetic-images",
        ),
        ([], "error: Expected one of {data:oxford-flowers, data:synthetic-images}."),
        (
            ["data:oxford-flowers", "--data.loading.workers", "two"],
            "error: Error parsing --data.loading.workers: invalid literal for int()",
        ),
        (["data:oxford-flowers", "--bogus", "3"], "error: Unrecognized options: --bogus, 3"),
    ],
    ids=["unknown-dataset", "no-dataset", "workers-not-a-number", "unknown-flag"],
)
def test_bad_command_line_is_one_line(capsys, argv, expected):
    assert main(argv) == 2
    captured = capsys.readouterr()
    stderr = captured.err.strip().splitlines()
    assert len(stderr) == 1, stderr
    assert stderr[0].startswith(expected), stderr[0]
    assert captured.out == ""
