"""Make the records issue 59 asks for on one chip, then every verdict `dew compare` gives them.

From the checkout's root on a TPU host with the bundle installed (README, "On a TPU"):

    python3.11 dew-bundle/install.py && . dew-bundle/site/env.sh
    python3.11 scripts/chip_verdicts.py                 # the whole set: ~35 minutes cold
    timeout 570 python3.11 scripts/chip_verdicts.py     # where a command gets 10 minutes:
                                                        # again until it prints the table

With the host's own Python (sys.executable), through tools/benchmark_step.py, in this order:

    aa1, aa2, aa3   --preset small --architectures unet simple_dit causal_transformer
                    hybrid_dit --repeats 3 (the seed's four architectures)
    f32             the same with --dtype float32
    small1, small2  --preset small --repeats 3: every case of the preset (18)

all with one --compilation-cache-dir (--cache, default /tmp/dew-cache), so a program compiled
once is loaded by every later record. Each record is OUT/<stamp>-<preset>-<name>-<device>-
<commit>/step.json (--out, default results/runs; the folder style of dew.host.runner's
new_run_dir, the commit as the record will name it, the device as dew's device probe reads
it), the benchmark's output beside it in step.log. The script can be stopped at any time and
run again: a record that is complete (every case has a row, each ok with all its repeats, or
tools/benchmark_step.py ran every round: step.done) is kept, a partial one continued with
--resume. SIGTERM or SIGINT is passed to the running benchmark, which keeps every whole row;
then one line and exit 128 + the signal's number. Once every record is complete, every
ordered pair goes through `dew compare RUN REFERENCE` (its main, dew.commands.compare, in
this process), and the table is printed and written to OUT/verdicts.md, with this command
line and dew's commit.

The table: one row per ordered pair, RUN against REFERENCE; the outcome and exit status
compare gave (REPRODUCED 0, NOT REPRODUCED 1, INCONCLUSIVE 3, 2 for an error) and its
headline; what is expected of the pair, and whether it was met:

    A/A (aa1-aa3, 6 pairs)             REPRODUCED or INCONCLUSIVE: never exit 1
    float32 (f32 and each aa, 6 pairs) NOT REPRODUCED, exit 1, in both directions
    18 cases (small1, small2, 2 pairs) REPRODUCED or INCONCLUSIVE: never exit 1

Exit 0: every expectation met; 1: one was not (or a benchmark failed); 2: bad input.
--only NAME... makes only those records; --compare-only compares the records there are,
naming the pairs it lacks. On a host without a TPU the same flow runs with another preset:
--preset cpu-smoke --architectures A B replaces the seed's four, --wide-architectures the
preset's every case (the tests' way), --steps the benchmark's steps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from dew.bench.common import cli
from dew.bench.common.errors import Interrupted, faults
from dew.bench.common.files import REPO_ROOT, check_output_dir
from dew.bench.record.capture import code_identity  # the commit the records will name
from dew.bench.record.validate import load
from dew.bench.sweep import presets
from dew.bench.sweep.preflight import probe_devices
from dew.bench.sweep.run_record import measured

PROG = "scripts/chip_verdicts.py"
TOOL = Path(__file__).resolve().parents[1] / "tools" / "benchmark_step.py"
SEED = ("unet", "simple_dit", "causal_transformer", "hybrid_dit")
NAMES = ("aa1", "aa2", "aa3", "f32", "small1", "small2")
DONE = "step.done"  # written when the benchmark ran every round (exit 0, or 1: a case failed)
AA, F32, WIDE = "aa", "f32", "wide"
EXPECTED = {
    AA: "REPRODUCED or INCONCLUSIVE (never exit 1)",
    F32: "NOT REPRODUCED (exit 1)",
    WIDE: "never exit 1",
}


@dataclasses.dataclass(frozen=True)
class Args:
    """Make three A/A records, a float32 record and two records of every case on this host's
    chip, then compare every ordered pair. Exit 0: every expectation met; 1: not; 2: usage."""

    out: str = "results/runs"
    """the folder the records' folders are made in (and verdicts.md)"""
    cache: str = "/tmp/dew-cache"
    """the --compilation-cache-dir every record shares"""
    only: tuple[str, ...] | None = None
    """make only these records (aa1 aa2 aa3 f32 small1 small2)"""
    compare_only: bool = False
    """make nothing: compare the records there are, naming the pairs missing"""
    preset: presets.PresetName = "small"
    """the preset of every record"""
    architectures: tuple[str, ...] = SEED
    """the architectures of aa1-aa3 and f32"""
    wide_architectures: tuple[str, ...] | None = None
    """the architectures of small1 and small2 (default: every case of the preset)"""
    repeats: int = 3
    """--repeats of every record"""
    steps: int | None = None
    """--steps of every record (default: the benchmark's)"""


