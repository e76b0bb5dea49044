"""The grain input pipeline: dataset spec -> batches of {"image", "label", "tokens", "mask"}.

  MapDataset.source -> seed -> shuffle -> repeat -> random_map(decode, augment, tokenize)
  -> batch -> to_iter_dataset(ReadOptions(threads)) -> mp_prefetch(workers)

Batches come back from workers through the worker's pipe, pickled, unless an array is too
large for the pipe (`shared_memory_min_bytes`). grain's default writes every batch array
into a fresh shared-memory block instead, which the main process maps, copies and unlinks:
at 64 px a batch is about 100 KB, and those four blocks per batch cost the main process
about 1.5 ms, taking CPU from the workers on a small machine (measured on 2 cores:
main-process CPU per 1000 batches 1.5 s -> 0.5 s, throughput +30%).

A pickled batch must fit in the pipe whole: a worker that is told to stop exits only once
its queue's feeder thread has written what it holds, and at close nobody reads any more.
With the kernel's 64 KiB pipe a 100 KB batch kept each worker alive until grain killed it
25 s later; workers grow their pipes to WORKER_PIPE_BYTES, and arrays that would not fit
the batches a worker keeps in flight go through shared memory.

Batching happens in the MapDataset stage, so batch b holds the same records, with the same
augmentation, whatever the worker and thread counts (grain hands each record an rng derived
from the seed and its position). Iterate through `open_batches`, which closes the iterator:
an unclosed multi-worker iterator leaves processes, threads and shared memory behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import stat
from collections.abc import Iterator

import grain
import numpy as np

from dew.data.oxford_flowers import oxford_flowers_source
from dew.data.sources import DataError, PreparedTfdsSource, read_dataset_info
from dew.data.spec import DATASETS, DatasetSpec, OxfordFlowers, SyntheticImages, flag
from dew.data.synthetic import SyntheticSource
from dew.data.transforms import ImageTextTransform

# The pipe each worker sends its batches through, grown from the kernel's 64 KiB (1 MiB is
# Linux's default /proc/sys/fs/pipe-max-size, which unprivileged processes may reach).
WORKER_PIPE_BYTES = 1 << 20


def make_source(spec: DatasetSpec):
    """The random-access record source a spec names (checks the directory up front)."""
    if spec.path is not None:
        check_prepared_name(spec)
    if isinstance(spec, OxfordFlowers):
        return oxford_flowers_source(spec.path, spec.split)
    if isinstance(spec, SyntheticImages):
        if spec.path is not None:
            source = PreparedTfdsSource(spec.path, spec.split)
            if not source.class_names:
                source.class_names = SyntheticSource(1).class_names
            return source
        return SyntheticSource(spec.num_records, spec.seed)
    raise TypeError(f"no source for {type(spec).__name__}")


def check_prepared_name(spec: DatasetSpec) -> None:
    """Refuse a prepared directory of another dataset than the spec's: its rows would be
    labelled with the spec's name while timing other records (a synthetic set timed as
    oxford-flowers). The name is the one in the directory's dataset_info.json."""
    found = read_dataset_info(spec.path).get("name")
    if found in (spec.prepared_name, None):  # no name: the source says what is wrong
        return
    readers = [other.name for other in DATASETS.values() if other.prepared_name == found]
    hint = (
        f"run it as data:{readers[0]} --data.path {spec.path}"
        if readers
        else "prepare one with tools/prepare_dataset.py"
    )
    raise DataError(
        f"{flag('path')} {spec.path} holds the prepared dataset {found!r} (the name in its "
        f"dataset_info.json), not {spec.prepared_name!r}, which data:{spec.name} reads; {hint}"
    )


def build_dataset(spec: DatasetSpec, batch_size: int, *, source=None) -> grain.MapDataset:
    """Endless batches as a MapDataset (one epoch after another, reshuffled each epoch)."""
    source = make_source(spec) if source is None else source
    transform = ImageTextTransform(spec.image_size, spec.augmentation, source.class_names)
    return (
        grain.MapDataset.source(source)
        .seed(spec.seed)
        .shuffle()
        .repeat(None)
        .random_map(transform)
        # A batch_fn of our own: grain's default one, once mp_prefetch asks for it, stacks
        # straight into shared memory whatever the size (see the module docstring).
        .batch(batch_size, drop_remainder=True, batch_fn=stack_records)
    )


