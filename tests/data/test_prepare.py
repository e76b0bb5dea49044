"""tools/prepare_dataset.py: the original Oxford Flowers 102 files (JPEGs, imagelabels.mat,
setid.mat) and --synthetic N become TFDS-layout directories the pipeline reads; bad input
and an --out that would lose something are one line, exit 2, with nothing changed."""

import importlib.util
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.io import savemat

from dew.bench.loader import prepare_dataset as prepare
from dew.data.oxford_flowers import class_names, oxford_flowers_source
from dew.data.sources import PreparedTfdsSource, write_prepared
from dew.data.synthetic import CLASS_NAMES, synthetic_record

TOOL = Path(__file__).resolve().parents[2] / "tools" / "prepare_dataset.py"


@pytest.fixture(scope="module")
def prepare_main():
    """The tool's own main (the front is a thin import of dew.bench.loader.prepare_dataset.main)."""
    spec = importlib.util.spec_from_file_location("prepare_dataset", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(TOOL.parent))  # as running the script puts its folder first
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(TOOL.parent))
    assert module.main is prepare.main
    return module.main


def snapshot(path: Path) -> dict[str, bytes] | bytes | None:
    """Every file under `path` with its bytes (a file's bytes; None if nothing is there)."""
    if path.is_file():
        return path.read_bytes()
    if not path.exists():
        return None
    return {
        str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()
    }


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("tools/prepare_dataset.py: error: "), lines[0]
    assert captured.out == ""
    return lines[0].removeprefix("tools/prepare_dataset.py: error: ")


def test_the_102_class_names():
    names = class_names()
    assert len(names) == 102
    assert (names[0], names[59], names[101]) == (
        "pink primrose",
        "pink-yellow dahlia?",
        "blackberry lily",
    )


