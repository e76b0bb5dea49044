"""How often dew.bench.analysis.judge's outcome is wrong: simulation of known truth.

    python -m dew.bench.analysis.simulation [--trials 4000]

Each trial makes one comparison of ROWS rows on the log scale, straight from the model
judge states: per side a row's mean is shift + run + the mean of its repeats' process
noise, with the repeats' sample variance drawn alongside; a change is added to one row, or
to every row (a whole-table shift). The levels the comparison assumes are the truth when
the history is taken as known (df inf), else each one drawn as an estimate from that many
degrees of freedom (σ² χ²_df / df): the history's own error is part of what is
calibrated. An interleaved design (nox -s ab's rounds) is the same comparison with the run
levels cancelled. The table gives per cell the share of comparisons reading NOT
REPRODUCED, REPRODUCED and INCONCLUSIVE, and the power: the share that call the changed
row (or the shift) in its direction.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import sys
from collections.abc import Sequence

import numpy as np

from dew.bench.analysis import judge
from dew.bench.common import cli

PROG = "python -m dew.bench.analysis.simulation"
SEED = 20261204
ALPHA = 0.05


@dataclasses.dataclass(frozen=True)
class Regime:
    name: str
    process: float
    run: float
    shift: float
    band: float
    history_df: float  # the degrees of freedom of each level's estimate (inf: known)


REGIMES = (
    Regime("GPU, history 30 df", 0.015, 0.007, 0.007, 0.02, 30),
    Regime("GPU, run level known", 0.015, 0.007, 0.007, 0.02, math.inf),
    Regime("GPU, run > process", 0.01, 0.02, 0.02, 0.02, 30),
    Regime("GPU, no history (prior)", 0.015, 0.007, 0.007, 0.02, 2),
    Regime("CPU VM, history 30 df", 0.10, 0.04, 0.04, 0.05, 30),
)
DESIGNS = (("3 vs 3", 3, 3, False), ("5 vs 5", 5, 5, False), ("1 vs 1", 1, 1, False),
           ("3 vs 1", 3, 1, False), ("5 rounds interleaved", 5, 5, True))  # fmt: skip
CHANGES = (0.0, 0.05, 0.07, 0.10, 0.20)


@dataclasses.dataclass(frozen=True)
class Cell:
    regime: str
    design: str
    rows: int
    change: float
    whole_table: bool
    not_reproduced: float
    reproduced: float
    inconclusive: float
    power: float | None


def simulate(regime: Regime, design: tuple, change: float, *, rows: int, trials: int,
             whole_table: bool = False, seed: int = SEED) -> Cell:  # fmt: skip
    name, n_run, n_ref, interleaved = design
    rng = np.random.default_rng([seed, int(regime.process * 1e4), int(regime.run * 1e4),
                                 n_run, n_ref, int(interleaved), int(change * 100), rows,
                                 int(whole_table)])  # fmt: skip
    run, shift = (0.0, 0.0) if interleaved else (regime.run, regime.shift)
    shape = (trials, rows)

    def side(n: int):
        mean = rng.normal(0, shift, (trials, 1)) + rng.normal(0, run, shape)
        mean = mean + rng.normal(0, regime.process / math.sqrt(n), shape)
        var = regime.process**2 * rng.chisquare(n - 1, shape) / (n - 1) if n > 1 else None
        return mean, var

    (a, va), (b, vb) = side(n_run), side(n_ref)
    truth = np.zeros(rows)
    if whole_table:
        truth[:] = math.log1p(change)
    else:
        truth[0] = math.log1p(change)
    d = a - b + truth

    def assumed(sd: float) -> np.ndarray:
        if not math.isfinite(regime.history_df):
            return np.full((trials, 1), sd**2)
        return sd**2 * rng.chisquare(regime.history_df, (trials, 1)) / regime.history_df

    df = regime.history_df
    nan = np.full(shape, np.nan)
    process_var, process_df = judge.moderated(nan if va is None else va, n_run,
                                              nan if vb is None else vb, n_ref,
                                              np.sqrt(assumed(regime.process)), df)  # fmt: skip
    run_var = np.zeros((trials, 1)) if interleaved else assumed(regime.run)
    shift_var = np.zeros((trials, 1)) if interleaved else assumed(regime.shift)
    out = judge.judge_arrays(d, process_var, process_df, run_var, df, shift_var[:, 0], df,
                             n_run, n_ref, band=regime.band, alpha=ALPHA)  # fmt: skip
    outcome = out["outcome"]
    power = None
    if change:
        if whole_table and rows >= judge.MIN_ROWS_FOR_SHIFT:
            power = float(np.mean(out["shift"]["word"] == judge.SLOWER))
        else:
            power = float(np.mean(out["word"][:, 0] == judge.SLOWER))
    return Cell(regime.name, name, rows, change, whole_table, float(np.mean(outcome == 1)),
                float(np.mean(outcome == 0)), float(np.mean(outcome == 3)), power)  # fmt: skip


def table(trials: int, rows: int = 17) -> list[Cell]:
    cells = []
    for regime in REGIMES:
        for design in DESIGNS:
            for change in CHANGES:
                cells.append(simulate(regime, design, change, rows=rows, trials=trials))
        for change in (0.05, 0.10):
            cells.append(simulate(regime, DESIGNS[0], change, rows=rows, trials=trials,
                                  whole_table=True))  # fmt: skip
    return cells


def render(cells: Sequence[Cell], trials: int) -> str:
    lines = ["| regime | design | change | NOT REPRODUCED | REPRODUCED | INCONCLUSIVE | "
             "power |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for c in cells:
        change = f"{c.change:.0%}" + (" (every row)" if c.whole_table else " (one row)"
                                      if c.change else "")  # fmt: skip
        power = "—" if c.power is None else f"{c.power:.1%}"
        lines.append(f"| {c.regime} | {c.design} | {change} | {c.not_reproduced:.1%} | "
                     f"{c.reproduced:.1%} | {c.inconclusive:.1%} | {power} |")  # fmt: skip
    regimes = "; ".join(f"{r.name}: process {r.process:.1%}, run {r.run:.1%}, shift "
                        f"{r.shift:.1%}, band ±{r.band:.0%}" for r in REGIMES)  # fmt: skip
    lines += ["", f"{trials} simulated comparisons of {cells[0].rows} rows per line, seed "
              f"{SEED}, alpha {ALPHA:g} after Holm over the shift and the rows. "
              f"{regimes}."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _var(logs: np.ndarray) -> float:
    return float(np.var(logs, ddof=1)) if logs.size > 1 else float("nan")


def aa_pairs(directory=None) -> list[tuple[str, str, str, dict[str, int]]]:
    """Every ordered pair of real A/A records (dew.bench.analysis.history's groups) through
    judge, at the levels fitted from the same history: (run, reference, outcome, words)."""
    from pathlib import Path

    from dew.bench.analysis import history

    records = history.read(Path(directory) if directory else history.HISTORY)
    kinds = history.fit(records)
    groups: dict[str, list[tuple[str, dict]]] = {}
    for path, record in records:
        groups.setdefault(history.identity(record), []).append((path, record))
    found = []
    for members in groups.values():
        if len(members) < 2:
            continue
        kind = history.device_kind(members[0][1])
        model = history.model_for(kind, history.platform(members[0][1]), kinds)
        band = judge.band_for(history.platform(members[0][1]))
        for (pa, a), (pb, b) in itertools.permutations(members, 2):
            sides = {}
            for which, record in (("a", a), ("b", b)):
                for row in record["rows"]:
                    figures = history._figures(row)
                    if figures:
                        sides.setdefault(history.row_label(row), {})[which] = np.log(figures)
            labels = [label for label, s in sides.items() if len(s) == 2]
            if not labels:
                continue
            la, lb = [sides[k]["a"] for k in labels], [sides[k]["b"] for k in labels]
            noises = [model.for_row(k) for k in labels]
            n_a, n_b = np.array([x.size for x in la]), np.array([x.size for x in lb])
            pv, pdf = judge.moderated(
                np.array([_var(x) for x in la]),
                n_a,
                np.array([_var(x) for x in lb]),
                n_b,
                np.array([n.process for n in noises]),
                model.pooled.process_df,
            )
            out = judge.judge_arrays(
                np.array([x.mean() - y.mean() for x, y in zip(la, lb, strict=True)]), pv, pdf,
                np.array([n.run**2 for n in noises]), model.pooled.run_df,
                model.pooled.shift**2, model.pooled.shift_df,
                n_a, n_b, band=band, alpha=ALPHA)  # fmt: skip
            words: dict[str, int] = {}
            for w in out["word"][0]:
                words[judge.WORDS[int(w)]] = words.get(judge.WORDS[int(w)], 0) + 1
            shift = int(out["shift"]["word"][0])
            if shift >= 0:
                words[f"shift {judge.WORDS[shift]}"] = 1
            outcome = {0: judge.REPRODUCED, 1: judge.NOT_REPRODUCED, 3: judge.INCONCLUSIVE}
            found.append((pa, pb, outcome[int(out["outcome"][0])], words))
    return found


def render_pairs(pairs) -> str:
    lines = ["| run | reference | outcome | rows |", "|---|---|---|---|"]
    for a, b, outcome, words in pairs:
        shown = ", ".join(f"{n} {w}" if not w.startswith("shift") else w
                          for w, n in sorted(words.items()))  # fmt: skip
        lines.append(f"| {a} | {b} | {outcome} | {shown} |")
    called = sum(1 for *_, outcome, _ in pairs if outcome == judge.NOT_REPRODUCED)
    lines += ["", f"{len(pairs)} ordered pairs, {called} read NOT REPRODUCED."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    trials = 4000
    if argv[:1] == ["--trials"] and len(argv) == 2 and argv[1].isdigit():
        trials = int(argv[1])
    elif argv:
        return cli.run(
            PROG,
            lambda: (_ for _ in ()).throw(
                cli.UsageError(f"unrecognized arguments {' '.join(argv)}; valid: --trials N")
            ),
        )
    cells = table(trials)
    print(f"Generated by `{PROG} --trials {trials}`.\n\n{render(cells, trials)}")
    print(f"### Every ordered pair of the A/A records under results/\n\n{render_pairs(aa_pairs())}")
    worst = max(c.not_reproduced for c in cells if c.change == 0)
    print(f"worst false NOT REPRODUCED: {worst:.1%}", file=sys.stderr)
    return cli.EXIT_OK if worst <= 0.05 else cli.EXIT_CHANGED


if __name__ == "__main__":
    sys.exit(main())
