"""The baseline for the loader benchmark: the same per-record work as dew's pipeline
(read, parse the Example, decode to a square with draft mode, flip and jitter, caption and
CLIP tokens), written as a plain for loop in one thread, batched with np.stack.

    python scripts/plain_loader_baseline.py --path DIR --batch 8 --image-size 64 \
        --steps 100 --warmup 5

Reports samples/s, p50 and p95 of the time between consecutive batches, timed as
tools/benchmark_data.py times them, so the two figures compare.
"""

import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence

import numpy as np

from dew.bench.common import cli
from dew.data.sources import DataError, PreparedTfdsSource
from dew.data.tokenize import tokenize
from dew.data.transforms import caption, decode_square, flip_and_jitter


def plain_batches(source, batch: int, image_size: int, seed: int):
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(source))
    position = 0
    while True:
        images, labels, tokens, masks = [], [], [], []
        for _ in range(batch):
            record = source[int(order[position % len(order)])]
            position += 1
            image = flip_and_jitter(decode_square(record["image"], image_size), rng)
            ids, mask = tokenize(caption(source.class_names[record["label"]], rng))
            images.append(image)
            labels.append(record["label"])
            tokens.append(ids)
            masks.append(mask)
        yield {
            "image": np.stack(images),
            "label": np.asarray(labels, np.int32),
            "tokens": np.stack(tokens),
            "mask": np.stack(masks),
        }


@dataclasses.dataclass(frozen=True)
class Args:
    """The loader benchmark's per-record work as a plain one-thread loop."""

    path: str
    """a prepared TFDS version directory"""
    batch: int = 8
    image_size: int = 64
    steps: int = 100
    warmup: int = 5
    seed: int = 0
    json_out: str | None = None
    """also write the figures to this JSON file"""


def main(argv: Sequence[str] | None = None) -> int:
    def body() -> int:
        argv_ = sys.argv[1:] if argv is None else argv
        args = cli.parse(Args, argv_, prog="scripts/plain_loader_baseline.py")
        try:
            source = PreparedTfdsSource(args.path)
        except DataError as e:
            raise cli.UsageError(str(e)) from None
        return measure(args, source)

    return cli.run("plain_loader_baseline", body)


def measure(args: Args, source) -> int:
    batches = plain_batches(source, args.batch, args.image_size, args.seed)
    for _ in range(max(args.warmup, 1)):
        next(batches)
    intervals = np.empty(args.steps)
    last = time.perf_counter()
    for i in range(args.steps):
        next(batches)
        now = time.perf_counter()
        intervals[i] = now - last
        last = now
    figures = {
        "samples_per_s": args.steps * args.batch / intervals.sum(),
        "p50_ms": np.percentile(intervals, 50) * 1e3,
        "p95_ms": np.percentile(intervals, 95) * 1e3,
    }
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(
        f"plain loop batch {args.batch} at {args.image_size} px: "
        f"{figures['samples_per_s']:.1f} samples/s, p50 {figures['p50_ms']:.2f} ms, "
        f"p95 {figures['p95_ms']:.2f} ms (load average at end {load} on {os.cpu_count()} CPUs)"
    )
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(figures, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