@dataclasses.dataclass(frozen=True)
class Spec:
    """One record to make: its name, the benchmark's flags, the cases it holds."""

    name: str
    flags: tuple[str, ...]
    cases: tuple[presets.Case, ...]


class Failed(Exception):
    """A benchmark that ended otherwise than by running its rounds: one line, exit 1."""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return faults(PROG, lambda: cli.run(PROG, lambda: run(argv)))
    except Failed as failure:
        cli.say(PROG, str(failure))
        return cli.EXIT_CHANGED


def run(argv: list[str]) -> int:
    args = cli.parse(Args, argv, prog=PROG)
    specs = check(args)
    code = code_identity(REPO_ROOT, os.environ)
    short = (code.commit or "nocommit")[:7] + ("-dirty" if code.dirty else "")
    out = Path(args.out)
    folders = {name: find(out, args.preset, name, short) for name in NAMES}
    if not args.compare_only:
        device = None
        for name in args.only or NAMES:
            folder = folders[name]
            if complete(folder, specs[name], args.repeats):
                say(f"{name}: {folder / 'step.json'} is complete, kept")
                continue
            if folder is None:
                device = device or device_name()
                stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
                folder = folders[name] = out / f"{stamp}-{args.preset}-{name}-{device}-{short}"
            make(specs[name], folder, args)
        waiting = [n for n in NAMES if not complete(folders[n], specs[n], args.repeats)]
        short_of = [n for n in args.only or NAMES if n in waiting]
        if short_of:  # ran every round, yet a case has no row (a write that failed)
            raise Failed(f"{', '.join(short_of)}: a case has no row after the benchmark ran; "
                         "its step.log says why")  # fmt: skip
        if waiting:
            say(f"made {', '.join(args.only or NAMES)}; the comparison waits for "
                f"{', '.join(waiting)} (run without --only, or --compare-only)")  # fmt: skip
            return cli.EXIT_OK
    records = {n: f / "step.json" for n, f in folders.items() if f and (f / "step.json").is_file()}
    command = shlex.join([Path(sys.executable).name, PROG, *argv])
    return verdicts(records, specs, args, out, command, code)


def check(args: Args) -> dict[str, Spec]:
    """Every flag checked (UsageError: one line), and the six records' specs."""
    cli.check_count("repeats", args.repeats, 1)
    if args.steps is not None:
        cli.check_count("steps", args.steps, 1)
    unknown = [name for name in args.only or () if name not in NAMES]
    if unknown:
        raise cli.UsageError(f"--only: no record named {', '.join(unknown)}; the records: "
                             f"{' '.join(NAMES)}")  # fmt: skip
    if args.only is not None and not args.only:
        raise cli.UsageError(f"--only needs at least one of {' '.join(NAMES)}")
    if args.only and args.compare_only:
        raise cli.UsageError("--only makes records and --compare-only makes none; give one")
    check_output_dir(args.out, flag="--out")
    check_output_dir(args.cache, flag="--cache")
    try:
        seed = presets.resolve(args.preset, args.architectures, None)
        wide = presets.resolve(args.preset, args.wide_architectures, None)
    except ValueError as error:
        raise cli.UsageError(str(error)) from None
    common = ["--preset", args.preset]
    repeats = ["--repeats", str(args.repeats)]
    repeats += ["--steps", str(args.steps)] if args.steps is not None else []
    seed_flags = (*common, "--architectures", *args.architectures, *repeats)
    wide_flags = (*common, *(("--architectures", *args.wide_architectures)
                             if args.wide_architectures else ()), *repeats)  # fmt: skip
    specs = {name: Spec(name, seed_flags, seed) for name in ("aa1", "aa2", "aa3")}
    specs["f32"] = Spec("f32", (*seed_flags, "--dtype", "float32"), seed)
    specs.update({name: Spec(name, wide_flags, wide) for name in ("small1", "small2")})
    return specs


