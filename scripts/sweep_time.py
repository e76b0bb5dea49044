"""How long a sweep takes, cold and warm, and where its time goes.

    python scripts/sweep_time.py [--checkout DIR] [--label NAME] [--out FILE.json]
        [--preset cpu-smoke] [--steps 2] [--extra "--compile-jobs 1"]

Runs the step benchmark of a checkout (this one by default; an older commit's worktree for
a before/after) twice, as a user would: `tools/benchmark_step.py --preset cpu-smoke --steps
2` with JAX_PLATFORMS=cpu and 8 simulated devices, first with an empty compilation cache
(a fresh XDG_CACHE_HOME: cold), then again with the cache the first run filled (warm).
Prints each run's wall time and CPU time (every process of the sweep), the host probe
just before it (dew.bench.runtime.hostprobe: the machine's speed drifts between runs), the rows'
summed compile_s, the phase totals (records of schema 3 keep them; older code has none)
and the number of compiles that overlapped a timed window (dew.bench.runtime.phases.overlaps),
how the wall clock was spent (dew.bench.runtime.phases.occupancy: seconds with 1, 2, ... cases
building at once, seconds timing, seconds of neither),
then every row's ms/step in both runs. The two records themselves live in a temporary
directory and go with it. With --out, the figures are also written as JSON to that path,
which must lie outside results/ (results/ holds records of the schema only; this JSON is
not one). Exit 0 when both runs finished with every row ok, 1 otherwise, 2 on bad input
(benchmark_step's own refusal, e.g. of a --preset or an --extra flag, included).
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from dew.bench.common import cli
from dew.bench.common.files import atomic_write, check_output_file

PROG = "sweep_time"
REPO = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Args:
    """Time a cold and a warm sweep of a checkout; print where the time went."""

    checkout: Path = REPO
    """the repository whose tools/benchmark_step.py runs (its src/ goes first on the path)"""
    label: str | None = None
    """a name for this checkout in the output (default: its commit)"""
    out: Path | None = None
    """also write the figures as JSON here (outside results/)"""
    preset: str = "cpu-smoke"
    steps: int = 2
    extra: str = ""
    """more flags for benchmark_step, e.g. '--compile-jobs 1'"""
    overwrite: bool = False
    """replace an existing --out"""


def sweep(args: Args, cache: Path, record: Path) -> dict:
    """One sweep in a fresh process with XDG_CACHE_HOME=cache; its wall time and figures."""
    env = dict(os.environ)
    env.update(
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_force_host_platform_device_count=8",
        XDG_CACHE_HOME=str(cache),
        PYTHONPATH=str(args.checkout / "src"),
    )
    command = [
        sys.executable, str(args.checkout / "tools" / "benchmark_step.py"),
        "--preset", args.preset, "--steps", str(args.steps), "--json-out", str(record),
        *args.extra.split(),
    ]  # fmt: skip
    from dew.bench.runtime import hostprobe

    probe = hostprobe.measure()  # the host's speed just before: runs on a drifting host differ
    start, used = time.perf_counter(), _children_cpu()
    done = subprocess.run(command, cwd=args.checkout, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    cpu = _children_cpu() - used  # every process of the sweep: it waits for all of them
    if done.returncode == cli.EXIT_USAGE:  # its input was refused: say why, time nothing
        said = [line for line in done.stderr.splitlines() if line.strip()]
        why = said[-1].removeprefix("tools/benchmark_step.py: error: ") if said else None
        raise cli.UsageError(why or "benchmark_step refused its input")
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "host_probe_ms": round(probe, 1),
        "exit": done.returncode,
        **figures(record),
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def figures(path: Path) -> dict:
    from dew.bench.record.schema import read_run
    from dew.bench.runtime.phases import occupancy, of_rows, overlaps, totals

    if not path.is_file():
        return {"rows": {}, "ok": 0}
    rows = read_run(path).rows
    phases = of_rows(rows)
    return {
        "ok": sum(row.status == "ok" for row in rows),
        "compile_s_sum": round(sum(row.compile_s or 0.0 for row in rows), 1),
        "phase_totals_s": {name: round(s, 1) for name, s in totals(phases).items()} or None,
        "compile_overlapping_timed": len(overlaps(phases)) if phases else None,
        "occupancy_s": {name: round(s, 1) for name, s in occupancy(rows).items()} or None,
        "rows": {row.label(): row.ms_per_step for row in rows},
    }


def commit(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or "?"


def report(label: str, runs: dict[str, dict]) -> str:
    lines = []
    for mode, run in runs.items():
        lines.append(
            f"{label} {mode}: wall {run['wall_s']:.1f} s, CPU {run['cpu_s']:.1f} s, "
            f"host probe {run['host_probe_ms']:.1f} ms, "
            f"exit {run['exit']}, {run['ok']} rows ok, "
            f"compile_s summed {run.get('compile_s_sum', 0):.1f} s"
        )
        if run.get("phase_totals_s"):
            parts = ", ".join(f"{k} {v:.1f}" for k, v in run["phase_totals_s"].items())
            lines.append(f"  phases (s, summed over the rows' processes): {parts}")
            overlapping = run["compile_overlapping_timed"]
            lines.append(f"  compiles overlapping a timed window: {overlapping}")
        if run.get("occupancy_s"):
            spent = dict(run["occupancy_s"])
            timing, other = spent.pop("timing"), spent.pop("other")
            building = ", ".join(f"{s:.1f} s with {n} building" for n, s in spent.items())
            lines.append(f"  wall clock: {building}, {timing:.1f} s timing, {other:.1f} s neither")
    names = list(next(iter(runs.values()))["rows"])
    lines.append("row\t" + "\t".join(f"{mode} ms/step" for mode in runs))
    for name in names:
        cells = [runs[mode]["rows"].get(name) for mode in runs]
        lines.append(name + "\t" + "\t".join("—" if c is None else f"{c:.2f}" for c in cells))
    return "\n".join(lines)


def check_outside_results(out: Path, checkout: Path) -> None:
    """Refuse an --out under a repository's results/: it holds records of the schema only."""
    target = out.resolve()
    for repo in dict.fromkeys((REPO.resolve(), checkout.resolve())):
        results = repo / "results"
        if target.is_relative_to(results):
            raise cli.UsageError(
                f"--out {out} is inside {results}, which holds records of the schema only; "
                "write the sweep's JSON somewhere else"
            )


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run(PROG, lambda: _main(cli.parse(Args, argv, prog="scripts/sweep_time.py")))


