"""GFLOP/step of the small preset's cases compiled for a TPU topology, without the chip.

    python scripts/tpu_gflop.py [--architectures unet unet_3d] [--topology v5e:1x1]
        [--reference results/published/2026-09-02-rtx4080-6b0f119-small.json]

Needs libtpu importable (`pip install libtpu==0.0.46.3`, or the TPU host's own) and runs
with JAX_PLATFORMS=cpu and ALLOW_MULTIPLE_LIBTPU_LOAD=1 (set here): each case is built as
the step benchmark's compile-only path builds it (dew.bench.sweep.case_run.prepare on the
topology's devices, dew.train.executables.topology_devices), compiled for the chip, and
its optimized HLO counted by dew's counter (dew.telemetry.instrumentation), with its work
count (each ragged dot by its groups, a Mosaic call by its stated cost: docs/conventions.md)
and XLA's own cost analysis beside it. Prints a Markdown table against the reference's
rows. One case at a time: a TPU compile of the small preset takes minutes on a small host.
Exit 0; 2 on bad input (one line).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

from dew.bench.common import cli  # noqa: E402
from dew.bench.record.validate import load  # noqa: E402
from dew.bench.sweep import presets  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Args:
    """Count the GFLOP/step of cases compiled for a TPU topology, without the chip."""

    architectures: tuple[str, ...] = ("hierarchical_mmdit", "unet_3d", "unet")
    topology: str = "v5e:1x1"
    reference: str = str(REPO / "results/published/2026-09-02-rtx4080-6b0f119-small.json")


def count(case: presets.Case, topology: str) -> tuple[float, float | None, float | None]:
    """(dew's GFLOP/step, its work GFLOP, XLA's cost analysis GFLOP) of the case compiled
    for `topology`, by the step benchmark's own compile-only path
    (dew.bench.sweep.case_run.prepare, as a chip's compile process runs it)."""
    from dew.bench.sweep.case_run import Figures, prepare
    from dew.bench.sweep.settings import Options
    from dew.flags import CACHE_OFF
    from dew.train.executables import topology_devices

    options = Options(preset="small", mesh=dict(presets.SMALL.mesh), compile_only=True,
                      compilation_cache_dir=CACHE_OFF)  # fmt: skip
    figures = Figures()
    prepare(case, options, figures, devices=topology_devices(topology))
    if figures.gflop_per_step is None:  # the count failed: its reason
        raise RuntimeError(figures.flops_error or "no FLOP count")
    return figures.gflop_per_step, figures.work_gflop_per_step, figures.cost_analysis_gflop


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    prog = "scripts/tpu_gflop.py"
    return cli.run(prog, lambda: table(cli.parse(Args, argv, prog=prog)))


def table(args: Args) -> int:
    try:
        cases = presets.select(presets.SMALL, list(args.architectures))
    except ValueError as error:
        raise cli.UsageError(f"--architectures: {error}") from None
    reference = load(Path(args.reference), "--reference")
    published = {row.key(): row.gflop_per_step for row in reference.rows}
    print(f"| case | GFLOP {args.topology} | work GFLOP | GFLOP reference | diff | cost analysis |")
    print("|---|---|---|---|---|---|")
    for case in cases:
        try:
            ours, work, cost = count(case, args.topology)
        except (RuntimeError, ValueError) as error:  # no libtpu, a topology it cannot make
            raise cli.UsageError(
                f"{case.label()}: cannot compile for {args.topology} here: "
                f"{cli.one_line(error)} (pip install libtpu)"
            ) from None
        theirs = published.get(case.key())
        diff = f"{100 * (ours / theirs - 1):+.3f}%" if theirs else "—"
        shown = f"{theirs:.3f}" if theirs else "—"
        cells = [case.label(), f"{ours:.3f}", f"{work or 0:.3f}", shown, diff, f"{cost or 0:.3f}"]
        print("| " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
