"""A second run does not pay the compile again: compile-only of one architecture twice,
each in a fresh process, with the same --compilation-cache-dir.

    python scripts/compile_cache_check.py [--architecture simple_dit] [--preset small]
        [--cache-dir DIR] [--min-speedup 5]

The first run starts from an empty cache directory (a new temporary one unless --cache-dir
is given), so it compiles; the second finds the executable there. Prints both compile
time (the first row's compile_s) and the second's read from the cache (its load_s; its
compile_s keeps the original compile's time) and their ratio; exit 0 when the second is at
least --min-speedup times faster, 1 when it is not (or a run failed), 2 on bad input.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from dew.bench.common import cli
from dew.bench.common.files import check_output_dir
from dew.bench.sweep import presets

PROG = "compile_cache_check"
REPO = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Args:
    """Compile-only of one architecture twice, in fresh processes sharing one compilation
    cache. Exit 0: the second compile is --min-speedup times faster; 1: it is not; 2: usage."""

    architecture: str = "simple_dit"
    """the architecture compiled (one of the preset's; its first case there)"""
    preset: Literal["small", "cpu-smoke"] = "small"
    """the benchmark preset (dew.bench.sweep.presets)"""
    cache_dir: Path | None = None
    """an empty or new directory for the cache (None: a temporary one, removed after)"""
    min_speedup: float = 5.0
    """how many times faster the second compile must be (> 0)"""


class RunFailed(Exception):
    """A compile-only run did not give an ok row."""


def check(args: Args) -> None:
    """What tyro cannot check, before anything runs: UsageError with one line."""
    if not (args.min_speedup > 0 and math.isfinite(args.min_speedup)):  # NaN fails too
        raise cli.UsageError(
            f"--min-speedup must be a finite number > 0 (got {args.min_speedup:g})"
        )
    try:
        presets.select(presets.get(args.preset), [args.architecture])
    except ValueError as error:
        raise cli.UsageError(f"--architecture: {error}") from None
    if args.cache_dir is not None:
        check_output_dir(args.cache_dir, flag="--cache-dir")
        if args.cache_dir.exists() and any(args.cache_dir.iterdir()):
            raise cli.UsageError(
                f"--cache-dir {args.cache_dir} is not empty; the first run must compile"
            )


def compile_once(architecture: str, preset: str, cache: Path, out: Path):
    # --cases with the architecture alone: the preset's first case of it, one row (the
    # preset may have more, e.g. causal_transformer's MoE case).
    command = [
        sys.executable,
        str(REPO / "tools" / "benchmark_step.py"),
        "--preset", preset,
        "--cases", json.dumps([{"architecture": architecture}]),
        "--compile-only",
        "--compilation-cache-dir", str(cache),
        "--json-out", str(out),
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    rows = read_rows(out)
    if done.returncode != 0 or len(rows) != 1 or rows[0].status != "ok":
        why = rows[0].error if len(rows) == 1 and rows[0].error else done.stderr.strip()
        raise RunFailed(f"compile-only run failed: {why.splitlines()[-1] if why else '?'}")
    return rows[0], wall


def read_rows(out: Path) -> list:
    """The run's rows; none when it wrote no record (it failed before any case)."""
    from dew.bench.record.schema import read_run

    if not out.is_file():
        return []
    return list(read_run(out).rows)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    prog = "scripts/compile_cache_check.py"
    return cli.run(PROG, lambda: compare_compiles(cli.parse(Args, argv, prog=prog)))


def compare_compiles(args: Args) -> int:
    check(args)
    with tempfile.TemporaryDirectory(prefix="dew-cache-check-") as scratch:
        cache = args.cache_dir or Path(scratch) / "cache"
        try:
            runs = [
                compile_once(args.architecture, args.preset, cache, Path(scratch) / f"{n}.json")
                for n in (1, 2)
            ]
        except RunFailed as error:
            cli.say(PROG, cli.one_line(error))
            return cli.EXIT_CHANGED
    (first, first_wall), (second, second_wall) = runs
    if first.load_s is not None or second.load_s is None:
        which = (
            "first run read the step from the cache"
            if first.load_s is not None
            else ("second run compiled the step again: the cache missed")
        )
        cli.say(PROG, f"the {which}")
        return cli.EXIT_CHANGED

    speedup = first.compile_s / second.load_s if second.load_s else math.inf  # may round to 0
    print(f"{args.architecture} ({args.preset}), --compile-only, same --compilation-cache-dir")
    print(f"first run:  compile {first.compile_s:.2f} s (process wall {first_wall:.1f} s)")
    print(
        f"second run: read from the cache in {second.load_s:.2f} s, its compile_s keeps "
        f"{second.compile_s:.2f} s (process wall {second_wall:.1f} s)"
    )
    print(f"speedup:    {speedup:.1f}x (needed {args.min_speedup:g}x)")
    return cli.EXIT_OK if speedup >= args.min_speedup else cli.EXIT_CHANGED


if __name__ == "__main__":
    sys.exit(main())
