"""Are the verdicts calibrated? Simulation with known truth, and every pair of real A/A records.

    python -m dew.bench.analysis.calibration [--trials 2000] [--write docs/calibration.md]

(a) **Simulation.** Each trial makes two records of ROWS rows on the log scale: every
repeat is mu + b_run + e_process, with e_process ~ N(0, spread), and each record's run
level b_run the sum of a drift shared by its rows and a part of each row's own (together
RUN_SHARE x spread). One row may be changed in the second record. The noise the comparison
assumes is estimated as compare's is, from a simulated set of A/A records (AA_RECORDS
records of AA_ROWS rows, dew.bench.analysis.noise.row_levels), so the estimate's own error
is part of what is calibrated. Every comparison goes through dew.bench.analysis.stats (the
same functions compare uses): the intervals, Holm over the rows, the verdict rule. The table
gives, per spread, repeats and change: the false-positive rate (the share of comparisons
that call any unchanged row faster or slower), the power (the share that call the changed
row in its direction), the coverage of the true ratio by a row's interval and the median
detectable effect. A reference of one process (the published tables) is a column too.

(b) **The committed A/A records** (`pairs`): every ordered pair of records of one stack
(dew.bench.analysis.noise groups them) through the real compare, and each record made with
a known slower setting (-O0 in XLA_FLAGS) against every record of its group's stack.

--write puts both tables in a file between markers (the docs' generated section);
tests/bench/analysis/test_calibration.py fails when a null row's false-positive rate
exceeds 5% at a fixed seed, or an A/A pair reads faster or slower.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dew.bench.analysis import comparison, noise, stats
from dew.bench.common import cli, files
from dew.bench.record.validate import load

PROG = "python -m dew.bench.analysis.calibration"
ROWS = 17  # a preset's rows
RUN_SHARE = 0.4  # the run level's size as a share of the process spread (this VM: 4.3 / 10.5)
AA_RECORDS, AA_ROWS, AA_REPEATS = 3, 6, 5  # the A/A set the noise is estimated from
SPREADS = (0.01, 0.02, 0.10)
REPEATS = (3, 5, 7)
CHANGES = (0.0, 0.10, 0.20)
BAND, ALPHA = 0.05, 0.05
SEED = 20261203
BEGIN, END = "<!-- calibration:begin -->", "<!-- calibration:end -->"


@dataclasses.dataclass(frozen=True)
class Cell:
    """One configuration's results over its trials."""

    spread: float
    repeats: int
    change: float
    one_process: bool  # the reference is one process (a published table)
    false_positive: float  # share of trials calling any unchanged row faster or slower
    power: float | None  # share calling the changed row in its direction (None: no change)
    coverage: float  # share of rows whose interval holds the true ratio
    mde: float  # median detectable change of row 0


def _records(rng, trials: int, rows: int, repeats: int, spread: float) -> np.ndarray:
    """Log figures [trial, row, repeat] of one record per trial (mu = 0)."""
    run = spread * RUN_SHARE
    shared = rng.normal(0, run / math.sqrt(2), (trials, 1, 1))
    own = rng.normal(0, run / math.sqrt(2), (trials, rows, 1))
    return shared + own + rng.normal(0, spread, (trials, rows, repeats))


def _estimated_noise(rng, spread: float) -> stats.Noise:
    """The noise compare would assume, from one simulated A/A set (the table's way)."""
    aa = [_records(rng, 1, AA_ROWS, AA_REPEATS, spread)[0] for _ in range(AA_RECORDS)]
    levels = [
        noise.row_levels(str(row), [np.exp(record[row]) for record in aa]) for row in range(AA_ROWS)
    ]
    pooled = noise.pool(levels)
    return stats.Noise(pooled.run, pooled.process, pooled.df, "simulated A/A set")


