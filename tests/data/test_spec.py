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
        (Loading(workers=-1), "data.loading.workers must be >= 0, got -1"),
        (Loading(threads=-2), "data.loading.threads must be >= 0, got -2"),
        (Loading(worker_buffer=0), "data.loading.worker_buffer must be >= 1, got 0"),
    ],
)
def test_bad_loading_is_one_line(loading, message):
    with pytest.raises(ValueError) as error:
        OxfordFlowers(loading=loading).check()
    assert str(error.value) == message


def test_loading_is_capped_to_the_machine():
    capped, notices = Loading(workers=32, threads=1).capped_to_machine(cpus=2)
    assert (capped.workers, capped.threads) == (2, 1)
    assert notices == ["data.loading.workers 32 capped to 2 (CPUs here)"]


def test_read_ahead_defaults_to_twice_the_threads():
    assert Loading(threads=4).read_ahead == 8
    assert Loading(threads=0).read_ahead == 2
    assert Loading(threads=4, read_buffer=100).read_ahead == 100
