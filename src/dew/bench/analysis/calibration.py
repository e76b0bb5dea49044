"""Are the verdicts calibrated? Simulation with known truth, and every pair of real A/A records.

    python -m dew.bench.analysis.calibration [--trials 4000] [--slower RECORD...]
        [--write docs/calibration.md]

(a) **A row's interval** (`row_coverage`): the share of simulated rows whose 95% interval
(stats.row_interval: the repeats alone) holds the centre of their own run.

(b) **Comparisons** (`simulate`): the outcome of simulated comparisons of known truth
through dew.bench.analysis.judge, the rules compare applies, in the GPU and
CPU regimes (the run level above the process level too, the history well known or barely),
1-vs-1 and one-process references, interleaved rounds, one row changed or the whole table.

(c) **The committed records** (`pairs`): every ordered pair of committed A/A records (history_scope)
(dew.bench.analysis.levels.history's groups) through the real compare at the levels fitted from
that history, and each record made with a known slower setting (-O0 in XLA_FLAGS on CPU,
float32 on the v5e) against
every record of its own stack otherwise.

--write puts the tables in a file between markers (the docs' generated section);
tests/bench/analysis/test_calibration.py fails when a null cell reads NOT REPRODUCED more
than 5% of the time at a fixed seed, or an A/A pair reads faster or slower.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dew.bench.analysis import comparison, judge, stats
from dew.bench.analysis.levels import history, history_records, history_scope, noise
from dew.bench.analysis.simulate import (
    ALPHA,
    HISTORY_REPEATS,
    SIM_SEED,
    Busy,
    Cell,
    Regime,
    simulate,
)
from dew.bench.analysis.tables import level
from dew.bench.common import cli, files
from dew.bench.common.files import RESULTS_ROOT
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


# --- comparisons of known truth (dew.bench.analysis.simulate) -------------------------

ROWS = 4  # a smoke preset's rows, in the history and in each comparison
REGIMES = (
    Regime("CPU VM", 0.15, 0.03, 0.12, 0.05, "cpu"),  # this VM's history: 16% / 0 / 13%
    Regime("GPU", 0.015, 0.007, 0.007, 0.02, "gpu"),
    Regime("GPU, run > process", 0.01, 0.02, 0.02, 0.02, "gpu"),
    Regime("GPU, twice the prior", 0.04, 0.02, 0.02, 0.02, "gpu"),
    Regime("TPU", 0.003, 0.001, 0.001, 0.02, "tpu"),  # repeats within 0.3%
)
HISTORIES = (0, 2, 3, 5, 8)  # A/A records in the kind's history (0: its platform's prior)
DESIGNS = (("3 vs 3", 3, 3), ("1 vs 1", 1, 1))  # two records, repeats a side
CHANGES = (0.0, 0.05, 0.10, 0.30)  # one row slower by this much


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


# --- the chip's regime: rows of mixed noise, drift, an outlier, a busy host ----------------

MIXED = Regime("TPU, rows 0.05%-5%", 0.0005, 0.0002, 0.0001, 0.02, "tpu", rows=18,
               noisiest=0.05)  # fmt: skip  # the v5e's 18 small cases: device- to host-bound
MIXED_UNSEEN = dataclasses.replace(MIXED, name="TPU, rows 0.05%-5%, 4 with history",
                                   history_rows=4)  # fmt: skip  # a history of few rows
MIXED_DESIGNS = (("1 vs 1", 1, 1), ("3 vs 3", 3, 3), ("5 vs 5", 5, 5))
DRIFTS = (1.0, 3.0, 10.0)  # today's process, run and shift levels over the history's
MIXED_RECORDS = 3
OUTLIER = 0.12  # one repeat of a quiet row this far off (the v5e's hybrid_dit: +12%)
AGENT = 0.16 / 13  # the lease's agent: 16% of one of the v5e host's 13 cores
TPU_EQUAL = REGIMES[-1]


def render_mixed(trials: int) -> str:
    """Rows of mixed noise with a history of MIXED_RECORDS A/A records (of every row, or of
    four), today's levels DRIFTS times the history's: false NOT REPRODUCED, REPRODUCED with
    no change, REPRODUCED with the quietest row +3% (beyond the band), that row +5% called
    slower, a repeat named as standing out with none planted."""
    out = ["| rows | design | drift | false NOT REPRODUCED | REPRODUCED, no change | "
           "REPRODUCED, a row +3% | power, a device-bound row +5% | a repeat named, none off |",
           "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for regime in (MIXED, MIXED_UNSEEN):
        for design in MIXED_DESIGNS:
            for drift in DRIFTS:
                null, three, five = (simulate(regime, MIXED_RECORDS, design, change,
                                              trials=trials, drift=drift)
                                     for change in (0.0, 0.03, 0.05))  # fmt: skip
                cells = (null.not_reproduced, null.reproduced, three.reproduced, five.power,
                         null.flagged)  # fmt: skip
                out.append(f"| {regime.name} | {design[0]} | {drift:g}x | "
                           + " | ".join(f"{c:.1%}" for c in cells) + " |")  # fmt: skip
    out += ["", f"{trials} simulated comparisons of {MIXED.rows} rows per cell, seed {SIM_SEED}: "
            "process levels evenly spread on the log scale from 0.05% to 5%, each row's run "
            "level 40% of its process level, shift 0.01%, band ±2%; the history "
            f"{MIXED_RECORDS} A/A records of {HISTORY_REPEATS} repeats; drift: today's "
            "levels that many times the history's."]  # fmt: skip
    return "\n".join(out) + "\n"


def render_outlier_and_busy(trials: int) -> str:
    """One repeat off, and a busy side, each through the judge with and without its rule."""
    three = MIXED_DESIGNS[1]
    cases = [
        ("one repeat of a quiet row +12%", MIXED, dict(outlier=OUTLIER), 0.0),
        ("the agent (16% of one of 13 cores) beside every repeat of both sides, a row +10%",
         MIXED, dict(busy=simulate_busy("both", MIXED, AGENT, AGENT)), 0.10),
        ("a busy reference, every row slowed by the agent's bound, a row truly +3%",
         MIXED, dict(busy=simulate_busy("reference", MIXED, AGENT, AGENT)), 0.03),
        ("a burner on one of 2 cores beside 3 of 4 rows of the run, +100% for it",
         REGIMES[0], dict(busy=simulate_busy("run", REGIMES[0], 1.0, 1.0, skip_first=True)),
         0.0),
        ("a burner on one of 2 cores beside the reference, +100% for it, a row truly +30%",
         REGIMES[0], dict(busy=simulate_busy("reference", REGIMES[0], 1.0, 1.0)), 0.30),
    ]  # fmt: skip
    out = ["| case | regime | NOT REPRODUCED | REPRODUCED | the changed row slower | a repeat "
           "named | without the rule: NOT REPRODUCED | REPRODUCED |",
           "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, regime, extra, change in cases:
        records = MIXED_RECORDS if regime is MIXED else 8
        cell = simulate(regime, records, three, change, trials=trials, **extra)
        plain = dict(extra)
        if "busy" in plain:  # the same slowed figures, no bound for the judge
            plain["busy"] = dataclasses.replace(plain["busy"], bound=0.0)
        else:
            plain["outlier"] = 0.0
        bare = simulate(regime, records, three, change, trials=trials, **plain)
        power = "—" if cell.power is None else f"{cell.power:.1%}"
        out.append(f"| {name} | {regime.name} | {cell.not_reproduced:.1%} | "
                   f"{cell.reproduced:.1%} | {power} | {cell.flagged:.1%} | "
                   f"{bare.not_reproduced:.1%} | {bare.reproduced:.1%} |")  # fmt: skip
    out += ["", f"{trials} simulated comparisons per line, 3 repeats a side, seed {SIM_SEED}; "
            "the CPU VM's levels from a history of 8 records, the TPU's from "
            f"{MIXED_RECORDS}. A busy side's rows read slower by up to the bound the gate "
            "reads for them (host_gates.repeat_bias), here by all of it; \"without the "
            "rule\": the busy figures judged with no bound (the outlier line: with no repeat "
            "off)."]  # fmt: skip
    return "\n".join(out) + "\n"


def simulate_busy(side: str, regime: Regime, slower: float, bound: float,
                  skip_first: bool = False) -> Busy:  # fmt: skip
    """Every row of `side` (but the first with `skip_first`) busy, `slower` for it."""
    return Busy(side, tuple(range(1 if skip_first else 0, regime.rows)), slower, bound)


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
    two records (history.kinds_table), then comparison.compare; a pair holding a superseded
    record as compare's noise line says to judge it, `--with-superseded` (the noise of its
    time)."""
    exclude = (RESULTS_ROOT / run_path, RESULTS_ROOT / ref_path)
    gone = history.superseded(history.SUPERSEDED)
    kinds = None
    if run_path in gone or ref_path in gone:
        kinds = history_scope.kinds_table(None, exclude, with_superseded=True)
    model = noise.for_records(run, ref, kinds=kinds, exclude=exclude)
    cmp = comparison.compare(run, ref, noise=model)
    tally: dict[str, int] = {}
    for row in cmp.counted:
        tally[row.verdict] = tally.get(row.verdict, 0) + 1
    changed = [f"{row.label} {row.verdict} ({row.judged[0] - 1:+.1%}"
               + (" against the shift)" if row.against_shift else ")")
               for row in cmp.counted
               if row.verdict in ("faster", "slower") and row.difference]  # fmt: skip
    if cmp.shift is not None and cmp.shift.word in ("faster", "slower"):
        changed.append(f"the whole run {cmp.shift.word} ({cmp.shift.ratio - 1:+.1%})")
    return Pair(run_path, ref_path, cmp.outcome, tally, changed)


