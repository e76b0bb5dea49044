"""Oxford Flowers 102: the class names and the source for a prepared oxford_flowers102 dir.

The names are TFDS's (tensorflow_datasets/datasets/oxford_flowers102, Apache-2.0), in label
order, kept here so a prepared directory without label.labels.txt still gets captions and
so tools/prepare_dataset.py can write them.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from dew.data.sources import DataError, PreparedTfdsSource
from dew.data.spec import OxfordFlowers

TFDS_NAME = OxfordFlowers.prepared_name
TFDS_VERSION = "2.1.1"
# The original distribution's split files (setid.mat) -> TFDS split names.
SPLITS = {"train": "trnid", "validation": "valid", "test": "tstid"}
NUM_RECORDS = {"train": 1020, "validation": 1020, "test": 6149}


def class_names() -> list[str]:
    text = (resources.files("dew.data") / "oxford_flowers102_labels.txt").read_text()
    return text.splitlines()


def oxford_flowers_source(path: str | Path | None, split: str = "all") -> PreparedTfdsSource:
    if path is None:
        raise DataError(
            "oxford-flowers reads only a prepared TFDS version directory: pass --data.path DIR "
            "(make one with tools/prepare_dataset.py --source <102flowers folder>)"
        )
    source = PreparedTfdsSource(path, split)
    if not source.class_names:
        source.class_names = class_names()
    return source


def prepare_from_original(original: str | Path, out: str | Path) -> Path:
    """A TFDS-layout oxford_flowers102 version directory from the original distribution:
    `original` holds jpg/image_NNNNN.jpg (or the JPEGs directly), imagelabels.mat and
    setid.mat. Labels are shifted to 0..101 and split as TFDS splits (train = trnid,
    validation = valid, test = tstid); JPEG bytes are copied, not re-encoded."""
    from scipy.io import loadmat  # comes with jax; only this preparation step needs it

    from dew.data.sources import write_prepared

    original = Path(original)
    images = original / "jpg" if (original / "jpg").is_dir() else original
    for needed in ("imagelabels.mat", "setid.mat"):
        if not (original / needed).is_file():
            raise DataError(
                f"{original} is not the original Oxford Flowers 102 distribution "
                f"(no {needed}; expected jpg/, imagelabels.mat, setid.mat)"
            )
    try:
        labels = loadmat(original / "imagelabels.mat")["labels"].ravel()
        setid = loadmat(original / "setid.mat")
    except Exception as e:
        raise DataError(f"{original}: cannot read the .mat files ({e})") from e
    splits = {}
    for split, key in SPLITS.items():
        records = []
        for image_id in setid[key].ravel():
            file_name = f"image_{int(image_id):05d}.jpg"
            path = images / file_name
            if not path.is_file():
                raise DataError(f"missing image {path} (listed in setid.mat {key})")
            label = int(labels[int(image_id) - 1]) - 1
            records.append({"image": path.read_bytes(), "label": label, "file_name": file_name})
        splits[split] = records
    return write_prepared(out, TFDS_NAME, splits, class_names(), version=TFDS_VERSION)
