"""The step benchmark's own overhead: its ms/step against a bare loop over the same step.

Both loops drive the same compiled executable in the same process, on the same state
and batch: the tool's measurement (dew.bench.step.measure: the Trainer's `step`, the
dispatch window, one block at the end) and the tightest loop that can be written
(`compiled(state, batch)` back to back, one block at the end). They alternate for a
number of rounds so that a slow spell of the host hits both. The verdict is the median
of the rounds' own ratios (tool / bare of the same round): a round's two windows are
seconds apart, so a slow minute of a shared host moves both, where the fastest or the
median of each side alone can come from different minutes. Those are printed beside it.

    JAX_PLATFORMS=cpu python scripts/step_overhead.py [--architecture simple_dit]
        [--preset cpu-smoke] [--batch 8] [--steps 200] [--rounds 31] [--limit 0.02]

Exit 0 when the median paired overhead is within --limit, 1 otherwise.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import jax

from dew.bench import step
from dew.bench.presets import Case


def bare_ms_per_step(compiled, state, batch, steps: int):
    start = time.perf_counter()
    for _ in range(steps):
        state, metrics = compiled(state, batch)
    jax.block_until_ready((state, metrics))
    return state, (time.perf_counter() - start) * 1e3 / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--architecture", default="simple_dit")
    parser.add_argument("--preset", default="cpu-smoke", choices=["cpu-smoke", "small"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--limit", type=float, default=0.02, help="allowed relative overhead")
    args = parser.parse_args()

    # One device: the smallest step there is, where any per-step cost of the tool shows most.
    options = step.Options(
        preset=args.preset, steps=args.steps, warmup=2, mesh={"fsdp": 1}, isolate=False
    )
    case = Case(architecture=args.architecture, batch=args.batch)
    figures: dict = {}
    prepared = step.prepare(case, options, figures)
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
                tool.append(step.measure(prepared, options, dict(figures))["ms_per_step"])
            else:
                prepared.state, ms = bare_ms_per_step(
                    compiled, prepared.state, prepared.batch, args.steps
                )
                bare.append(ms)
        print(
            f"round {round_index + 1}: tool {tool[-1]:.3f} ms, bare {bare[-1]:.3f} ms",
            file=sys.stderr,
        )

    paired = statistics.median(t / b for t, b in zip(tool, bare, strict=True)) - 1
    print(f"tool ms/step  fastest {min(tool):.3f}  median {statistics.median(tool):.3f}")
    print(f"bare ms/step  fastest {min(bare):.3f}  median {statistics.median(bare):.3f}")
    fastest = min(tool) / min(bare) - 1
    medians = statistics.median(tool) / statistics.median(bare) - 1
    print(
        f"overhead      paired median {paired * 100:+.2f}% (limit {args.limit * 100:.0f}%); "
        f"fastest vs fastest {fastest * 100:+.2f}%, median vs median {medians * 100:+.2f}%"
    )
    return 0 if paired <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