def pairs(slower: Sequence[str] = ()) -> tuple[list[Pair], list[Pair]]:
    """Every ordered pair of the A/A groups under results/ through the real compare (the
    levels fitted from results/ less the pair), and each known-slower record against every
    record of its stack but for the slower setting that shares its rows."""
    # the records compare's own history reads: the committed ones (history_scope)
    records = history_records.leave_out(history_scope.split_committed(history.HISTORY)[1])[0]
    groups: dict[str, list[str]] = {}
    for path, record in records:
        groups.setdefault(history.identity(record), []).append(path)
    paths = [p for group in groups.values() if len(group) > 1 for p in group]
    loaded = {p: load(RESULTS_ROOT / p, "RECORD") for p in [*paths, *slower]}
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


def superseded_pair(pair: Pair, gone: dict[str, str]) -> bool:
    """Whether a pair holds a record results/superseded.json lists (`gone`)."""
    return pair.run in gone or pair.reference in gone


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
    old = sum(1 for pair in same if pair.changed and superseded_pair(pair, gone))
    words = {w: sum(1 for p in same if p.outcome == w) for w in
             ("REPRODUCED", "INCONCLUSIVE", "NOT REPRODUCED")}  # fmt: skip
    out = [f"Every ordered pair of A/A records ({len(same)} pairs: "
           + ", ".join(f"{n} {w}" for w, n in words.items())
           + f"; {called} with the shift or a row called faster or slower, {old} of them "
           "pairs of superseded records). A pair of superseded records "
           "(results/superseded.json) is judged at the noise of their own time, the fit that "
           "still holds them (compare --with-superseded); such a pair may hold the very "
           "difference its reason names:", "", *head, *map(line, same), ""]  # fmt: skip
    if against:
        out += ["Records made with a known slower setting (-O0 on CPU, float32 on the v5e) "
                "against them:", "", *head,
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
        f"\n### Rows of mixed noise, as on a chip\n\n{render_mixed(args.trials)}"
        f"\n### An outlier repeat, a busy host\n\n{render_outlier_and_busy(args.trials)}"
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
    gone = history.superseded(history.SUPERSEDED)
    aa_called = sum(1 for pair in same if pair.changed and not superseded_pair(pair, gone))
    print(f"worst false NOT REPRODUCED {worst:.1%}; A/A pairs with a change (but superseded "
          f"ones): {aa_called}",
          file=sys.stderr)  # fmt: skip
    return cli.EXIT_OK if worst <= 0.05 and not aa_called else cli.EXIT_CHANGED


if __name__ == "__main__":
    sys.exit(main())
