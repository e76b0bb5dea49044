"""Does a case time the same alone on the chip and beside other loaded programs?

    python scripts/held_chip_crowding.py --cache /tmp/dew-cache --record RUN/step.json \
        [--cases unet simple_dit] [--windows 5] [--crowd 15] [--objects 2000000]

A TPU round times every case in one process that has loaded the round's programs first
(dew.bench.sweep.chip.holder). This script holds the chip itself and times one case's
dispatch window (`--steps` steps back to back, one block at the end: the row's ms/step,
dew.bench.sweep.timing) in five conditions, `--windows` windows each, in this order:

    alone            the case's program the only one loaded
    crowded          `--crowd` more programs loaded beside it (the cache's others, cycled)
    crowded, frozen  the same, with gc.freeze(): the collector no longer walks what was
                     alive before the windows
    alone again      the others unloaded and collected (the first condition, later)
    objects          alone, with `--objects` long-lived Python objects in the process

Each window also reads how long the host took to dispatch its steps (the loop's end,
before the block) as a share of the window: near 100% the host, not the chip, sets the
pace. The programs are those a run kept in its --compilation-cache-dir
(dew.bench.sweep.chip.kept_programs), named by the rows of `--record` (a record of the
same run: its params and batch). Prints a Markdown table; exit 0, 2 on bad input.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import gc
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from dew.bench.common import cli
from dew.bench.record.validate import load
from dew.bench.sweep.chip import kept_programs
from dew.bench.sweep.chip.kept_programs import FIGURES, FOLDER
from dew.bench.sweep.timing import block


@dataclasses.dataclass(frozen=True)
class Args:
    """Time cases alone and beside other loaded programs on a held chip."""

    cache: str
    """the run's --compilation-cache-dir"""
    record: str
    """a record of that run (its rows name the kept programs)"""
    cases: tuple[str, ...] = ("unet",)
    """the architectures to time (rows of the record)"""
    windows: int = 5
    steps: int = 100
    crowd: int = 15
    objects: int = 2_000_000


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    prog = "scripts/held_chip_crowding.py"
    return cli.run(prog, lambda: run(cli.parse(Args, argv, prog=prog)))


def programs(args: Args) -> tuple[dict[str, Path], list[Path]]:
    """architecture -> its kept program's folder, by the record's params and batch; and
    every whole kept program (a copy still being kept has no figures yet)."""
    folder = Path(args.cache) / FOLDER
    if not folder.is_dir():
        raise cli.UsageError(f"--cache: no kept programs in {folder} (run a TPU case first)")
    rows = {
        (row.params, row.batch): row.architecture
        for row in load(Path(args.record), "--record").rows
    }
    kept = [entry for entry in sorted(folder.iterdir()) if (entry / FIGURES).is_file()]
    found = {}
    for entry in kept:
        figures = kept_programs.read(entry)["figures"]
        name = rows.get((figures.get("params"), figures.get("batch")))
        if name is not None and name not in found:
            found[name] = entry
    missing = [name for name in args.cases if name not in found]
    if missing:
        raise cli.UsageError(f"--cases: no kept program for {', '.join(missing)} in {folder}")
    return found, kept


def run(args: Args) -> int:
    import jax

    from dew.train.executables import Program

    found, kept = programs(args)
    others = [entry for entry in kept if entry not in {found[n] for n in args.cases}]
    print(f"{jax.devices()[0].device_kind}: {len(others)} other programs to crowd with")
    print("| case | condition | ms/step median | min | max | host dispatch share |")
    print("|---|---|---|---|---|---|")
    for name in args.cases:
        window = Windows(name, Program(found[name]), args)
        window.time("alone")
        picked = [others[i % len(others)] for i in range(args.crowd)] if others else []
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            crowd = list(pool.map(Program, picked))
        window.time(f"crowded ({len(crowd)} more loaded)")
        gc.freeze()
        window.time("crowded, frozen")
        gc.unfreeze()
        del crowd
        gc.collect()
        window.time("alone again")
        ballast = [(i, str(i)) for i in range(args.objects)]
        window.time(f"objects ({len(ballast):,} more)")
        del ballast, window
        gc.collect()
    return 0


class Windows:
    """One case's program on the chip, its state threaded through every window. The window
    is the step benchmark's dispatch window, timed here rather than by
    dew.bench.sweep.timing.time_steps, which freezes the collector: the thing compared."""

    def __init__(self, name: str, program, args: Args):
        self.name, self.program, self.args = name, program, args
        self.state, self.batch = block((program.init(), program.batch()))
        for _ in range(3):  # warm
            self.state, _ = program.step(self.state, self.batch)
        block(self.state)

    def time(self, condition: str) -> None:
        """`--windows` dispatch windows; one table line."""
        ms, shares = [], []
        for _ in range(self.args.windows):
            start = time.perf_counter()
            for _ in range(self.args.steps):
                self.state, metrics = self.program.step(self.state, self.batch)
            dispatched = time.perf_counter()
            block((self.state, metrics))
            total = time.perf_counter() - start
            ms.append(total * 1e3 / self.args.steps)
            shares.append((dispatched - start) / total)
        print(
            f"| {self.name} | {condition} | {statistics.median(ms):.3f} | {min(ms):.3f} | "
            f"{max(ms):.3f} | {100 * statistics.median(shares):.0f}% |",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
