"""The loader's speedup over a plain loop, measured in interleaved rounds.

    python scripts/loader_speedup.py --path DIR [--rounds 3] [--steps 1000] [--workers 0 2]

Each round runs, one after another and each in its own process, the plain hand-written
loop (scripts/plain_loader_baseline.py) and tools/benchmark_data.py once per worker count,
all at batch 8 and 64 px; then, as the machine's own ceiling, two plain loops at once
(different seeds): their summed samples/s over one loop's is what two processes doing the
same work get here, before any loader overhead.

A round's ratio divides by that round's plain loop: on a shared machine the speed of the
CPU moves between minutes (on the 2-core machine the plain loop alone measured 500 to 900
samples/s), so a ratio of figures taken far apart says little. Prints every round and the
median ratio per worker count.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

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


def run_loader(args, workers: int, out: Path) -> dict:
    command = [sys.executable, str(ROOT / "tools" / "benchmark_data.py"), "data:oxford-flowers"]
    command += ["--batch", str(args.batch), "--data.image-size", str(args.image_size)]
    command += ["--steps", str(args.steps), "--warmup", str(args.warmup)]
    command += ["--data.loading.workers", str(workers), "--data.path", args.path]
    if args.threads is not None:
        command += ["--data.loading.threads", str(args.threads)]
    command += ["--json-out", str(out)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads(out.read_text())["rows"][0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", required=True, help="a prepared TFDS version directory")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument(
        "--threads", type=int, default=None, help="data.loading.threads (default: the tool's)"
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    args = parser.parse_args()
    if not (Path(args.path) / "dataset_info.json").is_file():
        print(f"error: --path {args.path} is not a prepared dataset directory", file=sys.stderr)
        return 2

    ratios: dict[int | str, list[float]] = {w: [] for w in args.workers}
    ratios["two plain loops"] = []
    with tempfile.TemporaryDirectory() as tmp:
        out, other = Path(tmp) / "figures.json", Path(tmp) / "other.json"
        for round_ in range(1, args.rounds + 1):
            plain = run_plain(args, out)
            print(
                f"round {round_}: plain loop {plain['samples_per_s']:7.1f} samples/s "
                f"p50 {plain['p50_ms']:6.2f} ms p95 {plain['p95_ms']:6.2f} ms",
                flush=True,
            )
            for workers in args.workers:
                row = run_loader(args, workers, out)
                ratio = row["samples_per_s"] / plain["samples_per_s"]
                ratios[workers].append(ratio)
                print(
                    f"         workers {workers}  {row['samples_per_s']:7.1f} samples/s "
                    f"p50 {row['p50_ms']:6.2f} ms p95 {row['p95_ms']:6.2f} ms "
                    f"first batch {row['first_batch_s']:.2f} s  {ratio:.2f}x the plain loop",
                    flush=True,
                )
            both = run_two_plain(args, (out, other))
            ratios["two plain loops"].append(both / plain["samples_per_s"])
            print(
                f"         two plain loops at once {both:7.1f} samples/s in all  "
                f"{both / plain['samples_per_s']:.2f}x the plain loop",
                flush=True,
            )
    for workers, values in ratios.items():
        name = workers if isinstance(workers, str) else f"workers {workers}"
        print(
            f"{name}: median {statistics.median(values):.2f}x the plain loop "
            f"(rounds: {', '.join(f'{v:.2f}' for v in values)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
