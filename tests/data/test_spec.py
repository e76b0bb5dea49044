"""Dataset specs: registry, checks with one-line errors, loading capped to the machine."""

import pytest

from dew.data.spec import DATASETS, Loading, OxfordFlowers, SyntheticImages, dataset_spec


def test_specs_are_registered_by_name():
    assert DATASETS == {"oxford-flowers": OxfordFlowers, "synthetic-images": SyntheticImages}
    spec = dataset_spec("oxford-flowers", image_size=32, path="/data")
    assert (spec.image_size, spec.split, spec.seed, spec.augmentation) == (32, "all", 0, True)
    assert (spec.loading.workers, spec.loading.threads) == (32, 64)
    with pytest.raises(ValueError, match="unknown dataset 'flowers'; valid: oxford-flowers, "):
        dataset_spec("flowers")


@pytest.mark.parametrize(
    "loading, message",
    [
        (Loading(workers=-1), "--data.loading.workers must be >= 0, got -1"),
        (Loading(threads=-2), "--data.loading.threads must be >= 0, got -2"),
        (Loading(worker_buffer=0), "--data.loading.worker-buffer must be >= 1, got 0"),
    ],
)
def test_bad_loading_is_one_line(loading, message):
    with pytest.raises(ValueError) as error:
        OxfordFlowers(loading=loading).check()
    assert str(error.value) == message


def test_loading_is_capped_to_the_machine():
    capped, notices = Loading(workers=32, threads=1).capped_to_machine(cpus=2)
    assert (capped.workers, capped.threads) == (2, 1)
    assert notices == ["--data.loading.workers 32 capped to 2 (2 CPUs here)"]


def test_threads_share_the_cpus_with_the_workers():
    capped, notices = Loading(workers=32, threads=64).capped_to_machine(cpus=8)
    assert (capped.workers, capped.threads) == (8, 1)
    assert notices[1] == "--data.loading.threads 64 capped to 1 (8 CPUs over 8 workers)"
    capped, _ = Loading(workers=2, threads=64).capped_to_machine(cpus=8)
    assert (capped.workers, capped.threads) == (2, 4)
    capped, notices = Loading(workers=0, threads=64).capped_to_machine(cpus=8)
    assert (capped.workers, capped.threads) == (0, 8)
    assert notices == ["--data.loading.threads 64 capped to 8 (8 CPUs here)"]
    capped, notices = Loading(workers=2, threads=0).capped_to_machine(cpus=8)
    assert (capped.workers, capped.threads, notices) == (2, 0, [])


def test_read_ahead_defaults_to_twice_the_threads():
    assert Loading(threads=4).read_ahead == 8
    assert Loading(threads=0).read_ahead == 2
    assert Loading(threads=4, read_buffer=100).read_ahead == 100


@pytest.mark.parametrize(
    "size, message",
    [
        (0, "--data.image-size must be 1..4096 px, got 0"),
        (4097, "--data.image-size must be 1..4096 px, got 4097 (a larger square only upsamples"),
    ],
)
def test_image_size_outside_the_valid_range_names_it(size, message):
    with pytest.raises(ValueError) as error:
        SyntheticImages(image_size=size).check()
    assert str(error.value).startswith(message)
    SyntheticImages(image_size=4096).check()
