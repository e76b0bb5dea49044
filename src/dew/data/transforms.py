"""Per-record transforms: JPEG decode to a square, flip, colour jitter, caption + tokens.

Randomness comes only from the `rng` grain's random_map hands each record (derived from the
pipeline seed and the record's position), so a batch does not depend on worker or thread
counts. Images leave as uint8 HWC: a quarter of float32's bytes through worker shared
memory; the model side scales them.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, UnidentifiedImageError

from dew.data.sources import DataError
from dew.data.tokenize import tokenize

CAPTION_TEMPLATES = (
    "a photo of a {}",
    "a photo of a {} flower",
    "This is a photo of a {}",
    "This is a photo of a {} flower",
    "A photo of a {} flower",
)
# ITU-R 601 luma, as PIL's "L" conversion and torchvision's rgb_to_grayscale use.
_LUMA = np.array([0.299, 0.587, 0.114], np.float32)


def decode_square(jpeg: bytes, size: int) -> np.ndarray:
    """uint8[size, size, 3]. When the target is smaller, PIL's draft mode decodes at a
    reduced DCT scale (1/2, 1/4, 1/8) no smaller than the target: about 3x faster at 64 px."""
    image = Image.open(io.BytesIO(jpeg))
    image.draft("RGB", (size, size))
    image = image.convert("RGB")
    if image.size != (size, size):
        image = image.resize((size, size), Image.Resampling.BILINEAR)
    return np.asarray(image)


def flip_and_jitter(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Horizontal flip with p=0.5, then brightness U(0.8, 1.2), contrast U(0.95, 1.05) about
    the grey mean and saturation U(0.8, 1.2), applied in a random order."""
    flip = rng.random() < 0.5
    brightness, contrast, saturation = (
        rng.uniform(0.8, 1.2),
        rng.uniform(0.95, 1.05),
        rng.uniform(0.8, 1.2),
    )
    order = rng.permutation(3)
    x = image[:, ::-1] if flip else image
    x = x.astype(np.float32)
    for op in order:
        if op == 0:
            x = x * brightness
        elif op == 1:
            grey_mean = float((x @ _LUMA).mean())
            x = (x - grey_mean) * contrast + grey_mean
        else:
            grey = (x @ _LUMA)[..., None]
            x = (x - grey) * saturation + grey
        x = np.clip(x, 0.0, 255.0)
    return np.rint(x).astype(np.uint8)


def caption_template(rng: np.random.Generator) -> int:
    """The index in CAPTION_TEMPLATES of a record's caption, drawn uniformly."""
    return int(rng.integers(len(CAPTION_TEMPLATES)))


def caption(class_name: str, rng: np.random.Generator) -> str:
    return CAPTION_TEMPLATES[caption_template(rng)].format(class_name)


class ImageTextTransform:
    """A source record -> {"image", "label", "tokens", "mask"}; grain's random_map transform.

    A record whose JPEG does not decode fails the run with its index (rather than being
    skipped): a loader benchmark over silently dropped records would time less work than
    it reports.
    """

    def __init__(self, image_size: int, augmentation: bool, class_names: list[str]):
        self.image_size = image_size
        self.augmentation = augmentation
        self.class_names = class_names
        # A caption is one of len(CAPTION_TEMPLATES) x len(class_names) strings (510 for
        # Oxford Flowers), so each is tokenized once, when first drawn, instead of once per
        # record: tokenization was about an eighth of a record's time at 64 px.
        self._caption_tokens: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def __call__(self, record: dict, rng: np.random.Generator) -> dict:
        try:
            image = decode_square(record["image"], self.image_size)
        except Exception as e:
            name = f" ({record['file_name']})" if record.get("file_name") else ""
            # A MemoryError (or other bare exception) has no message: its type is the reason.
            why = "not an image file" if isinstance(e, UnidentifiedImageError) else str(e)
            why = why.strip() or type(e).__name__
            raise DataError(
                f"record {record['index']}{name}: cannot decode its JPEG: {why}".splitlines()[0]
            ) from e
        if self.augmentation:
            image = flip_and_jitter(image, rng)
        label = record["label"]
        if not 0 <= label < len(self.class_names):
            raise DataError(
                f"record {record['index']}: label {label} outside the "
                f"{len(self.class_names)} classes of label.labels.txt"
            )
        tokens, mask = self._tokens(label, caption_template(rng))
        return {"image": image, "label": np.int32(label), "tokens": tokens, "mask": mask}

    def _tokens(self, label: int, template: int) -> tuple[np.ndarray, np.ndarray]:
        key = (label, template)
        if key not in self._caption_tokens:
            text = CAPTION_TEMPLATES[template].format(self.class_names[label])
            self._caption_tokens[key] = tokenize(text)
        # Copies: a record's arrays are its own, whatever a later stage does to them.
        tokens, mask = self._caption_tokens[key]
        return tokens.copy(), mask.copy()
