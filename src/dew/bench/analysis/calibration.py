"""Are the verdicts calibrated? Simulation with known truth, and every pair of real A/A records.

    python -m dew.bench.analysis.calibration [--trials 4000] [--slower RECORD...]
        [--write docs/calibration.md]

(a) **A row's interval** (`row_coverage`): the share of simulated rows whose 95% interval
(stats.row_interval: the repeats alone) holds the centre of their own run.

(b) **Comparisons** (`simulate`): the outcome of simulated comparisons of known truth
through dew.bench.analysis.judge, the rules compare applies, in the GPU and
CPU regimes (the run level above the process level too, the history well known or barely),
1-vs-1 and one-process references, interleaved rounds, one row changed or the whole table.

(c) **The committed records** (`pairs`): every ordered pair of A/A records under results/
(dew.bench.analysis.history's groups) through the real compare at the levels fitted from
that history, and each record made with a known slower setting (-O0 in XLA_FLAGS) against
every record of its own stack otherwise.

--write puts the tables in a file between markers (the docs' generated section);
tests/bench/analysis/test_calibration.py fails when a null cell reads NOT REPRODUCED more
than 5% of the time at a fixed seed, or an A/A pair reads faster or slower.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dew.bench.analysis import comparison, history, judge, noise, stats
from dew.bench.common import cli, files
from dew.bench.record.validate import load

PROG = "python -m dew.bench.analysis.calibration"
RUN_SHARE = 0.4  # a run's own centre as a share of the process spread (the row interval)
SPREADS = (0.01, 0.02, 0.10)
REPEATS = (3, 5, 7)
SEED = 20261203
BEGIN, END = "<!-- calibration:begin -->", "<!-- calibration:end -->"


def row_coverage(spread: float, repeats: int, *, trials: int, seed: int = SEED) -> float:
    """The share of rows whose interval (stats.row_interval: the repeats alone) holds the
    centre of their own run, mu + b_run: what the interval claims to cover."""
    rng = np.random.default_rng([seed, int(spread * 1e4), repeats, 7])
    centre = rng.normal(0, spread * RUN_SHARE, trials)
    logs = centre[:, None] + rng.normal(0, spread, (trials, repeats))
    held = 0
    for row, c in zip(np.exp(logs), np.exp(centre), strict=True):
        low, high = stats.row_interval(row)
        held += low <= c <= high
    return held / trials


def render_row_coverage(trials: int) -> str:
    lines = ["| process spread | " + " | ".join(f"{n} repeats" for n in REPEATS) + " |",
             "|---|" + "---|" * len(REPEATS)]  # fmt: skip
    for spread in SPREADS:
        cells = [f"{row_coverage(spread, n, trials=trials):.1%}" for n in REPEATS]
        lines.append(f"| {spread:.0%} | " + " | ".join(cells) + " |")
    lines += ["", f"{trials} simulated rows per cell: the share whose 95% interval holds the "
              "centre of their own run."]  # fmt: skip
    return "\n".join(lines) + "\n"


# --- comparisons of known truth (dew.bench.analysis.judge) ------------------------------

SIM_SEED = 20261204
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
             whole_table: bool = False, seed: int = SIM_SEED) -> Cell:  # fmt: skip
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


def simulation_table(trials: int, rows: int = 17) -> list[Cell]:
    cells = []
    for regime in REGIMES:
        for design in DESIGNS:
            for change in CHANGES:
                cells.append(simulate(regime, design, change, rows=rows, trials=trials))
        for change in (0.05, 0.10):
            cells.append(simulate(regime, DESIGNS[0], change, rows=rows, trials=trials,
                                  whole_table=True))  # fmt: skip
    return cells


def render_simulation(cells: Sequence[Cell], trials: int) -> str:
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
              f"{SIM_SEED}, alpha {ALPHA:g} after Holm over the shift and the rows. "
              f"{regimes}."]  # fmt: skip
    return "\n".join(lines) + "\n"


# --- the committed records ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Pair:
    run: str
    reference: str
    outcome: str
    tally: dict[str, int]
    changed: list[str]  # "label slower (+x%)", "the whole run slower (+x%)"


def _held(run, ref, run_path: str, ref_path: str, kinds: dict) -> Pair:
    model = noise.for_records(run, ref, kinds)
    cmp = comparison.compare(run, ref, noise=model)
    tally: dict[str, int] = {}
    for row in cmp.counted:
        tally[row.verdict] = tally.get(row.verdict, 0) + 1
    changed = [f"{row.label} {row.verdict} ({row.difference.ratio - 1:+.1%})"
               for row in cmp.counted
               if row.verdict in ("faster", "slower") and row.difference]  # fmt: skip
    if cmp.shift is not None and cmp.shift.word in ("faster", "slower"):
        changed.append(f"the whole run {cmp.shift.word} ({cmp.shift.ratio - 1:+.1%})")
    return Pair(run_path, ref_path, cmp.outcome, tally, changed)


def pairs(slower: Sequence[str] = ()) -> tuple[list[Pair], list[Pair]]:
    """Every ordered pair of the A/A groups under results/ through the real compare (the
    levels fitted from results/), and each known-slower record against every record of its
    stack but for the slower setting that shares its rows."""
    records = history.read(history.HISTORY)
    kinds = history.fit(records)
    groups: dict[str, list[str]] = {}
    for path, record in records:
        groups.setdefault(history.identity(record), []).append(path)
    paths = [p for group in groups.values() if len(group) > 1 for p in group]
    loaded = {p: load(history.REPO_ROOT / p, "RECORD") for p in [*paths, *slower]}
    same = [_held(loaded[a], loaded[b], a, b, kinds)
            for group in groups.values() if len(group) > 1
            for a, b in itertools.permutations(group, 2)]  # fmt: skip
    against = []
    for path in slower:
        commit = loaded[path].environment.code.commit
        labels = {row.label() for row in loaded[path].rows}
        for ref in paths:
            record = loaded[ref]
            if record.kind == loaded[path].kind and record.environment.code.commit == commit \
                    and labels & {row.label() for row in record.rows}:  # fmt: skip
                against.append(_held(loaded[path], record, path, ref, kinds))
    return same, against


def render_pairs(same: Sequence[Pair], against: Sequence[Pair]) -> str:
    def name(path: str) -> str:
        parent = Path(path).parent.name
        return f"{parent}/{Path(path).name}" if parent.startswith("2026") else path

    def line(pair: Pair) -> str:
        tally = ", ".join(f"{n} {word}" for word, n in sorted(pair.tally.items()))
        return (f"| {name(pair.run)} | {name(pair.reference)} | {pair.outcome} | {tally} | "
                f"{'; '.join(pair.changed) or '—'} |")  # fmt: skip

    head = ["| run | reference | outcome | rows | faster or slower |", "|---|---|---|---|---|"]
    called = sum(1 for pair in same if pair.changed)
    words = {w: sum(1 for p in same if p.outcome == w) for w in
             ("REPRODUCED", "INCONCLUSIVE", "NOT REPRODUCED")}  # fmt: skip
    out = [f"Every ordered pair of A/A records ({len(same)} pairs: "
           + ", ".join(f"{n} {w}" for w, n in words.items())
           + f"; {called} with the shift or a row called faster or slower):", "", *head,
           *map(line, same), ""]  # fmt: skip
    if against:
        out += ["Records made with a known slower setting (-O0) against them:", "", *head,
                *map(line, against), ""]  # fmt: skip
    return "\n".join(out)


# --- the command line -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Args:
    """Calibrate the verdicts: simulation with known truth, then the committed records."""

    trials: int = 4000
    """simulated comparisons per line of the table"""
    slower: tuple[str, ...] = ()
    """records made with a known slower setting, held against the A/A records"""
    write: str | None = None
    """write the tables into this Markdown file, between its calibration markers"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run(PROG, lambda: _calibrate(cli.parse(Args, argv, prog=PROG), argv))


