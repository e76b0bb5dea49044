"""A second run does not pay the compile again: compile-only of one architecture twice,
each in a fresh process, with the same --compilation-cache-dir.

    python scripts/compile_cache_check.py [--architecture simple_dit] [--preset small]
        [--cache-dir DIR] [--min-speedup 5]

The first run starts from an empty cache directory (a new temporary one unless --cache-dir
is given), so it compiles; the second finds the executable there. Prints both compile
times (the rows' compile_s) and their ratio; exit 0 when the second is at least
--min-speedup times faster.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dew.bench.schema import read_run

REPO = Path(__file__).resolve().parents[1]


def compile_once(architecture: str, preset: str, cache: Path, out: Path) -> tuple[float, float]:
    command = [
        sys.executable,
        str(REPO / "tools" / "benchmark_step.py"),
        "--preset", preset,
        "--architectures", architecture,
        "--compile-only",
        "--compilation-cache-dir", str(cache),
        "--json-out", str(out),
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    (row,) = read_run(out).rows
    if done.returncode != 0 or row.status != "ok":
        raise SystemExit(f"compile-only run failed: {row.error or done.stderr.strip()[-300:]}")
    return row.compile_s, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--architecture", default="simple_dit")
    parser.add_argument("--preset", default="small", choices=["small", "cpu-smoke"])
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--min-speedup", type=float, default=5.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="dew-cache-check-") as scratch:
        cache = args.cache_dir or Path(scratch) / "cache"
        if cache.exists() and any(cache.iterdir()):
            raise SystemExit(f"--cache-dir {cache} is not empty; the first run must compile")
        runs = [
            compile_once(args.architecture, args.preset, cache, Path(scratch) / f"{n}.json")
            for n in (1, 2)
        ]
    (first, first_wall), (second, second_wall) = runs

    speedup = first / second
    print(f"{args.architecture} ({args.preset}), --compile-only, same --compilation-cache-dir")
    print(f"first run:  compile {first:.2f} s (process wall {first_wall:.1f} s)")
    print(f"second run: compile {second:.2f} s (process wall {second_wall:.1f} s)")
    print(f"speedup:    {speedup:.1f}x (needed {args.min_speedup:g}x)")
    return 0 if speedup >= args.min_speedup else 1


if __name__ == "__main__":
    sys.exit(main())