def simulate(
    spread: float, repeats: int, change: float, *, trials: int, one_process: bool = False,
    seed: int = SEED,
) -> Cell:  # fmt: skip
    """One cell of the table (see the module docstring)."""
    rng = np.random.default_rng([seed, int(spread * 1e4), repeats, int(change * 100),
                                 int(one_process)])  # fmt: skip
    run = _records(rng, trials, ROWS, repeats, spread)
    ref = _records(rng, trials, ROWS, 1 if one_process else repeats, spread)
    truth = np.zeros(ROWS)
    truth[0] = math.log1p(change)
    run = run + truth[None, :, None]
    false_positive = hits = covered = 0
    mdes = []
    nan = float("nan")
    for trial in range(trials):
        assumed = _estimated_noise(rng, spread)
        a, b = run[trial], ref[trial]
        var_b = b.var(axis=1, ddof=1) if b.shape[1] > 1 else np.full(ROWS, nan)
        out = stats.differences(a.mean(axis=1), a.var(axis=1, ddof=1), a.shape[1],
                                b.mean(axis=1), var_b, b.shape[1], assumed)  # fmt: skip
        p_values = [None if math.isnan(p) else float(p) for p in out["p"]]
        adjusted = stats.holm(p_values)
        called = []
        for row in range(ROWS):
            diff = stats.Difference(
                math.exp(out["d"][row]), math.exp(out["low"][row]), math.exp(out["high"][row]),
                float(out["se"][row]), float(out["df"][row]), p_values[row],
                (a.shape[1], b.shape[1]),
            )  # fmt: skip
            called.append(stats.verdict(diff, adjusted[row], band=BAND, alpha=ALPHA)[0])
            covered += out["low"][row] <= truth[row] <= out["high"][row]
        unchanged = called[1:] if change else called
        false_positive += any(word in ("faster", "slower") for word in unchanged)
        hits += called[0] == "slower"
        side_b = stats.Side(float(b[0].mean()), None if b.shape[1] < 2 else float(var_b[0]),
                            b.shape[1])  # fmt: skip
        side_a = stats.Side(float(a[0].mean()), float(a[0].var(ddof=1)), a.shape[1])
        mdes.append(stats.detectable(side_a, side_b, assumed, tests=ROWS, band=BAND,
                                     alpha=ALPHA).mde)  # fmt: skip
    return Cell(spread, repeats, change, one_process, false_positive / trials,
                hits / trials if change else None, covered / (trials * ROWS),
                float(np.median(mdes)))  # fmt: skip


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


def simulation_table(trials: int, seed: int = SEED) -> list[Cell]:
    cells = []
    for spread, repeats, change in itertools.product(SPREADS, REPEATS, CHANGES):
        cells.append(simulate(spread, repeats, change, trials=trials, seed=seed))
    for spread in SPREADS:  # a published table: the reference one process
        for change in CHANGES:
            cells.append(simulate(spread, 3, change, trials=trials, one_process=True, seed=seed))
    return cells


