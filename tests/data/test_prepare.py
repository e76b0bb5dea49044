"""tools/prepare_dataset.py: the original Oxford Flowers 102 files (JPEGs, imagelabels.mat,
setid.mat) and --synthetic N become TFDS-layout directories the pipeline reads."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from scipy.io import savemat

from dew.data.oxford_flowers import class_names, oxford_flowers_source
from dew.data.sources import PreparedTfdsSource
from dew.data.synthetic import synthetic_record

TOOL = Path(__file__).resolve().parents[2] / "tools" / "prepare_dataset.py"


@pytest.fixture(scope="module")
def prepare_main():
    spec = importlib.util.spec_from_file_location("prepare_dataset", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


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
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: {tmp_path} is not the original Oxford Flowers 102 distribution "
        "(no imagelabels.mat; expected jpg/, imagelabels.mat, setid.mat)"
    ]


def test_synthetic(tmp_path, prepare_main):
    out = tmp_path / "synthetic"
    assert prepare_main(["--synthetic", "3", "--seed", "4", "--out", str(out)]) == 0
    source = PreparedTfdsSource(out)
    assert len(source) == 3
    assert source[2]["image"] == synthetic_record(4, 2)["image"]
