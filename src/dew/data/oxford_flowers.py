"""Oxford Flowers 102: the class names and the source for a prepared oxford_flowers102 dir.

The names are TFDS's (tensorflow_datasets/datasets/oxford_flowers102, Apache-2.0), in label
order, kept here so a prepared directory without label.labels.txt still gets captions and
so tools/prepare_dataset.py can write them.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from dew.data.sources import DataError, PreparedTfdsSource

TFDS_NAME = "oxford_flowers102"
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