def render_simulation(cells: Sequence[Cell], trials: int) -> str:
    lines = [
        "| process spread | run level | repeats a side | change of one row | any row called "
        "(false positive) | changed row found (power) | interval coverage | median MDE |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        repeats = f"{c.repeats} vs 1 (one-process reference)" if c.one_process else str(c.repeats)
        power = "—" if c.power is None else f"{c.power:.1%}"
        lines.append(
            f"| {c.spread:.0%} | {c.spread * RUN_SHARE:.1%} | {repeats} | {c.change:.0%} | "
            f"{c.false_positive:.1%} | {power} | {c.coverage:.1%} | {c.mde:.0%} |"
        )
    lines.append("")
    lines.append(
        f"{trials} simulated comparisons per line, {ROWS} rows each, seed {SEED}; band "
        f"±{BAND:.0%}, alpha {ALPHA:g} after Holm; the assumed noise estimated each time from "
        f"a simulated A/A set of {AA_RECORDS} records x {AA_ROWS} rows x {AA_REPEATS} repeats."
    )
    return "\n".join(lines) + "\n"


# --- the committed A/A records ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Pair:
    run: str
    reference: str
    tally: dict[str, int]
    changed: list[str]  # "label slower (+x%)"


def _tally(cmp: comparison.Comparison) -> tuple[dict[str, int], list[str]]:
    tally: dict[str, int] = {}
    for row in cmp.counted:
        tally[row.verdict] = tally.get(row.verdict, 0) + 1
    changed = [
        f"{row.label} {row.verdict} ({row.difference.ratio - 1:+.1%})"
        for row in cmp.counted if row.verdict in ("faster", "slower") and row.difference
    ]  # fmt: skip
    return tally, changed


def pairs(aa: Sequence[str], slower: Sequence[str] = ()) -> tuple[list[Pair], list[Pair]]:
    """Every ordered pair of A/A records of one stack, and every known-slower record
    against each A/A record that shares its rows, through the real compare."""
    loaded = {path: load(Path(path), "RECORD") for path in [*aa, *slower]}
    table = noise.read_table()

    def held(run: str, ref: str) -> Pair:
        model = noise.for_records(loaded[run], loaded[ref], table)
        cmp = comparison.compare(loaded[run], loaded[ref], noise=model)
        return Pair(run, ref, *_tally(cmp))

    groups: dict[str, list[str]] = {}
    for path in aa:
        groups.setdefault(noise.stack_key(loaded[path]), []).append(path)
    same = [held(a, b) for group in groups.values() for a, b in itertools.permutations(group, 2)]
    against = []
    for path in slower:
        labels = {row.label() for row in loaded[path].rows}
        for ref in aa:
            if labels & {row.label() for row in loaded[ref].rows}:
                against.append(held(path, ref))
    return same, against


def render_pairs(same: Sequence[Pair], against: Sequence[Pair]) -> str:
    def name(path: str) -> str:
        return Path(path).parent.name if Path(path).name in ("step.json", "data.json") else path

    def line(pair: Pair) -> str:
        tally = ", ".join(f"{n} {word}" for word, n in sorted(pair.tally.items()))
        return (f"| {name(pair.run)} | {name(pair.reference)} | {tally} | "
                f"{'; '.join(pair.changed) or '—'} |")  # fmt: skip

    head = ["| run | reference | verdicts | faster or slower |", "|---|---|---|---|"]
    called = sum(1 for pair in same if pair.changed)
    out = [f"Every ordered pair of A/A records ({len(same)} pairs, {called} with a row called "
           "faster or slower):", "", *head, *map(line, same), ""]  # fmt: skip
    if against:
        out += ["Records made with a known slower setting against them:", "", *head,
                *map(line, against), ""]  # fmt: skip
    return "\n".join(out)


# --- the command line -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Args:
    """Calibrate the verdicts: simulation with known truth, then the committed A/A records."""

    trials: int = 2000
    """simulated comparisons per line of the table"""
    aa: tuple[str, ...] = ()
    """A/A records (default: the records results/noise.json was estimated from)"""
    slower: tuple[str, ...] = ()
    """records made with a known slower setting, held against the A/A records"""
    write: str | None = None
    """write both tables into this Markdown file, between its calibration markers"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run(PROG, lambda: _calibrate(cli.parse(Args, argv, prog=PROG), argv))


def default_aa() -> list[str]:
    table = noise.read_table() or {}
    return [
        path for entry in table.get("kinds", {}).values()
        for group in entry["records"] for path in group
    ]  # fmt: skip


def _calibrate(args: Args, argv: Sequence[str]) -> int:
    if args.trials < 10:
        raise cli.UsageError(f"--trials {args.trials} is too few (10 or more)")
    target = None
    if args.write is not None:
        target = files.check_input_file(args.write, flag="--write")
        if BEGIN not in target.read_text() or END not in target.read_text():
            raise cli.UsageError(f"--write {target}: no {BEGIN} ... {END} markers in it")
    cells = simulation_table(args.trials)
    same, against = pairs(list(args.aa) or default_aa(), list(args.slower))
    command = " ".join(["python -m dew.bench.analysis.calibration", *argv])
    text = (
        f"Generated by `{command}`.\n\n### A row's interval\n\n{render_row_coverage(args.trials)}"
        f"\n### Comparisons\n\n{render_simulation(cells, args.trials)}"
        f"\n### The committed A/A records\n\n{render_pairs(same, against)}"
    )
    print(text)
    if target is not None:
        old = target.read_text()
        head, rest = old.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        files.atomic_write(target, f"{head}{BEGIN}\n{text}\n{END}{tail}")
        print(f"wrote {target}", file=sys.stderr)
    worst = max(c.false_positive for c in cells)
    aa_called = sum(1 for pair in same if pair.changed)
    missed = sum(1 for pair in against if not pair.changed)
    print(f"worst false-positive rate {worst:.1%}; A/A pairs with a change: {aa_called}; "
          f"slower records not found slower: {missed}", file=sys.stderr)  # fmt: skip
    return cli.EXIT_OK if worst <= 0.05 and not aa_called else cli.EXIT_CHANGED


if __name__ == "__main__":
    sys.exit(main())
