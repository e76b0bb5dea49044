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
from dew.bench.analysis.tables import level
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
ROWS = 4  # a smoke preset's rows, in the history and in each comparison
HISTORY_REPEATS = 3


@dataclasses.dataclass(frozen=True)
class Regime:
    """True levels (standard deviations of the log figure) and the device kind's band."""

    name: str
    process: float
    run: float
    shift: float
    band: float
    family: str  # the prior of a kind without history (noise.PRIORS)


REGIMES = (
    Regime("CPU VM", 0.15, 0.03, 0.12, 0.05, "cpu"),  # this VM's history: 16% / 0 / 13%
    Regime("GPU", 0.015, 0.007, 0.007, 0.02, "gpu"),
    Regime("GPU, run > process", 0.01, 0.02, 0.02, 0.02, "gpu"),
    Regime("GPU, twice the prior", 0.04, 0.02, 0.02, 0.02, "gpu"),
    Regime("TPU", 0.003, 0.001, 0.001, 0.02, "tpu"),  # repeats within 0.3%
)
HISTORIES = (0, 2, 3, 5, 8)  # A/A records in the kind's history (0: its platform's prior)
DESIGNS = (("3 vs 3", 3, 3), ("1 vs 1", 1, 1))  # two records, repeats a side
ROUNDS = 5  # `dew ab`'s interleaved rounds: paired, no history
CHANGES = (0.0, 0.05, 0.10, 0.30)  # one row slower by this much


@dataclasses.dataclass(frozen=True)
class Cell:
    regime: str
    history: int | None  # A/A records behind the levels; None: interleaved rounds
    design: str
    change: float
    not_reproduced: float
    reproduced: float
    power: float | None  # the changed row called slower


def history_levels(rng, regime: Regime, records: int, trials: int) -> dict[str, np.ndarray]:
    """The levels a history of `records` A/A records (ROWS rows of HISTORY_REPEATS repeats)
    gives, per trial: the mean squares dew.bench.analysis.history fits (balanced here, where
    its additive fit is the rows' and records' means), read by judge.component; with none,
    the platform's prior (noise.prior) as compare takes it."""
    if records == 0:
        prior = noise.prior(regime.family, None)
        return {name: np.full(trials, value) for name, value in (
            ("process", prior.process**2), ("process_df", prior.process_df),
            ("run", prior.run**2), ("run_df", prior.run_df), ("shift", prior.shift**2),
            ("shift_df", prior.shift_df))}  # fmt: skip
    n, k = HISTORY_REPEATS, ROWS
    logs = (rng.normal(0, regime.shift, (trials, records, 1, 1))
            + rng.normal(0, regime.run, (trials, records, k, 1))
            + rng.normal(0, regime.process, (trials, records, k, n)))  # fmt: skip
    process, process_df = np.var(logs, axis=-1, ddof=1).mean(axis=(1, 2)), records * k * (n - 1)
    means = logs.mean(axis=-1)
    a = means.mean(axis=2, keepdims=True) - means.mean(axis=(1, 2), keepdims=True)
    residual = means - a - means.mean(axis=1, keepdims=True)
    df_e = (records - 1) * (k - 1)
    ms_e = np.sum(residual**2, axis=(1, 2)) / df_e
    run, run_df, _ = judge.component(ms_e, df_e, process / n, process_df)
    between = np.var(a[:, :, 0], axis=1, ddof=1)
    shift, shift_df, _ = judge.component(between, records - 1, ms_e / k, df_e)
    return {"process": process, "process_df": np.full(trials, float(process_df)), "run": run,
            "run_df": run_df, "shift": shift, "shift_df": shift_df}  # fmt: skip


def _outcomes(out: dict, change: float, trials: int) -> tuple[float, float, float | None]:
    outcome = out["outcome"]
    power = float(np.mean(out["word"][:, 0] == judge.SLOWER)) if change else None
    return float(np.mean(outcome == 1)), float(np.mean(outcome == 0)), power


