"""A TFDS-layout directory round-trips through PreparedTfdsSource, and a broken one fails
with one line naming the problem."""

import io
import json
import shutil

import numpy as np
import pytest
from PIL import Image

from dew.data.oxford_flowers import oxford_flowers_source
from dew.data.sources import DataError, PreparedTfdsSource, write_prepared
from dew.data.synthetic import CLASS_NAMES, synthetic_image, synthetic_record
from dew.data.tfexample import decode_example, encode_example

from .conftest import SIDES, SPLIT_SIZES


def test_example_codec_round_trips():
    features = {"image": b"\xff\xd8jpeg", "label": 101, "file_name": b"image_00001.jpg"}
    features |= {"floats": [0.5, -2.0], "ids": [3, 1, 4]}
    decoded = decode_example(encode_example(features))
    assert decoded == {k: v if isinstance(v, list) else [v] for k, v in features.items()}


def test_records_decode_to_the_images_written(prepared_dir, written_records):
    source = PreparedTfdsSource(prepared_dir)
    written = [r for split in SPLIT_SIZES for r in written_records[split]]
    assert len(source) == len(written) == 256
    assert source.class_names == CLASS_NAMES
    for index, expected in enumerate(written):
        record = source[index]
        assert record["index"] == index
        assert record["image"] == expected["image"]
        assert record["label"] == expected["label"]
        assert record["file_name"] == expected["file_name"]
    # ...and the bytes are the JPEG of the generated pixels (lossy, so approximately).
    pixels = np.asarray(Image.open(io.BytesIO(source[200]["image"])).convert("RGB"))
    original = synthetic_image(7, 200, SIDES)
    assert pixels.shape == original.shape
    assert np.abs(pixels.astype(int) - original).mean() < 3


def test_split_lengths_come_from_dataset_info(prepared_dir, written_records):
    for split, size in SPLIT_SIZES.items():
        source = PreparedTfdsSource(prepared_dir, split)
        assert len(source) == size
        assert source[size - 1]["image"] == written_records[split][-1]["image"]
    both = PreparedTfdsSource(prepared_dir, "validation+test")
    assert len(both) == 156
    assert both[56]["image"] == written_records["test"][0]["image"]
    with pytest.raises(IndexError, match="record 156 outside the 156 records"):
        both[156]

    info = json.loads((prepared_dir / "dataset_info.json").read_text())
    assert [s["shardLengths"] for s in info["splits"]] == [
        ["64", "36"],
        ["56"],
        ["64", "36"],
    ]


def test_unknown_split_names_the_valid_ones(prepared_dir):
    with pytest.raises(DataError, match="split 'val' not in .*valid: all, train, validation, test"):
        PreparedTfdsSource(prepared_dir, "val")


def test_oxford_flowers_needs_a_path():
    with pytest.raises(ValueError, match="--data.path"):
        oxford_flowers_source(None)


def test_a_directory_that_is_not_prepared(tmp_path):
    (tmp_path / "image_00001.jpg").write_bytes(b"")
    with pytest.raises(DataError) as error:
        PreparedTfdsSource(tmp_path)
    assert str(error.value) == (
        f"{tmp_path} is not a prepared dataset (no dataset_info.json); "
        "make one with tools/prepare_dataset.py"
    )


def test_a_missing_directory_is_no_such_directory(tmp_path):
    with pytest.raises(DataError) as error:
        PreparedTfdsSource(tmp_path / "nowhere")
    assert str(error.value) == f"no such directory: {tmp_path / 'nowhere'}"


def _copy(prepared_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(prepared_dir, copy)
    return copy


def test_a_truncated_shard_is_named(prepared_dir, tmp_path):
    copy = _copy(prepared_dir, tmp_path)
    shard = copy / "synthetic_images-test.array_record-00001-of-00002"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match="test.array_record-00001-of-00002 is truncated") as error:
        PreparedTfdsSource(copy)
    assert "\n" not in str(error.value)


def test_a_shard_shorter_than_dataset_info_says(prepared_dir, tmp_path):
    copy = _copy(prepared_dir, tmp_path)
    write_prepared(
        tmp_path / "short", "synthetic_images", {"validation": [synthetic_record(0, 0, SIDES)]}, []
    )
    shutil.copy(
        tmp_path / "short" / "synthetic_images-validation.array_record-00000-of-00001",
        copy / "synthetic_images-validation.array_record-00000-of-00001",
    )
    with pytest.raises(DataError, match="has 1 records, dataset_info.json says 56"):
        PreparedTfdsSource(copy)


def test_a_missing_shard_is_named(prepared_dir, tmp_path):
    copy = _copy(prepared_dir, tmp_path)
    (copy / "synthetic_images-train.array_record-00000-of-00002").unlink()
    with pytest.raises(DataError, match="missing shard .*train.array_record-00000-of-00002"):
        PreparedTfdsSource(copy)