def _main(args: Args) -> int:
    if not (args.checkout / "tools" / "benchmark_step.py").is_file():
        raise cli.UsageError(f"--checkout {args.checkout} has no tools/benchmark_step.py")
    if args.steps < 1:
        raise cli.UsageError(f"--steps must be at least 1 (got {args.steps})")
    if args.out is not None:
        check_outside_results(args.out, args.checkout)
        check_output_file(str(args.out), flag="--out", overwrite=args.overwrite)
    label = args.label or commit(args.checkout)
    runs = {}
    with tempfile.TemporaryDirectory(prefix="dew-sweep-time-") as scratch:
        cache = Path(scratch) / "cache"  # empty: the first sweep compiles everything
        for mode in ("cold", "warm"):
            runs[mode] = sweep(args, cache, Path(scratch) / f"{mode}.json")
    print(report(label, runs))
    if args.out is not None:
        result = {"checkout": label, "command_extra": args.extra, "preset": args.preset}
        result |= {"steps": args.steps, "cpus": os.cpu_count(), "runs": runs}
        atomic_write(args.out, json.dumps(result, indent=1) + "\n")
    ok = all(run["exit"] == 0 and run["ok"] == len(run["rows"]) for run in runs.values())
    return cli.EXIT_OK if ok else cli.EXIT_CHANGED


if __name__ == "__main__":
    sys.exit(main())