def stack_records(records: list[dict]) -> dict:
    """A list of records -> one dict of arrays with a leading batch axis."""
    return {key: np.stack([record[key] for record in records]) for key in records[0]}


def grow_pipes(size: int = WORKER_PIPE_BYTES) -> None:
    """Give every pipe this process holds a `size`-byte buffer (Linux; elsewhere nothing).

    Where a pipe cannot grow, shared_memory_min_bytes has already sent the batches through
    shared memory, so a failure here is not an error.
    """
    if not hasattr(fcntl, "F_SETPIPE_SZ"):
        return
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own fd is closed by now
            fd = int(name)
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)


def shared_memory_min_bytes(worker_buffer: int) -> int:
    """The smallest array a worker sends through shared memory rather than its pipe: what
    leaves the batches it may have in flight (worker_buffer) room in a grown pipe. 0 (all
    through shared memory, grain's default) where pipes cannot grow."""
    read, write = os.pipe()
    try:
        fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, WORKER_PIPE_BYTES)
    except (AttributeError, OSError):
        return 0
    finally:
        os.close(read)
        os.close(write)
    return WORKER_PIPE_BYTES // (worker_buffer + 1)


def _worker_init(worker_index: int, worker_count: int) -> None:
    # The batch queue's pipe came with the process; grow it before the first batch.
    grow_pipes()
    # Workers only decode images: keep them off any accelerator, whose memory they would
    # otherwise take when something in them first touches jax.
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    jax.config.update("jax_platforms", "cpu")


def _mark_absl_flags_parsed() -> None:
    # grain's multiprocessing reads absl flags; outside absl.app.run they are unparsed and
    # mp_prefetch raises UnparsedFlagAccessError.
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def to_iter_dataset(dataset: grain.MapDataset, spec: DatasetSpec) -> grain.IterDataset:
    loading = spec.loading
    iter_dataset = dataset.to_iter_dataset(
        grain.ReadOptions(num_threads=loading.threads, prefetch_buffer_size=loading.read_ahead)
    )
    if loading.workers > 0:
        _mark_absl_flags_parsed()
        iter_dataset = grain.experimental.WithOptionsIterDataset(
            iter_dataset,
            grain.experimental.DatasetOptions(
                min_shm_size=shared_memory_min_bytes(loading.worker_buffer)
            ),
        )
        iter_dataset = iter_dataset.mp_prefetch(
            grain.MultiprocessingOptions(
                num_workers=loading.workers, per_worker_buffer_size=loading.worker_buffer
            ),
            worker_init_fn=_worker_init,
        )
    return iter_dataset


@contextlib.contextmanager
def open_batches(spec: DatasetSpec, batch_size: int, *, source=None) -> Iterator[Iterator[dict]]:
    """An iterator over batches, closed (workers joined, shared memory freed) on exit.

    Entry points that use workers > 0 need an `if __name__ == "__main__":` guard: grain
    starts its workers with spawn, which re-imports the main module.
    """
    spec.check()
    iterator = iter(to_iter_dataset(build_dataset(spec, batch_size, source=source), spec))
    batches = _batches(iterator)
    try:
        yield batches
    finally:
        batches.close()
        iterator.close()
        # Free the closed iterator (and any batches still in its buffers) now, while the
        # interpreter is whole: freed at shutdown instead, grain's __del__ hooks fail and
        # shared memory blocks are reported as leaked.
        del iterator, batches
        gc.collect()


def _batches(iterator: Iterator[dict]) -> Iterator[dict]:
    # An array from a worker's shared memory (a numpy subclass) is a view freed when the
    # view is collected; one kept past the pipeline's close would leak its block. A copy is
    # the consumer's own. Pickled arrays are plain ndarrays and already the consumer's.
    for batch in iterator:
        # Rebinding drops the view at once, also when an exception keeps this frame.
        batch = {
            key: value if type(value) is np.ndarray else np.array(value)
            for key, value in batch.items()
        }
        yield batch