def simulate(regime: Regime, records: int | None, design: tuple | None, change: float, *,
             trials: int, seed: int = SIM_SEED) -> Cell:  # fmt: skip
    """One cell: `trials` comparisons of ROWS rows, the first `change` slower, judged as the
    commands judge them: two records at the levels a history of `records` A/A records
    gives (judge.moderated and judge.judge_arrays, compare's path), or ROUNDS interleaved
    rounds (design None: judge.paired_arrays, ab's path)."""
    repeats = design[1:] if design else (0, 0)
    rng = np.random.default_rng([seed, int(regime.process * 1e4), int(regime.run * 1e4),
                                 int(regime.shift * 1e4), records or 0, *repeats,
                                 int(change * 100)])  # fmt: skip
    truth = np.zeros(ROWS)
    truth[0] = math.log1p(change)
    if design is None:  # a round's ratio: two processes, the run levels cancel
        logs = truth[:, None] + rng.normal(0, regime.process * math.sqrt(2),
                                           (trials, ROWS, ROUNDS))  # fmt: skip
        out = judge.paired_arrays(logs, band=regime.band, alpha=ALPHA)
        return Cell(regime.name, None, f"{ROUNDS} rounds (dew ab)", change,
                    *_outcomes(out, change, trials))  # fmt: skip
    name, n_run, n_ref = design
    levels = history_levels(rng, regime, records, trials)
    shape = (trials, ROWS)

    def side(n: int):
        mean = rng.normal(0, regime.shift, (trials, 1)) + rng.normal(0, regime.run, shape)
        mean = mean + rng.normal(0, regime.process / math.sqrt(n), shape)
        var = regime.process**2 * rng.chisquare(n - 1, shape) / (n - 1) if n > 1 else None
        return mean, var

    (a, va), (b, vb) = side(n_run), side(n_ref)
    nan = np.full(shape, np.nan)
    process_var, process_df = judge.moderated(
        nan if va is None else va, n_run, nan if vb is None else vb, n_ref,
        np.sqrt(levels["process"])[:, None], levels["process_df"][:, None])  # fmt: skip
    out = judge.judge_arrays(
        a - b + truth, process_var, process_df, levels["run"][:, None],
        levels["run_df"][:, None], levels["shift"], levels["shift_df"][:, None], n_run, n_ref,
        band=regime.band, alpha=ALPHA)  # fmt: skip
    return Cell(regime.name, records, name, change, *_outcomes(out, change, trials))


def simulation_table(trials: int) -> list[list[Cell]]:
    """Per line (a regime, a history, a design) its cells at every change in CHANGES."""
    lines = []
    for regime in REGIMES:
        for records in HISTORIES:
            for design in DESIGNS:
                lines.append([simulate(regime, records, design, c, trials=trials)
                              for c in CHANGES])  # fmt: skip
        lines.append([simulate(regime, None, None, c, trials=trials) for c in CHANGES])
    return lines


def render_simulation(lines: Sequence[Sequence[Cell]], trials: int) -> str:
    head = ("| regime | history | design | false NOT REPRODUCED | REPRODUCED, no change | "
            "false REPRODUCED +10% | +30% | power 5% | 10% | 30% |")  # fmt: skip
    out = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for cells in lines:
        by = {c.change: c for c in cells}
        first = cells[0]
        history = {None: "—", 0: "prior"}.get(first.history, f"{first.history} records")
        powers = " | ".join(f"{by[c].power:.1%}" for c in (0.05, 0.10, 0.30))
        null, ten, thirty = by[0.0], by[0.10], by[0.30]
        out.append(f"| {first.regime} | {history} | {first.design} | {null.not_reproduced:.1%} "
                   f"| {null.reproduced:.1%} | {ten.reproduced:.1%} | {thirty.reproduced:.1%} "
                   f"| {powers} |")  # fmt: skip
    regimes = "; ".join(f"{r.name}: process {r.process:.1%}, run {r.run:.1%}, shift "
                        f"{r.shift:.1%}, band ±{r.band:.0%}" for r in REGIMES)  # fmt: skip
    out += ["", f"{trials} simulated comparisons of {ROWS} rows per cell, seed {SIM_SEED}, "
            f"alpha {ALPHA:g} after Holm over the shift and the rows; a history of "
            f"{HISTORY_REPEATS} repeats a row; the change is one row's. {regimes}."]  # fmt: skip
    return "\n".join(out) + "\n"


# --- what two records of each kind can show ------------------------------------------------


