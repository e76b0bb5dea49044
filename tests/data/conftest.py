"""A 256-record TFDS-layout fixture made by the tests themselves (no downloads)."""

import pytest

from dew.data.sources import write_prepared
from dew.data.synthetic import CLASS_NAMES, synthetic_record

SPLIT_SIZES = {"train": 100, "validation": 56, "test": 100}
# Small images keep the fixture fast; draft-mode decoding is tested on large ones apart.
SIDES = (48, 160)


def fixture_records() -> dict[str, list[dict]]:
    records, start = {}, 0
    for split, size in SPLIT_SIZES.items():
        records[split] = [synthetic_record(7, start + i, SIDES) for i in range(size)]
        start += size
    return records


@pytest.fixture(scope="session")
def written_records() -> dict[str, list[dict]]:
    return fixture_records()


@pytest.fixture(scope="session")
def prepared_dir(tmp_path_factory, written_records):
    path = tmp_path_factory.mktemp("tfds") / "synthetic_images" / "1.0.0"
    # 64 records a shard: every split spans several shards.
    return write_prepared(
        path, "synthetic_images", written_records, CLASS_NAMES, records_per_shard=64
    )
