"""Fixtures the loader tests share."""

import pytest


@pytest.fixture(scope="module")
def prepared_synthetic(tmp_path_factory):
    """What tools/prepare_dataset.py --synthetic N writes: a set named synthetic_images."""
    from dew.data.synthetic import prepare_synthetic

    return prepare_synthetic(8, tmp_path_factory.mktemp("synthetic") / "set", sides=(64, 96))
