"""The verdicts' calibration tables: the simulation of known truth and every ordered pair
of committed A/A records through the real compare, written into docs/calibration.md.

    python scripts/verdict_calibration.py [--trials 2000] [--write]

The tables come from dew.bench.analysis.calibration, which runs the paths the commands run
(dew.bench.analysis.simulate: row_noise.moderated and judge.judge_arrays at the levels a
history of N A/A records gives, as compare does; judge.paired_arrays over interleaved
rounds, as `dew ab` does). --write runs its command line with the -O0 records (known
slower) and writes the docs' generated section.
"""

from __future__ import annotations

import argparse
import sys

SLOWER = ("results/runs/20261202-cpu-smoke-stats-opt0/step.json",
          "results/runs/20261203T090404Z-cpu-smoke-aa-o0-cpu-8c7e84d/step.json",
          "results/runs/20261206T132422Z-small-f32-tpu-v5e-4a3ac6a/step.json",
          "results/runs/20261206T235828Z-small-f32-tpu-v5e-0a1e23b/step.json")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--write", action="store_true", help="write docs/calibration.md")
    args = parser.parse_args()
    from dew.bench.analysis import calibration

    argv = ["--trials", str(args.trials), "--slower", *SLOWER]
    if args.write:
        argv += ["--write", "docs/calibration.md"]
    return calibration.main(argv)


if __name__ == "__main__":
    sys.exit(main())