def find(out: Path, preset: str, name: str, short: str) -> Path | None:
    """The folder of record `name` at this commit in OUT (whatever its stamp and device)."""
    pattern = re.compile(
        rf"\d{{8}}T\d{{6}}Z-{re.escape(preset)}-{name}-[a-z0-9-]+-{re.escape(short)}"
    )
    found = sorted(p for p in out.iterdir() if pattern.fullmatch(p.name)) if out.is_dir() else []
    if len(found) > 1:
        raise cli.UsageError(
            f"--out {out} holds {len(found)} records of {name} at {short} "
            f"({', '.join(p.name for p in found)}); give --out a folder of one set"
        )
    return found[0] if found else None


def device_name() -> str:
    """This host's devices as a folder name says them: tpu-v5e, cpu, nvidia-h200 (dew's
    device probe, a short process that opens the backend the records will use)."""
    devices = probe_devices(dict(os.environ))
    topology = (devices.identity or {}).get("topology")
    if devices.platform == "tpu" and topology:
        name = f"tpu-{topology.split(':')[0]}"
    else:
        name = devices.kind if devices.platform == "gpu" else devices.platform
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def complete(folder: Path | None, spec: Spec, repeats: int) -> bool:
    """Every case of the record has a row, and the benchmark ran every round (step.done) or
    every row is ok with all its repeats."""
    path = folder / "step.json" if folder is not None else None
    if path is None or not path.is_file():
        return False
    rows = {row.key(): row for row in load(path, spec.name).rows}
    if any(case.key() not in rows for case in spec.cases):
        return False
    if (folder / DONE).is_file():
        return True
    return all(rows[c.key()].status == "ok" and measured(rows[c.key()]) >= repeats
               for c in spec.cases)  # fmt: skip


def make(spec: Spec, folder: Path, args: Args) -> None:
    """Run the benchmark for one record (continuing it with --resume where it has begun),
    its output on stderr and in step.log; a stop signal is passed on to it."""
    record = folder / "step.json"
    argv = [sys.executable, str(TOOL), *spec.flags, "--compilation-cache-dir", args.cache,
            "--json-out", str(record), *(["--resume"] if record.exists() else [])]  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    say(f"{spec.name}: {shlex.join(['python', *argv[1:]])}")
    last: list[str] = []
    child = pump = None
    with open(folder / "step.log", "ab") as log:
        try:
            child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            pump = threading.Thread(target=tee, args=(child.stdout, log, last), daemon=True)
            pump.start()
            status = child.wait()
        except Interrupted as stop:
            status = None
            if child is not None:
                child.send_signal(stop.signum)  # it keeps its whole rows and ends
                status = child.wait()
            if pump is not None:
                pump.join()
            stop.message = (
                f"interrupted ({signal.Signals(stop.signum).name}) while making {spec.name}: "
                f"{record} keeps {rows(record)} (tools/benchmark_step.py exited {status}); "
                "run the same command again to continue"
            )
            raise
        pump.join()
    if status not in (0, 1):
        why = last[0] if last else "no output"
        raise Failed(f"{spec.name}: tools/benchmark_step.py exited {status} ({why}); see "
                     f"{folder / 'step.log'}")  # fmt: skip
    (folder / DONE).write_text(f"tools/benchmark_step.py exited {status}: every round ran\n")


