"""The step benchmark's own overhead: its ms/step against a bare loop over the same step.

Both loops drive the same compiled executable in the same process, on the same state
and batch: the tool's measurement (dew.bench.sweep.case_run.measure: the Trainer's `step`, the
dispatch window, one block at the end) and the tightest loop that can be written
(`compiled(state, batch)` back to back, one block at the end). They alternate for a
number of rounds so that a slow spell of the host hits both. The verdict is the geometric
mean of the rounds' own ratios (tool / bare of the same round), with its 95% t-interval and
the p of a t-test on their logs (dew.bench.analysis.judge.paired): a round's two windows are
seconds apart, so a slow minute of a shared host moves both, where the fastest or the
median of each side alone can come from different minutes.

    JAX_PLATFORMS=cpu python scripts/step_overhead.py [--architecture simple_dit]
        [--preset cpu-smoke] [--batch 8] [--steps 200] [--rounds 31] [--limit 0.02]

Exit 0 when the paired overhead is within --limit, 1 otherwise (or when the case
cannot be built), 2 on bad input.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Sequence
from typing import Literal

import numpy as np

from dew.bench.analysis import judge
from dew.bench.common import cli
from dew.bench.sweep import presets

PROG = "step_overhead"


@dataclasses.dataclass(frozen=True)
class Args:
    """The step benchmark's ms/step against a bare loop over the same compiled step.
    Exit 0: the median paired overhead is within --limit; 1: it is not; 2: usage."""

    architecture: str = "simple_dit"
    """the architecture whose step is timed (one of the preset's)"""
    preset: Literal["cpu-smoke", "small"] = "cpu-smoke"
    """the model config preset (dew.bench.sweep.presets)"""
    batch: int = 8
    """samples per step (>= 1)"""
    steps: int = 200
    """steps in each timed window (>= 1)"""
    rounds: int = 31
    """rounds of one tool window and one bare window (>= 1)"""
    limit: float = 0.02
    """allowed relative overhead of the tool (>= 0; 0.02 is 2%)"""


def check(args: Args) -> None:
    """What tyro cannot check, before anything is built: UsageError with one line."""
    for name in ("batch", "steps", "rounds"):
        if getattr(args, name) < 1:
            raise cli.UsageError(f"--{name} must be at least 1 (got {getattr(args, name)})")
    if not (args.limit >= 0 and math.isfinite(args.limit)):  # NaN fails this too
        raise cli.UsageError(f"--limit must be a finite number >= 0 (got {args.limit:g})")
    try:
        presets.select(presets.get(args.preset), [args.architecture])
    except ValueError as error:
        raise cli.UsageError(f"--architecture: {error}") from None


def bare_ms_per_step(compiled, state, batch, steps: int):
    import jax

    start = time.perf_counter()
    for _ in range(steps):
        state, metrics = compiled(state, batch)
    jax.block_until_ready((state, metrics))
    return state, (time.perf_counter() - start) * 1e3 / steps


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run(PROG, lambda: overhead(cli.parse(Args, argv, prog="scripts/step_overhead.py")))


def overhead(args: Args) -> int:
    check(args)
    import jax

    from dew.bench.sweep import case_run
    from dew.bench.sweep.settings import Options

    # One device: the smallest step there is, where any per-step cost of the tool shows most.
    options = Options(
        preset=args.preset, steps=args.steps, warmup=2, mesh={"fsdp": 1}, isolate=False
    )
    case = presets.Case(architecture=args.architecture, batch=args.batch)
    figures: dict = {}
    try:
        prepared = case_run.prepare(case, options, figures)
    except Exception as error:  # the case, not the input: a model that cannot be built here
        cli.say(PROG, f"{case.label()} could not be built: {cli.one_line(error)}")
        return cli.EXIT_CHANGED
    compiled = prepared.trainer.compiled
    print(
        f"{args.architecture} ({args.preset}, batch {args.batch}) on "
        f"{jax.devices()[0].device_kind}; {args.rounds} rounds of {args.steps} steps each way",
        file=sys.stderr,
    )

    tool, bare = [], []
    for round_index in range(args.rounds):
        # Which goes first alternates, so that neither always runs on a host just warmed
        # (or just disturbed) by the other.
        for which in ("tool", "bare") if round_index % 2 == 0 else ("bare", "tool"):
            if which == "tool":
                tool.append(case_run.measure(prepared, options, dict(figures))["ms_per_step"])
            else:
                prepared.state, ms = bare_ms_per_step(
                    compiled, prepared.state, prepared.batch, args.steps
                )
                bare.append(ms)
        print(
            f"round {round_index + 1}: tool {tool[-1]:.3f} ms, bare {bare[-1]:.3f} ms",
            file=sys.stderr,
        )

    result = judge.paired(tool, bare)
    for name, side in (("tool", tool), ("bare", bare)):
        print(f"{name} ms/step  fastest {min(side):.3f}  median {float(np.median(side)):.3f}")
    p_value = "n/a" if result.p_value is None else f"{result.p_value:.3g}"
    print(
        f"overhead      paired {(result.ratio - 1) * 100:+.2f}% "
        f"[{(result.low - 1) * 100:+.2f}%, {(result.high - 1) * 100:+.2f}%] (95%, "
        f"{result.rounds} rounds, t-test p {p_value}); limit {args.limit * 100:.0f}%"
    )
    return cli.EXIT_OK if result.ratio - 1 <= args.limit else cli.EXIT_CHANGED


if __name__ == "__main__":
    sys.exit(main())
