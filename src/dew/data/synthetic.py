"""Generated JPEG records for tests and demos: deterministic from (seed, index).

Each image is a smooth random colour field (a few random pixels upsampled) with sizes
around 500 px, like the photos of Oxford Flowers, so decoding costs about what a real record
costs. Used by tools/prepare_dataset.py --synthetic N and by the synthetic-images dataset.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

NUM_CLASSES = 102
CLASS_NAMES = [f"synthetic class {i}" for i in range(NUM_CLASSES)]


SIDES = (400, 600)
"""the range image heights and widths are drawn from."""


def synthetic_image(seed: int, index: int, sides: tuple[int, int] = SIDES) -> np.ndarray:
    rng = np.random.default_rng([seed, index])
    height, width = (int(v) for v in rng.integers(*sides, size=2))
    coarse = rng.integers(0, 256, size=(6, 6, 3), dtype=np.uint8)
    image = Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC)
    return np.asarray(image)


def synthetic_record(
    seed: int, index: int, sides: tuple[int, int] = SIDES, quality: int = 90
) -> dict:
    """{"image": JPEG bytes, "label", "file_name"}, the fields of an oxford_flowers102 record."""
    buffer = io.BytesIO()
    Image.fromarray(synthetic_image(seed, index, sides)).save(
        buffer, format="JPEG", quality=quality
    )
    label = int(np.random.default_rng([seed, index, 1]).integers(NUM_CLASSES))
    return {"image": buffer.getvalue(), "label": label, "file_name": f"image_{index + 1:05d}.jpg"}


class SyntheticSource:
    """A grain random-access source of `num_records` synthetic records, made on access (so
    its timing includes a JPEG encode per record; time a prepared set to leave that out)."""

    def __init__(self, num_records: int, seed: int = 0):
        self.num_records = num_records
        self.seed = seed
        self.class_names = CLASS_NAMES

    def __len__(self) -> int:
        return self.num_records

    def __getitem__(self, index: int) -> dict:
        return {"index": index, **synthetic_record(self.seed, index)}

    def __repr__(self) -> str:
        return f"SyntheticSource(num_records={self.num_records}, seed={self.seed})"


def prepare_synthetic(
    num_records: int, out, *, seed: int = 0, sides: tuple[int, int] = SIDES, **write_options
):
    """A TFDS-layout directory (split "train") of `num_records` synthetic records, made a
    shard at a time (never all held at once)."""
    from dew.data.sources import write_prepared
    from dew.data.spec import SyntheticImages

    records = SyntheticRecords(num_records, seed, sides)
    name = SyntheticImages.prepared_name
    return write_prepared(out, name, {"train": records}, CLASS_NAMES, **write_options)


class SyntheticRecords:
    """The records of prepare_synthetic as a sequence, each made when it is read."""

    def __init__(self, num_records: int, seed: int, sides: tuple[int, int] = SIDES):
        self.num_records, self.seed, self.sides = num_records, seed, sides

    def __len__(self) -> int:
        return self.num_records

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.num_records))]
        return synthetic_record(self.seed, index, self.sides)


def record_bytes(seed: int = 0, sample: int = 16, sides: tuple[int, int] = SIDES) -> float:
    """The mean JPEG size of a synthetic record, from the first `sample` (a dataset's disk
    before it is written)."""
    return sum(len(synthetic_record(seed, i, sides)["image"]) for i in range(sample)) / sample
