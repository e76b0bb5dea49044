"""Make a TFDS-layout ArrayRecord version directory, without TensorFlow (the logic of
tools/prepare_dataset.py):

    python tools/prepare_dataset.py --source <102flowers folder> --out DIR
        (the original distribution: jpg/, imagelabels.mat, setid.mat -> oxford_flowers102;
        then: tools/benchmark_data.py data:oxford-flowers --data.path DIR)
    python tools/prepare_dataset.py --synthetic 2000 --out DIR
        (generated JPEG records around 500 px -> synthetic_images, for tests and demos;
        then: tools/benchmark_data.py data:synthetic-images --data.path DIR)

--out is checked before any work: an existing prepared dataset, a non-empty directory or a
file is never written over unless --overwrite says so (a file is never replaced by a
directory), and a place that cannot be written is refused in one line; so is a --synthetic
count whose records (their mean size from a sample) would not fit the disk's free space.
Records are made and written a shard at a time, each shard a progress line on stderr.
SIGINT / SIGTERM: one line saying what --out holds, exit 130 / 143.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from dew.bench.common import cli
from dew.bench.common.cli import UsageError
from dew.bench.common.errors import Interrupted, faults
from dew.bench.common.files import check_output_dir
from dew.data.sources import DataError, prepared_files, read_dataset_info

PROG = "tools/prepare_dataset.py"


@dataclasses.dataclass(frozen=True)
class Args:
    """Make a TFDS-layout ArrayRecord version directory (no TensorFlow needed)."""

    out: Path
    """the version directory to write (refused if it holds anything, unless --overwrite)"""
    source: Path | None = None
    """folder of the original Oxford Flowers 102 files (jpg/, imagelabels.mat, setid.mat)"""
    synthetic: int | None = None
    """N generated records instead of --source"""
    seed: int = 0
    """seed of --synthetic"""
    overwrite: bool = False
    """write over the dataset or files already in --out"""


def parse_args(argv: Sequence[str]) -> Args:
    """tyro's parse plus what tyro cannot check; raises UsageError (one line)."""
    args = cli.parse(Args, argv, prog=PROG)
    if (args.source is None) == (args.synthetic is None):
        given = "both" if args.source is not None else "neither"
        raise UsageError(f"give one of --source DIR or --synthetic N ({given} given)")
    if args.synthetic is not None and args.synthetic < 1:
        raise UsageError(f"--synthetic must be at least 1 (got {args.synthetic})")
    if not 0 <= args.seed < 2**63:  # numpy's seed words are unsigned
        raise UsageError(f"--seed must be in [0, 2**63) (got {args.seed})")
    if args.source is not None and not args.source.is_dir():
        what = "not a directory" if args.source.exists() else "no such directory"
        raise UsageError(f"--source {args.source}: {what}")
    return args


def check_out(out: Path, *, overwrite: bool) -> list[Path]:
    """Refuse an --out that would lose something or cannot be written (changes nothing);
    returns the files of the prepared dataset already there, which --overwrite replaces."""
    check_output_dir(out, flag="--out")  # a file, a path under a file, an unwritable place
    if not out.is_dir() or not any(out.iterdir()):
        return []
    old_files = prepared_files(out)
    if overwrite:
        return old_files
    if old_files:
        name = read_dataset_info(out).get("name")
        raise UsageError(
            f"--out {out} holds the prepared dataset {name!r}; pass --overwrite to replace it"
        )
    raise UsageError(
        f"--out {out} is a directory that is not empty; give a new directory, or pass "
        "--overwrite to write the dataset into it"
    )


def check_room(count: int, out: Path) -> None:
    """Refuse, before any record is written, a --synthetic count whose records would not fit
    the free space where --out goes (the mean size of a sample of them, 10% to spare)."""
    from dew.data.synthetic import record_bytes

    where = out
    while not where.exists():
        where = where.parent
    free = shutil.disk_usage(where).free
    each = record_bytes()
    need = count * each * 1.1
    if need > free:
        most = int(free / (each * 1.1))
        raise UsageError(
            f"--synthetic {count:,} needs about {need / 1e9:,.1f} GB ({each / 1e3:.0f} kB a "
            f"record), more than the {free / 1e9:,.1f} GB free under {where}; give at most "
            f"{most:,}, or an --out with room"
        )


def say_progress(done: int, total: int) -> None:
    print(f"{PROG}: {done:,} of {total:,} records written", file=sys.stderr, flush=True)


def prepare(args: Args) -> Path:
    """Write the dataset --out names; a source that is not what it should be is one line."""
    from dew.data.oxford_flowers import prepare_from_original
    from dew.data.synthetic import prepare_synthetic

    try:
        if args.synthetic is not None:
            return prepare_synthetic(
                args.synthetic, args.out, seed=args.seed, progress=say_progress
            )
        return prepare_from_original(args.source, args.out)
    except DataError as error:
        raise UsageError(str(error)) from None
    except OSError as error:  # checked writable up front; a full disk still ends here
        raise UsageError(f"--out {args.out}: {cli.one_line(error)}") from None


def main(argv: Sequence[str] | None = None) -> int:
    def body() -> int:
        args = parse_args(sys.argv[1:] if argv is None else list(argv))
        old_files = check_out(args.out, overwrite=args.overwrite)
        if args.synthetic is not None:
            check_room(args.synthetic, args.out)
        try:
            path = prepare(args)
        except Interrupted as stop:
            stop.message = (
                f"interrupted: --out {args.out} holds part of a dataset (no dataset_info.json "
                "yet, so no reader takes it); run again with --overwrite to make it whole"
            )
            raise
        # Shards of the replaced dataset that the new one does not have (it had more
        # records, or other splits) would stay behind as files no dataset_info.json lists.
        written = set(prepared_files(path))
        for stale in old_files:
            if stale not in written and stale.is_file():
                stale.unlink()
        print(path)
        return cli.EXIT_OK

    return faults(PROG, lambda: cli.run(PROG, body))
