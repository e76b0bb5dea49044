"""Decode with draft mode, flip and colour jitter, captions."""

import io

import numpy as np
import pytest
from PIL import Image

from dew.data import transforms
from dew.data.sources import DataError
from dew.data.synthetic import synthetic_image
from dew.data.transforms import CAPTION_TEMPLATES, caption, decode_square, flip_and_jitter


def jpeg(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=95)
    return out.getvalue()


def test_draft_decode_matches_a_full_decode_and_resize():
    pixels = synthetic_image(3, 0, (480, 520))
    data = jpeg(pixels)
    fast = decode_square(data, 64)
    full = np.asarray(
        Image.open(io.BytesIO(data)).convert("RGB").resize((64, 64), Image.Resampling.BILINEAR)
    )
    assert fast.shape == (64, 64, 3) and fast.dtype == np.uint8
    # Reduced-scale DCT decoding differs from a full decode by a few levels, not more.
    assert np.abs(fast.astype(int) - full).mean() < 4


def test_decode_upsamples_a_small_image_to_the_square():
    assert decode_square(jpeg(synthetic_image(3, 1, (20, 30))), 64).shape == (64, 64, 3)


def test_flip_and_jitter_is_a_function_of_the_rng():
    image = synthetic_image(3, 2, (64, 65))[:64, :64]
    a = flip_and_jitter(image, np.random.default_rng(1))
    b = flip_and_jitter(image, np.random.default_rng(1))
    assert np.array_equal(a, b) and a.dtype == np.uint8 and a.shape == image.shape
    outputs = [flip_and_jitter(image, np.random.default_rng(seed)) for seed in range(40)]
    assert len({o.tobytes() for o in outputs}) == 40


def test_flip_is_a_mirror_and_jitter_stays_in_its_ranges():
    # A grey ramp: saturation leaves grey alone, so only brightness and contrast act.
    ramp = np.repeat(np.linspace(60, 180, 64, dtype=np.float32)[None, :, None], 3, axis=2)
    ramp = np.repeat(ramp, 8, axis=0).round().astype(np.uint8)
    flipped = 0
    for seed in range(200):
        out = flip_and_jitter(ramp, np.random.default_rng(seed)).astype(np.float32)
        assert np.array_equal(out[..., 0], out[..., 1])  # still grey
        increasing = out[0, -1, 0] > out[0, 0, 0]
        flipped += not increasing
        ratio = out.mean() / ramp.mean()
        assert 0.8 * 0.95 - 0.02 < ratio < 1.2 * 1.05 + 0.02
    assert 70 < flipped < 130  # p = 0.5


def test_captions_come_from_the_templates():
    seen = {caption("rose", np.random.default_rng(seed)) for seed in range(100)}
    assert seen == {t.format("rose") for t in CAPTION_TEMPLATES}


def test_a_decode_failure_without_a_message_gives_its_type(monkeypatch):
    # A decode that runs out of memory raises a bare MemoryError: the line used to end at
    # "cannot decode its JPEG:" with no reason.
    def out_of_memory(jpeg, size):
        raise MemoryError()

    monkeypatch.setattr(transforms, "decode_square", out_of_memory)
    record = {"index": 3, "image": b"", "label": 0, "file_name": "image_00004.jpg"}
    with pytest.raises(DataError) as error:
        transforms.ImageTextTransform(64, False, ["a"])(record, np.random.default_rng(0))
    assert str(error.value) == "record 3 (image_00004.jpg): cannot decode its JPEG: MemoryError"
