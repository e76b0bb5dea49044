"""The grain pipeline: batches independent of workers and threads, records and captions
right, a corrupt record named, nothing left running after close."""

import fcntl
import multiprocessing
import os
import time

import numpy as np
import pytest

from dew.data.pipeline import (
    WORKER_PIPE_BYTES,
    grow_pipes,
    make_source,
    open_batches,
    shared_memory_min_bytes,
)
from dew.data.sources import DataError, PreparedTfdsSource, write_prepared
from dew.data.spec import Loading, OxfordFlowers, SyntheticImages
from dew.data.synthetic import CLASS_NAMES, synthetic_record
from dew.data.tokenize import tokenize
from dew.data.transforms import CAPTION_TEMPLATES, decode_square

BATCH = 8


def take(spec, count):
    with open_batches(spec, BATCH) as batches:
        return [next(batches) for _ in range(count)]


@pytest.fixture(scope="module")
def in_process_batches(prepared_dir):
    # 40 batches = 320 records: past the 256-record epoch, into the reshuffled second one.
    return take(SyntheticImages(path=str(prepared_dir), loading=Loading(workers=0, threads=0)), 40)


def test_batches_hold_the_records_with_their_captions(prepared_dir, in_process_batches):
    source = PreparedTfdsSource(prepared_dir)
    labels = [source[i]["label"] for i in range(len(source))]
    first_epoch = np.concatenate([b["label"] for b in in_process_batches[:32]])
    # One epoch is every record once: its labels are a permutation of the source's.
    assert sorted(first_epoch.tolist()) == sorted(labels)
    batch = in_process_batches[0]
    assert batch["image"].shape == (BATCH, 64, 64, 3) and batch["image"].dtype == np.uint8
    assert batch["tokens"].shape == batch["mask"].shape == (BATCH, 77)
    for label, tokens in zip(batch["label"], batch["tokens"], strict=True):
        name = CLASS_NAMES[label]
        captions = [tokenize(t.format(name))[0].tolist() for t in CAPTION_TEMPLATES]
        assert tokens.tolist() in captions
    templates_seen = {tuple(t) for b in in_process_batches[:4] for t in b["tokens"][:, :5].tolist()}
    assert len(templates_seen) > 1  # the template is drawn per record


def test_augmentation_off_gives_the_decoded_records(prepared_dir, in_process_batches):
    spec = SyntheticImages(
        path=str(prepared_dir), augmentation=False, loading=Loading(workers=0, threads=0)
    )
    plain = take(spec, 1)[0]
    source = PreparedTfdsSource(prepared_dir)
    by_label = {}
    for i in range(len(source)):
        by_label.setdefault(source[i]["label"], []).append(decode_square(source[i]["image"], 64))
    for image, label in zip(plain["image"], plain["label"], strict=True):
        assert any(np.array_equal(image, candidate) for candidate in by_label[int(label)])
    # Same order and records as the augmented run; only the pixels differ.
    assert np.array_equal(plain["label"], in_process_batches[0]["label"])
    assert not np.array_equal(plain["image"], in_process_batches[0]["image"])


@pytest.mark.parametrize("workers, threads", [(0, 2), (2, 0)])
def test_batches_do_not_depend_on_workers_or_threads(
    prepared_dir, in_process_batches, workers, threads
):
    spec = SyntheticImages(
        path=str(prepared_dir), loading=Loading(workers=workers, threads=threads)
    )
    batches = take(spec, 6)
    for got, expected in zip(batches, in_process_batches, strict=False):
        assert got.keys() == expected.keys()
        for key in got:
            np.testing.assert_array_equal(got[key], expected[key], err_msg=key)
    assert multiprocessing.active_children() == []  # workers joined at close


def test_a_corrupt_jpeg_fails_with_its_record_index(tmp_path):
    records = [synthetic_record(0, i, (48, 64)) for i in range(16)]
    records[5] = {**records[5], "image": b"\xff\xd8 a cut JPEG"}
    path = write_prepared(tmp_path / "corrupt", "synthetic_images", {"train": records}, CLASS_NAMES)
    spec = SyntheticImages(path=str(path), loading=Loading(workers=0, threads=2))
    with pytest.raises(DataError, match=r"^record 5 \(image_00006.jpg\): cannot decode its JPEG"):
        take(spec, 4)


def test_workers_stop_at_close_without_waiting_for_a_reader(prepared_dir):
    # A 64 px batch (about 100 KB) comes through the worker's pipe pickled; in the kernel's
    # default 64 KiB pipe the worker could not exit before grain killed it, 25 s later.
    spec = SyntheticImages(path=str(prepared_dir), loading=Loading(workers=2, threads=0))
    assert BATCH * 64 * 64 * 3 < shared_memory_min_bytes(spec.loading.worker_buffer)
    with open_batches(spec, BATCH) as batches:
        next(batches)
        started = time.monotonic()
    assert time.monotonic() - started < 10
    assert multiprocessing.active_children() == []


def test_grown_pipes_hold_the_batches_in_flight():
    read, write = os.pipe()
    try:
        grow_pipes()
        assert fcntl.fcntl(write, fcntl.F_GETPIPE_SZ) == WORKER_PIPE_BYTES
    finally:
        os.close(read)
        os.close(write)
    assert shared_memory_min_bytes(worker_buffer=3) == WORKER_PIPE_BYTES // 4


def test_a_prepared_set_of_another_dataset_is_refused(prepared_dir):
    # prepared_dir is a synthetic_images set: timed as oxford-flowers its row would carry
    # the wrong dataset's name.
    spec = OxfordFlowers(path=str(prepared_dir), loading=Loading(workers=0, threads=0))
    with pytest.raises(DataError) as error:
        make_source(spec)
    assert str(error.value) == (
        f"--data.path {prepared_dir} holds the prepared dataset 'synthetic_images' (the name "
        "in its dataset_info.json), not 'oxford_flowers102', which data:oxford-flowers reads; "
        f"run it as data:synthetic-images --data.path {prepared_dir}"
    )
