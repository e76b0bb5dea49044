"""The loader's speedup over a plain loop, measured in interleaved rounds.

    python scripts/loader_speedup.py --path DIR [--rounds 3] [--steps 1000] [--workers 0 2]

Each round runs, one after another and each in its own process, the plain hand-written
loop (scripts/plain_loader_baseline.py) and tools/benchmark_data.py once per worker count,
all at batch 8 and 64 px; then, as the machine's own ceiling, two plain loops at once
(different seeds): their summed samples/s over one loop's is what two processes doing the
same work get here, before any loader overhead.

A round's ratio divides by that round's plain loop: on a shared machine the speed of the
CPU moves between minutes (on the 2-core machine the plain loop alone measured 500 to 900
samples/s), so a ratio of figures taken far apart says little. Prints every round and, per
worker count, the geometric mean of the rounds' ratios with its 95% t-interval and the p of
a t-test on their logs against no difference (dew.bench.analysis.judge.paired).
"""

import dataclasses
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from dew.bench.analysis import judge, stats
from dew.bench.common import cli

ROOT = Path(__file__).resolve().parent.parent


def plain_command(args, out: Path, seed: int = 0) -> list[str]:
    command = [sys.executable, str(ROOT / "scripts" / "plain_loader_baseline.py")]
    command += ["--path", args.path, "--batch", str(args.batch), "--seed", str(seed)]
    command += ["--image-size", str(args.image_size), "--steps", str(args.steps)]
    return command + ["--warmup", str(args.warmup), "--json-out", str(out)]


def run_plain(args, out: Path) -> dict:
    subprocess.run(plain_command(args, out), check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def run_two_plain(args, outs: tuple[Path, Path]) -> float:
    """Summed samples/s of two plain loops running at the same time."""
    processes = [
        subprocess.Popen(plain_command(args, out, seed), stdout=subprocess.DEVNULL)
        for seed, out in enumerate(outs)
    ]
    if any(p.wait() != 0 for p in processes):
        raise subprocess.CalledProcessError(1, "plain_loader_baseline.py")
    return sum(json.loads(out.read_text())["samples_per_s"] for out in outs)


def run_loader(args, workers: int, out: Path, dataset: str) -> dict:
    command = [sys.executable, str(ROOT / "tools" / "benchmark_data.py"), f"data:{dataset}"]
    command += ["--batch", str(args.batch), "--data.image-size", str(args.image_size)]
    command += ["--steps", str(args.steps), "--warmup", str(args.warmup)]
    command += ["--data.loading.workers", str(workers), "--data.path", args.path]
    if args.threads is not None:
        command += ["--data.loading.threads", str(args.threads)]
    command += ["--json-out", str(out), "--overwrite"]  # a scratch file, rewritten each run
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads(out.read_text())["rows"][0]


@dataclasses.dataclass(frozen=True)
class Args:
    """The loader's speedup over a plain loop, measured in interleaved rounds."""

    path: str
    """a prepared TFDS version directory"""
    rounds: int = 3
    steps: int = 1000
    warmup: int = 5
    batch: int = 8
    image_size: int = 64
    threads: int | None = None
    """data.loading.threads (default: the tool's)"""
    workers: tuple[int, ...] = (0, 2)


def main(argv: Sequence[str] | None = None) -> int:
    def body() -> int:
        argv_ = sys.argv[1:] if argv is None else argv
        args = cli.parse(Args, argv_, prog="scripts/loader_speedup.py")
        return rounds(args, dataset_of(args.path))

    return cli.run("loader_speedup", body)


def dataset_of(path: str) -> str:
    """The benchmark_data.py dataset that reads the prepared directory `path`."""
    from dew.data.sources import DataError, read_dataset_info
    from dew.data.spec import DATASETS

    try:
        name = read_dataset_info(path).get("name")
    except DataError as e:
        raise cli.UsageError(str(e)) from None
    for spec in DATASETS.values():
        if spec.prepared_name == name:
            return spec.name
    valid = ", ".join(spec.prepared_name for spec in DATASETS.values())
    raise cli.UsageError(f"--path {path} holds the dataset {name!r}; valid: {valid}")


def rounds(args: Args, dataset: str) -> int:
    # samples/s per round: the plain loop, each worker count, and two plain loops at once
    figures: dict[int | str, list[float]] = {w: [] for w in args.workers}
    figures["two plain loops"] = []
    plain_figures = []
    with tempfile.TemporaryDirectory() as tmp:
        out, other = Path(tmp) / "figures.json", Path(tmp) / "other.json"
        for round_ in range(1, args.rounds + 1):
            plain = run_plain(args, out)
            plain_figures.append(plain["samples_per_s"])
            print(
                f"round {round_}: plain loop {plain['samples_per_s']:7.1f} samples/s "
                f"p50 {plain['p50_ms']:6.2f} ms p95 {plain['p95_ms']:6.2f} ms",
                flush=True,
            )
            for workers in args.workers:
                row = run_loader(args, workers, out, dataset)
                figures[workers].append(row["samples_per_s"])
                print(
                    f"         workers {workers}  {row['samples_per_s']:7.1f} samples/s "
                    f"p50 {row['p50_ms']:6.2f} ms p95 {row['p95_ms']:6.2f} ms "
                    f"first batch {row['first_batch_s']:.2f} s  "
                    f"{row['samples_per_s'] / plain['samples_per_s']:.2f}x the plain loop",
                    flush=True,
                )
            both = run_two_plain(args, (out, other))
            figures["two plain loops"].append(both)
            print(
                f"         two plain loops at once {both:7.1f} samples/s in all  "
                f"{both / plain['samples_per_s']:.2f}x the plain loop",
                flush=True,
            )
    for workers, values in figures.items():
        name = workers if isinstance(workers, str) else f"workers {workers}"
        print(f"{name}: {verdict(judge.paired(values, plain_figures))}")
    return 0


def verdict(result: stats.Paired) -> str:
    """The paired ratio to the plain loop, its 95% interval and the t-test's p."""
    p_value = "n/a" if result.p_value is None else f"{result.p_value:.3g}"
    return (
        f"{result.ratio:.2f}x the plain loop [{result.low:.2f}, {result.high:.2f}] "
        f"(95%, {result.rounds} rounds, t-test p {p_value})"
    )


if __name__ == "__main__":
    sys.exit(main())