def tee(source, log, last: list[str]) -> None:
    """The benchmark's output, line by line, to stderr and the log; its last line kept."""
    for line in source:
        sys.stderr.buffer.write(line)
        sys.stderr.buffer.flush()
        log.write(line)
        log.flush()
        if line.strip():
            last[:] = [line.decode(errors="replace").strip()]


def rows(record: Path) -> str:
    """What a record holds: its rows and their repeats."""
    if not record.is_file():
        return "no row yet"
    held = load(record, "the record").rows
    return f"{len(held)} rows, {sum(measured(row) for row in held if row.status == 'ok')} repeats"


def pairs() -> list[tuple[str, str, str]]:
    """Every ordered pair compared: (run, reference, what is expected)."""
    aa = ("aa1", "aa2", "aa3")
    found = [(a, b, AA) for a in aa for b in aa if a != b]
    found += [("f32", a, F32) for a in aa] + [(a, "f32", F32) for a in aa]
    return found + [("small1", "small2", WIDE), ("small2", "small1", WIDE)]


def compare(run: Path, reference: Path) -> tuple[str, int, str]:
    """`dew compare RUN REFERENCE --format json`, its main (dew.commands.compare) in this
    process: (outcome, exit status, headline); an error's outcome is "error", its headline
    the line compare wrote."""
    from dew.commands.compare import main as dew_compare

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = dew_compare([str(run), str(reference), "--format", "json"])
        report = json.loads(out.getvalue())
        return report["outcome"], status, report["headline"]
    except Exception as error:  # no verdict: what compare said, or why it could not
        lines = [line.strip() for line in err.getvalue().splitlines() if line.strip()]
        return "error", 2, lines[-1] if lines else cli.one_line(error)


def met(kind: str, status: int | None) -> bool:
    return status == 1 if kind == F32 else status in (0, 3)


def verdicts(records, specs, args: Args, out: Path, command: str, code) -> int:
    """Every ordered pair compared; the table printed and written to OUT/verdicts.md."""
    wanted = pairs()
    ready = [(a, b, kind) for a, b, kind in wanted if a in records and b in records]
    missing = [f"{a} against {b}" for a, b, kind in wanted if (a, b, kind) not in ready]
    if missing:
        absent = ", ".join(n for n in NAMES if n not in records)
        say(f"missing pairs (no record of {absent}): {', '.join(missing)}")
    results = {pair: compare(records[pair[0]], records[pair[1]]) for pair in ready}
    lines = [
        f"## Verdicts: {len(ready)} of {len(wanted)} ordered pairs through `dew compare`",
        "",
        f"Made by `{command}`, dew {code.commit or 'commit unknown'}"
        + (f" with a diff (sha256 {code.diff_sha256})" if code.dirty else "")
        + f"; preset {args.preset}, --repeats {args.repeats}, --compilation-cache-dir "
        f"{args.cache}.",
        "",
    ]
    for name in NAMES:
        if name not in records:
            lines.append(f"- {name}: no record")
            continue
        whole = complete(records[name].parent, specs[name], args.repeats)
        state = "complete" if whole else "partial"
        lines.append(f"- {name}: `{records[name]}` ({state}, {rows(records[name])}): "
                     f"`{load(records[name], name).command}`")  # fmt: skip
    lines += ["", "Each row: `dew compare RUN REFERENCE` (`python -m dew.commands compare`).", "",
              "| run | reference | expected | outcome | exit | met | headline |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    held = 0
    for pair in wanted:
        a, b, kind = pair
        outcome, status, headline = results.get(pair, ("missing", None, "no record to compare"))
        ok = met(kind, status)
        held += ok
        cells = [a, b, EXPECTED[kind], outcome, "—" if status is None else str(status),
                 "met" if ok else "**not met**", headline.replace("|", "\\|")]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"{held} of {len(wanted)} expectations met."]
    text = "\n".join(lines) + "\n"
    print(text, end="", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "verdicts.md").write_text(text)
    say(f"the table: {out / 'verdicts.md'}")
    return cli.EXIT_OK if held == len(wanted) else cli.EXIT_CHANGED


def say(line: str) -> None:
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