def test_original_distribution_to_tfds_layout(tmp_path, prepare_main, capsys):
    original = tmp_path / "102flowers"
    (original / "jpg").mkdir(parents=True)
    images = {}
    for image_id in range(1, 13):
        images[image_id] = synthetic_record(5, image_id, (40, 80))["image"]
        (original / "jpg" / f"image_{image_id:05d}.jpg").write_bytes(images[image_id])
    labels = np.array([[(i * 37) % 102 + 1 for i in range(1, 13)]], np.uint8)  # 1-based
    savemat(original / "imagelabels.mat", {"labels": labels})
    setid = {"trnid": [[3, 1, 7]], "valid": [[2, 12]], "tstid": [[4, 5, 6, 8, 9, 10, 11]]}
    savemat(original / "setid.mat", {k: np.array(v, np.uint16) for k, v in setid.items()})

    out = tmp_path / "oxford_flowers102" / "2.1.1"
    assert prepare_main(["--source", str(original), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)

    for split, key in [("train", "trnid"), ("validation", "valid"), ("test", "tstid")]:
        source = oxford_flowers_source(out, split)
        ids = setid[key][0]
        assert len(source) == len(ids)
        for index, image_id in enumerate(ids):
            record = source[index]
            assert record["image"] == images[image_id]
            assert record["label"] == labels[0, image_id - 1] - 1
            assert record["file_name"] == f"image_{image_id:05d}.jpg"
    assert PreparedTfdsSource(out).class_names == class_names()


def test_original_distribution_missing_a_file(tmp_path, prepare_main, capsys):
    (tmp_path / "jpg").mkdir()
    assert prepare_main(["--source", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert one_error_line(capsys) == (
        f"{tmp_path} is not the original Oxford Flowers 102 distribution "
        "(no imagelabels.mat; expected jpg/, imagelabels.mat, setid.mat)"
    )
    assert not (tmp_path / "out").exists()


def test_synthetic(tmp_path, prepare_main):
    out = tmp_path / "synthetic"
    assert prepare_main(["--synthetic", "3", "--seed", "4", "--out", str(out)]) == 0
    source = PreparedTfdsSource(out)
    assert len(source) == 3
    assert source[2]["image"] == synthetic_record(4, 2)["image"]


@pytest.mark.parametrize(
    "argv, expected",
    [
        ([], "missing --out"),
        (["--synthetic", "3"], "missing --out"),
        (["--out", "{out}"], "give one of --source DIR or --synthetic N (neither given)"),
        (
            ["--out", "{out}", "--source", "{tmp}", "--synthetic", "3"],
            "give one of --source DIR or --synthetic N (both given)",
        ),
        (["--out", "{out}", "--synthetic", "0"], "--synthetic must be at least 1 (got 0)"),
        (["--out", "{out}", "--synthetic", "-5"], "--synthetic must be at least 1 (got -5)"),
        (
            ["--out", "{out}", "--synthetic", "3", "--seed", "-1"],
            "--seed must be in [0, 2**63) (got -1)",
        ),
        (
            ["--out", "{out}", "--source", "{tmp}/nowhere"],
            "--source {tmp}/nowhere: no such directory",
        ),
    ],
    ids=["no-args", "no-out", "neither", "both", "zero", "negative", "seed", "source-missing"],
)
def test_bad_command_line_is_one_line(tmp_path, capsys, argv, expected):
    # argparse printed its usage block here; now one line in the shared format.
    places = {"tmp": tmp_path, "out": tmp_path / "out"}
    assert prepare.main([arg.format(**places) for arg in argv]) == 2
    assert one_error_line(capsys) == expected.format(**places)
    assert not (tmp_path / "out").exists()


def test_an_existing_prepared_dataset_is_not_overwritten(tmp_path, capsys):
    out = tmp_path / "synthetic"
    assert prepare.main(["--synthetic", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    before = snapshot(out)
    assert prepare.main(["--synthetic", "3", "--seed", "1", "--out", str(out)]) == 2
    assert one_error_line(capsys) == (
        f"--out {out} holds the prepared dataset 'synthetic_images'; pass --overwrite to replace it"
    )
    assert snapshot(out) == before


def test_overwrite_replaces_the_dataset_and_its_stale_shards(tmp_path, capsys):
    out = tmp_path / "out"
    records = [synthetic_record(0, i, (40, 60)) for i in range(4)]
    splits = {"train": records[:2], "validation": records[2:3], "test": records[3:]}
    write_prepared(out, "oxford_flowers102", splits, CLASS_NAMES)
    (out / "notes.txt").write_text("mine")
    assert prepare.main(["--synthetic", "3", "--out", str(out), "--overwrite"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert len(PreparedTfdsSource(out)) == 3
    # The old dataset's shards are gone; a file that was not the dataset's stays.
    assert sorted(snapshot(out)) == [
        "dataset_info.json",
        "features.json",
        "label.labels.txt",
        "notes.txt",
        "synthetic_images-train.array_record-00000-of-00001",
    ]


def test_a_directory_that_is_not_empty_is_not_written_into(tmp_path, capsys):
    out = tmp_path / "photos"
    out.mkdir()
    (out / "holiday.jpg").write_bytes(b"\xff\xd8 mine")
    before = snapshot(out)
    assert prepare.main(["--synthetic", "2", "--out", str(out)]) == 2
    assert one_error_line(capsys) == (
        f"--out {out} is a directory that is not empty; give a new directory, or pass "
        "--overwrite to write the dataset into it"
    )
    assert snapshot(out) == before


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]], ids=["plain", "overwrite"])
def test_a_file_is_never_replaced_by_the_dataset(tmp_path, capsys, overwrite):
    out = tmp_path / "results.json"
    out.write_text('{"mine": 1}')
    assert prepare.main(["--synthetic", "2", "--out", str(out), *overwrite]) == 2
    assert one_error_line(capsys) == f"--out {out} is not a directory"
    assert out.read_text() == '{"mine": 1}'


def test_an_out_under_a_file_is_refused_before_any_work(tmp_path, capsys):
    # It was a 12-30 line traceback from the writer, after the records were made.
    blocker = tmp_path / "file.txt"
    blocker.write_text("mine")
    out = blocker / "dataset"
    assert prepare.main(["--synthetic", "2", "--out", str(out)]) == 2
    assert one_error_line(capsys) == f"--out {out}: {blocker} is not a directory"
    assert blocker.read_text() == "mine"


def test_an_out_that_cannot_be_written_is_refused(capsys):
    # /proc takes no new files, for root too (chmod would not stop root).
    out = Path("/proc/dew-prepared-dataset")
    assert prepare.main(["--synthetic", "2", "--out", str(out)]) == 2
    assert one_error_line(capsys).startswith(f"--out {out} cannot be written: ")
    assert not out.exists()


def test_a_count_the_disk_cannot_hold_is_refused_before_any_record(tmp_path, capsys):
    # Issue 63: --synthetic 99999999999 held 2.3 GB after 10 minutes, nothing written, no end
    assert prepare.main(["--synthetic", "99999999999", "--out", str(tmp_path / "out")]) == 2
    said = one_error_line(capsys)
    assert said.startswith("--synthetic 99,999,999,999 needs about ") and "give at most" in said
    assert not (tmp_path / "out").exists()


def test_progress_is_said_as_shards_are_written(tmp_path, capsys):
    assert prepare.main(["--synthetic", "3", "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().err == "tools/prepare_dataset.py: 3 of 3 records written\n"


def test_ctrl_c_is_one_line_saying_what_out_holds(tmp_path):
    # Issue 63: Ctrl-C during prepare_dataset was a KeyboardInterrupt traceback
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, str(TOOL), "--synthetic", "100000", "--out",
                                str(out)], stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        first = process.stderr.readline()  # the first shard: records are being made
        assert first.endswith("1,024 of 100,000 records written\n"), first
        process.send_signal(signal.SIGINT)
        rest = process.stderr.read()
        process.wait(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130 and "Traceback" not in rest, rest
    assert rest.splitlines()[-1] == (
        f"tools/prepare_dataset.py: error: interrupted: --out {out} holds part of a dataset "
        "(no dataset_info.json yet, so no reader takes it); run again with --overwrite to make "
        "it whole"
    )
