"""The verdicts' calibration tables (issue 51): the simulation of known truth and every
ordered pair of committed A/A records through the real compare, written into
docs/calibration.md.

    python scripts/verdict_calibration.py [--trials 2000] [--write]
    PYTHONPATH=OLD/src python scripts/verdict_calibration.py --before [--trials 2000]

The tables come from dew.bench.analysis.calibration, which runs the paths the commands run
(judge.moderated and judge.judge_arrays at the levels a history of N A/A records gives, as
compare does; judge.paired_arrays over interleaved rounds, as `dew ab` does). --write runs
its command line with the -O0 records (known slower) and writes the docs' generated section.

--before prints the simulation table of an older dew (a checkout of it on PYTHONPATH, e.g.
`git archive d05ce3a src | tar -x -C /tmp/old`) through the same cells: that dew's
judge.judge_arrays and judge.moderated as they were; its history's levels as it made them
(a mean square less the processes' share, clipped at 0, with the mean square's degrees of
freedom); `dew ab`'s test as its ab.decide ran it (stats.paired, then stats.verdict on the
95% interval, after Holm). The harness is this tree's calibration module, loaded by path.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[1]
SLOWER = ("results/runs/20261202-cpu-smoke-stats-opt0/step.json",
          "results/runs/20261203T090404Z-cpu-smoke-aa-o0-cpu-8c7e84d/step.json")  # fmt: skip


def _before_harness():
    """This tree's calibration module over the older dew on the path, with the two pieces
    that dew did not have as functions written the way it computed them."""
    from dew.bench.analysis import judge, stats

    if hasattr(judge, "component"):
        raise SystemExit("--before: the dew on PYTHONPATH is this one; put the older src first")

    def component(plus, plus_df, minus, minus_df):
        # history.fit_group: Estimate.add(ms - share, df of ms), read as 0 when negative
        var = np.maximum(np.asarray(plus) - np.asarray(minus), 0.0)
        return var, np.broadcast_to(np.asarray(plus_df, dtype=float), var.shape), 0 * var

    def paired_arrays(logs, *, band, alpha):
        # ab.decide: stats.paired per case, Holm over the cases, stats.verdict (95% interval)
        trials, rows, _ = logs.shape
        word = np.zeros((trials, rows), dtype=int)
        codes = {"undecided": 0, "same": 1, "faster": 2, "slower": 3}
        for t in range(trials):
            results = [stats.paired(np.exp(logs[t, k]), np.ones(logs.shape[2]))
                       for k in range(rows)]  # fmt: skip
            for k, (result, p) in enumerate(zip(results, stats.holm(
                    [r.p_value for r in results]), strict=True)):  # fmt: skip
                verdict, _ = stats.verdict(result.difference(), p, band=band, alpha=alpha)
                word[t, k] = codes[verdict]
        changed = np.any(word >= 2, axis=1)
        outcome = np.where(changed, 1, np.where(np.all(word == 1, axis=1), 0, 3))
        return {"word": word, "outcome": outcome}

    judge.component, judge.paired_arrays = component, paired_arrays
    path = HERE / "src" / "dew" / "bench" / "analysis" / "calibration.py"
    spec = importlib.util.spec_from_file_location("calibration_harness", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--before", action="store_true", help="the older dew on PYTHONPATH")
    parser.add_argument("--write", action="store_true", help="write docs/calibration.md")
    args = parser.parse_args()
    if args.before:
        harness = _before_harness()
        lines = harness.simulation_table(args.trials)
        print(harness.render_simulation(lines, args.trials))
        return 0
    from dew.bench.analysis import calibration

    argv = ["--trials", str(args.trials), "--slower", *SLOWER]
    if args.write:
        argv += ["--write", "docs/calibration.md"]
    return calibration.main(argv)


if __name__ == "__main__":
    sys.exit(main())
