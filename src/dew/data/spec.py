"""Dataset specs: plain, frozen data naming what to load and how, registered by name.

The command line sets them as `--data.*` (tyro subcommands `data:<name>`), so a field
here is a flag there: `--data.image-size 64 --data.loading.workers 0 --data.path DIR`.
The checks and notices therefore name a field by its flag (`flag("loading.workers")`).
"""

from __future__ import annotations

import os
from typing import ClassVar

from dew import flags
from dew.config import Config

# The largest square side a record is decoded to. The photos are about 500 px and the step
# benchmark's models take 64 px or less; at 4096 px a batch of 8 is already 400 MB of uint8,
# several batches in flight per worker. Above that a typo (100000 px is 30 GB an image)
# ends with the process killed for memory or PIL's decompression-bomb refusal, after the
# workers started and with no reason a user can act on: refused up front instead.
MAX_IMAGE_SIZE = 4096


def flag(field: str) -> str:
    """The flag that sets a spec field: `loading.workers` -> `--data.loading.workers`."""
    return flags.flag("data." + field)


class Loading(Config):
    """How grain reads: worker processes, read threads per process and their buffers.

    The defaults are the seed's (32 workers, 64 threads); a machine with fewer cores gets
    them capped by `capped_to_machine`, because threads or workers beyond the cores slow a
    CPU-bound decode down.
    """

    workers: int = 32
    """grain worker processes (mp_prefetch); 0 loads in the calling process."""
    threads: int = 64
    """read threads per process (ReadOptions.num_threads); 0 reads synchronously."""
    read_buffer: int | None = None
    """batches each process reads ahead (ReadOptions.prefetch_buffer_size; the pipeline
    batches first, so its elements are batches). None: twice the threads, enough to keep
    them busy; a deeper buffer lets a worker that starts first run far ahead, which a
    short timed window would then read as throughput."""
    worker_buffer: int = 1
    """batches each worker keeps ready (MultiprocessingOptions.per_worker_buffer_size)."""

    def check(self) -> None:
        for name in ("workers", "threads", "read_buffer"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{flag('loading.' + name)} must be >= 0, got {value}")
        if self.worker_buffer < 1:
            raise ValueError(
                f"{flag('loading.worker_buffer')} must be >= 1, got {self.worker_buffer}"
            )

    @property
    def read_ahead(self) -> int:
        return self.read_buffer if self.read_buffer is not None else max(2 * self.threads, 2)

    def capped_to_machine(self, cpus: int | None = None) -> tuple[Loading, list[str]]:
        """Workers capped to the CPU count, and threads so that every process's threads
        together do not outnumber the CPUs (workers x threads <= CPUs, at least 1 thread
        each); one notice per capped value. Threads beyond the cores slow a CPU-bound decode
        down: on 2 CPUs one worker with 2 threads spent 1.6 ms of CPU a record against 1.1
        in one thread."""
        cpus = cpus or os.cpu_count() or 1
        workers = min(self.workers, cpus)
        threads = min(self.threads, max(1, cpus // max(workers, 1)))
        notices = []
        for name, value, capped in (
            ("workers", self.workers, workers),
            ("threads", self.threads, threads),
        ):
            if capped != value:
                share = name == "threads" and workers > 1
                why = f"{cpus} CPUs over {workers} workers" if share else f"{cpus} CPUs here"
                notices.append(f"{flag('loading.' + name)} {value} capped to {capped} ({why})")
        return self.model_copy(update={"workers": workers, "threads": threads}), notices


class DatasetSpec(Config):
    """Fields every dataset has. Subclasses set `name`, the key in DATASETS, and
    `prepared_name`, the `name` in the dataset_info.json of a directory it reads."""

    name: ClassVar[str] = ""
    prepared_name: ClassVar[str] = ""

    image_size: int = 64
    """square side in pixels after resize."""
    augmentation: bool = True
    """horizontal flip p=0.5 and colour jitter."""
    path: str | None = None
    """a prepared TFDS version directory (dataset_info.json + ArrayRecord shards)."""
    split: str = "all"
    """a split name, several joined with '+', or 'all' (every split in dataset_info.json)."""
    seed: int = 0
    """shuffle order and per-record augmentation randomness."""
    loading: Loading = Loading()

    def check(self) -> None:
        if not 1 <= self.image_size <= MAX_IMAGE_SIZE:
            why = " (a larger square only upsamples; a batch of them takes GBs)"
            raise ValueError(
                f"{flag('image_size')} must be 1..{MAX_IMAGE_SIZE} px, got {self.image_size}"
                + (why if self.image_size > MAX_IMAGE_SIZE else "")
            )
        self.loading.check()


class OxfordFlowers(DatasetSpec):
    """Oxford Flowers 102 from a TFDS-prepared oxford_flowers102 directory (8,189 records)."""

    name: ClassVar[str] = "oxford-flowers"
    prepared_name: ClassVar[str] = "oxford_flowers102"  # TFDS's name, which TFDS writes


class SyntheticImages(DatasetSpec):
    """Generated JPEG records: from `path` when given (made by prepare_dataset.py
    --synthetic N), else generated in memory at start (so no disk is needed)."""

    name: ClassVar[str] = "synthetic-images"
    prepared_name: ClassVar[str] = "synthetic_images"

    num_records: int = 2000
    """records generated in memory when no path is given."""

    def check(self) -> None:
        super().check()
        if self.num_records < 1:
            raise ValueError(f"{flag('num_records')} must be >= 1, got {self.num_records}")


DATASETS: dict[str, type[DatasetSpec]] = {
    spec.name: spec for spec in (OxfordFlowers, SyntheticImages)
}


def dataset_spec(name: str, **fields) -> DatasetSpec:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid: {', '.join(sorted(DATASETS))}")
    return DATASETS[name](**fields)