def _calibrate(args: Args, argv: Sequence[str]) -> int:
    if args.trials < 10:
        raise cli.UsageError(f"--trials {args.trials} is too few (10 or more)")
    target = None
    if args.write is not None:
        target = files.check_input_file(args.write, flag="--write")
        if BEGIN not in target.read_text() or END not in target.read_text():
            raise cli.UsageError(f"--write {target}: no {BEGIN} ... {END} markers in it")
    cells = simulation_table(args.trials)
    same, against = pairs(list(args.slower))
    command = " ".join([PROG, *argv])
    text = (
        f"Generated by `{command}`.\n\n### A row's interval\n\n"
        f"{render_row_coverage(min(args.trials, 2000))}"
        f"\n### Comparisons\n\n{render_simulation(cells, args.trials)}"
        f"\n### The committed records\n\n{render_pairs(same, against)}"
    )
    print(text)
    if target is not None:
        old = target.read_text()
        head, rest = old.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        files.atomic_write(target, f"{head}{BEGIN}\n{text}\n{END}{tail}")
        print(f"wrote {target}", file=sys.stderr)
    worst = max(c.not_reproduced for c in cells if c.change == 0)
    aa_called = sum(1 for pair in same if pair.changed)
    print(f"worst false NOT REPRODUCED {worst:.1%}; A/A pairs with a change: {aa_called}",
          file=sys.stderr)  # fmt: skip
    return cli.EXIT_OK if worst <= 0.05 and not aa_called else cli.EXIT_CHANGED


if __name__ == "__main__":
    sys.exit(main())