def render_reach(kinds: dict) -> str:
    """Per device kind with history (noise.json's fit of results/): its levels, the
    narrowest band two of its records can show a row the same within at any number of
    repeats (judge.smallest_band), and the `dew ab` rounds that show its default band."""
    out = ["| device kind | A/A records | process | run | shift | smallest band, two records "
           "| band | `dew ab` rounds for it |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for kind, entry in sorted(kinds.items()):
        band = judge.band_for(entry["platform"])
        smallest = judge.smallest_band(entry["run"] ** 2, entry["run_df"], entry["shift"] ** 2,
                                       entry["shift_df"])  # fmt: skip
        rounds = judge.rounds_to_show(entry["process"] ** 2, band)
        out.append(f"| {kind} | {entry['records']} | {level(entry['process'])} "
                   f"({entry['process_df']:g} df) | {level(entry['run'])} ({entry['run_df']:g} "
                   f"df) | {level(entry['shift'])} ({entry['shift_df']:g} df) | "
                   f"±{level(smallest)} | "
                   f"±{band:.0%} | {rounds or 'more than 1000'} |")  # fmt: skip
    return "\n".join(out) + "\n"


# --- the committed records ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Pair:
    run: str
    reference: str
    outcome: str
    tally: dict[str, int]
    changed: list[str]  # "label slower (+x%)", "the whole run slower (+x%)"


def _held(run, ref, run_path: str, ref_path: str) -> Pair:
    """The pair through what `compare RUN REFERENCE` runs: the noise of results/ less the
    two records (history.kinds_table), then comparison.compare."""
    exclude = (history.REPO_ROOT / run_path, history.REPO_ROOT / ref_path)
    model = noise.for_records(run, ref, exclude=exclude)
    cmp = comparison.compare(run, ref, noise=model)
    tally: dict[str, int] = {}
    for row in cmp.counted:
        tally[row.verdict] = tally.get(row.verdict, 0) + 1
    changed = [f"{row.label} {row.verdict} ("
               + (f"{row.relative[0] - 1:+.1%} against the shift)" if row.relative
                  else f"{row.difference.ratio - 1:+.1%})")
               for row in cmp.counted
               if row.verdict in ("faster", "slower") and row.difference]  # fmt: skip
    if cmp.shift is not None and cmp.shift.word in ("faster", "slower"):
        changed.append(f"the whole run {cmp.shift.word} ({cmp.shift.ratio - 1:+.1%})")
    return Pair(run_path, ref_path, cmp.outcome, tally, changed)


def pairs(slower: Sequence[str] = ()) -> tuple[list[Pair], list[Pair]]:
    """Every ordered pair of the A/A groups under results/ through the real compare (the
    levels fitted from results/ less the pair), and each known-slower record against every
    record of its stack but for the slower setting that shares its rows."""
    records = history.read(history.HISTORY)
    groups: dict[str, list[str]] = {}
    for path, record in records:
        groups.setdefault(history.identity(record), []).append(path)
    paths = [p for group in groups.values() if len(group) > 1 for p in group]
    loaded = {p: load(history.REPO_ROOT / p, "RECORD") for p in [*paths, *slower]}
    same = [_held(loaded[a], loaded[b], a, b)
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
                against.append(_held(loaded[path], record, path, ref))
    return same, against


def render_pairs(same: Sequence[Pair], against: Sequence[Pair]) -> str:
    gone = history.superseded(history.SUPERSEDED)

    def name(path: str) -> str:
        parent = Path(path).parent.name
        shown = f"{parent}/{Path(path).name}" if parent.startswith("2026") else path
        return f"{shown} (superseded)" if path in gone else shown

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
           + f"; {called} with the shift or a row called faster or slower). A pair of "
           "superseded records (results/superseded.json) is judged at the noise of their "
           "own time, the fit that still holds them:", "", *head,
           *map(line, same), ""]  # fmt: skip
    if against:
        out += ["Records made with a known slower setting (-O0) against them:", "", *head,
                *map(line, against), ""]  # fmt: skip
    return "\n".join(out)


# --- the command line -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Args:
    """Calibrate the verdicts: simulation with known truth, then the committed records."""

    trials: int = 2000
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
    lines = simulation_table(args.trials)
    same, against = pairs(list(args.slower))
    command = " ".join([PROG, *argv])
    text = (
        f"Generated by `{command}`.\n\n### A row's interval\n\n"
        f"{render_row_coverage(min(args.trials, 2000))}"
        f"\n### Comparisons\n\n{render_simulation(lines, args.trials)}"
        f"\n### What two records can show\n\n{render_reach(history.kinds_table(None))}"
        f"\n### The committed records\n\n{render_pairs(same, against)}"
    )
    print(text)
    if target is not None:
        old = target.read_text()
        head, rest = old.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        files.atomic_write(target, f"{head}{BEGIN}\n{text}\n{END}{tail}")
        print(f"wrote {target}", file=sys.stderr)
    # The prior's lines show a guess against a wider truth; the rule holds where the levels
    # come from a history, and for the interleaved rounds.
    worst = max(c.not_reproduced for cells in lines for c in cells
                if c.change == 0 and c.history != 0)  # fmt: skip
    aa_called = sum(1 for pair in same if pair.changed)
    print(f"worst false NOT REPRODUCED {worst:.1%}; A/A pairs with a change: {aa_called}",
          file=sys.stderr)  # fmt: skip
    return cli.EXIT_OK if worst <= 0.05 and not aa_called else cli.EXIT_CHANGED


if __name__ == "__main__":
    sys.exit(main())
