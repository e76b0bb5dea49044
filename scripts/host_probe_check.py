"""Is the host probe worth recording? Does its reading track the step time of a real model?

dew.bench.runtime.hostprobe times a fixed CPU workload before each round, and compare holds a
change between two records against the probe's drift between them. That is only worth
anything if the probe moves with the thing it stands in for. This script alternates, for
--seconds, one probe reading and one short timed window of a real compiled step (the
Trainer of --architecture at the cpu-smoke preset, on the host platform's 8 fake devices,
dew.bench.sweep.timing.time_steps's dispatch window), then prints the Spearman rank correlation
of probe ms against step ms (scipy.stats.spearmanr) and the spread of each. A shared host
whose other tenants come and go makes the drift it needs; a quiet one shows little of
either, and then a correlation near 0 says the host did not move, not that the probe is
blind: the spreads tell which.

    python scripts/host_probe_check.py [--seconds 240] [--architecture simple_dit]
        [--batch 8] [--steps 40]

Runs on CPU (JAX_PLATFORMS=cpu and --xla_force_host_platform_device_count=8 are set here
when the environment does not set them). Exit 0 after printing the figures, 1 when the case
cannot be built, 2 on bad input.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from collections.abc import Sequence

import numpy as np

from dew.bench.common import cli
from dew.bench.runtime import hostprobe
from dew.bench.sweep import presets
from dew.bench.sweep.settings import append_xla_flags

PROG = "host_probe_check"
DEVICES_FLAG = "--xla_force_host_platform_device_count=8"


@dataclasses.dataclass(frozen=True)
class Args:
    """Alternate the host probe with a real step's timed window; print how well they track.
    Exit 0: figures printed; 1: the case cannot be built; 2: usage."""

    seconds: float = 240.0
    """how long to alternate (> 0); each pair takes about a second"""
    architecture: str = "simple_dit"
    """the architecture whose step is timed (one of the cpu-smoke preset's)"""
    batch: int = 8
    """samples per step (>= 1)"""
    steps: int = 40
    """steps in each timed window (>= 1)"""


def check(args: Args) -> None:
    """What tyro cannot check, before anything is built: UsageError with one line."""
    if not (math.isfinite(args.seconds) and args.seconds > 0):  # NaN fails this too
        raise cli.UsageError(f"--seconds must be a positive number (got {args.seconds:g})")
    for name in ("batch", "steps"):
        if getattr(args, name) < 1:
            raise cli.UsageError(f"--{name} must be at least 1 (got {getattr(args, name)})")
    try:
        presets.select(presets.get("cpu-smoke"), [args.architecture])
    except ValueError as error:
        raise cli.UsageError(f"--architecture: {error}") from None


def spread(name: str, values: Sequence[float]) -> str:
    """One line: min, median, max, max/min and the coefficient of variation."""
    array = np.asarray(values, dtype=float)
    return (
        f"{name:<10} min {array.min():8.2f}  median {np.median(array):8.2f}  "
        f"max {array.max():8.2f}  max/min {array.max() / array.min():5.2f}  "
        f"CV {array.std() / array.mean():6.1%}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run(PROG, lambda: track(cli.parse(Args, argv, prog="scripts/host_probe_check.py")))


def track(args: Args) -> int:
    check(args)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    append_xla_flags(os.environ, DEVICES_FLAG)  # before jax is imported
    import jax
    from scipy import stats as scipy_stats

    from dew.bench.sweep import case_run
    from dew.bench.sweep.settings import Options
    from dew.bench.sweep.timing import time_steps

    options = Options(preset="cpu-smoke", steps=args.steps, warmup=2, isolate=False)
    case = presets.Case(architecture=args.architecture, batch=args.batch)
    try:
        prepared = case_run.prepare(case, options, {})
    except Exception as error:  # the case, not the input: a model that cannot be built here
        cli.say(PROG, f"{case.label()} could not be built: {cli.one_line(error)}")
        return cli.EXIT_CHANGED
    print(
        f"{args.architecture} (cpu-smoke, batch {args.batch}, {args.steps} steps a window) on "
        f"{len(jax.devices())} {jax.devices()[0].platform} devices; probe on "
        f"{hostprobe.cores()} threads; alternating for {args.seconds:g} s",
        file=sys.stderr,
    )
    state = prepared.state
    probes, steps = [], []
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline or len(probes) < 3:
        probes.append(hostprobe.measure())
        state, _, timings = time_steps(
            prepared.trainer.step, state, prepared.batch, steps=args.steps, warmup=1
        )
        steps.append(timings.ms_per_step)
        print(f"pair {len(probes)}: probe {probes[-1]:.2f} ms, step {steps[-1]:.2f} ms",
              file=sys.stderr)  # fmt: skip

    result = scipy_stats.spearmanr(probes, steps)
    print(f"{len(probes)} pairs over {args.seconds:g} s")
    print(spread("probe ms", probes))
    print(spread("step ms", steps))
    # If the probe tracks the host, the step time per unit of probe time varies less than
    # the step time itself.
    print(spread("step/probe", np.asarray(steps) / np.asarray(probes)))
    print(f"Spearman rho {result.statistic:+.3f} (p {result.pvalue:.3g}) of probe ms vs step ms")
    return cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
