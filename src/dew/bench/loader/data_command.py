"""The loader benchmark: how fast a dataset spec's grain pipeline delivers batches, and
whether that keeps up with the step benchmark's models.

Timing: the first batch is timed from the start (source checks, worker start-up included)
as first_batch_s; `warmup` batches (the first among them) are not otherwise timed; then
`steps` batches are, each as the time since the previous one. samples/s is
steps x batch / the window; p50 and p95 are of the per-batch times. With workers the p50 is
often a queue read: the loader then shows in the p95. Every row keeps its raw samples (the
per-batch intervals, one `DataRepeat` per process) and its 95% interval
(dew.bench.analysis.repeats).

--repeats N measures the configuration in N fresh processes in a row
(dew.bench.loader.measure.measure_in_child: its job, notices and row over
dew.bench.runtime.protocol; a repeat past 30 min is killed with its workers and fails the
run in one line), each with its own worker start-up; the row's figures are then medians
over the N with their interval and noise warnings. The step tool interleaves its cases
round-robin; this tool measures one configuration per invocation, so its rounds are just
the N processes one after another. With N = 1 it measures in this process, as before.

Before measuring, the idle-host check of the step tool (dew.bench.runtime.idle, --idle-check
error|warn|off; its readings are the record's idle_check); with repeats, a 1 s reading
before each repeat after the first marks that repeat `host_busy` when the host was busy.
Just before every repeat (the one in this process too) the host-speed probe
(dew.bench.runtime.hostprobe, ~0.3 s) is taken and kept as the repeat's `host_probe_ms`: compare
holds a change between two records against the host's own drift between them.

A record that cannot be read or decoded stops the run with its index (exit status 2, one
line on stderr), rather than being skipped: a figure over silently dropped records would
time less work than it claims.

Everything a user can get wrong is refused in one line (`tools/benchmark_data.py: error: ...`,
exit 2) before the measurement: the flags, --json-out (an existing file is replaced only
with --overwrite, an input never), --against (a step record), and --data.path (a prepared
directory of the dataset the subcommand names, so a row is never labelled with another
dataset's name), and a --json-out another run holds (one run per record). A record that
cannot be written (a full disk) is one line and exit 1, the row already on stdout; SIGTERM
or SIGINT one line and exit 143 or 130, the repeats' processes ended, nothing written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

import pydantic
import tyro

from dew.bench.analysis.kinds import KINDS
from dew.bench.analysis.repeats import with_host_readings
from dew.bench.common import cli
from dew.bench.common.cli import UsageError
from dew.bench.common.errors import Interrupted, WriteFailed, faults
from dew.bench.common.files import check_input_file, check_output_file, one_writer
from dew.bench.loader.measure import (
    RepeatFailed,
    measure_in_child,
    measure_loader,
    print_notice,
)
from dew.bench.record.schema import (
    SCHEMA_VERSION,
    BenchmarkRun,
    DataRow,
    Settings,
    StepRow,
    read_run,
    write_run,
)
from dew.bench.runtime import hostprobe
from dew.data.spec import DATASETS, OxfordFlowers, SyntheticImages

PROG = "tools/benchmark_data.py"  # as typed; `dew data` passes its own


# --- repeats: each a fresh process -------------------------------------------------------------


def measure_repeats(args: Args, *, notify=print_notice) -> DataRow:
    """The configuration's row over `args.repeats` processes (this one when 1, unless
    --case-timeout: a deadline needs a process it can end)."""
    if args.repeats == 1 and args.case_timeout is None:
        probe = hostprobe.measure()
        row = measure_loader(args.data, args.batch, args.steps, args.warmup, notify=notify)
        return with_host_readings(row, None, probe)
    rows = []
    for index in range(1, args.repeats + 1):
        busy, load = _busy(args.idle_check) if index > 1 else (None, None)
        probe = hostprobe.measure()  # after the idle reading, right before the repeat
        # The notices (capped workers) are the same in every process: shown once.
        try:
            row = measure_in_child(
                args.data,
                args.batch,
                args.steps,
                args.warmup,
                notify=notify if index == 1 else lambda line: None,
                timeout_s=args.case_timeout,
            )
        except RepeatFailed as error:
            raise RepeatFailed(f"repeat {index} of {args.repeats}: {error}") from None
        row = with_host_readings(row, busy, probe, load)
        notify(
            f"repeat {index}/{args.repeats}: {row.samples_per_s:.1f} samples/s, "
            f"first batch {row.first_batch_s:.2f} s"
        )
        rows.append(row)
    return KINDS["data"].summarize(rows[0], [r for row in rows for r in row.repeats or []])


def _busy(mode: str) -> tuple[str | None, float | None]:
    """Why the host is busy now (a 1 s reading; None: idle) and the cores other processes
    used; never read with --idle-check off."""
    from dew.bench.runtime import idle

    return idle.busy_and_load(None if mode == "off" else idle.sample("warn", window_s=1.0))


def _spatial(sample: str | None) -> tuple[int, int] | None:
    """(height, width) of a step row's sample, "64x64x3" or "16x64x64x3" (frames first)."""
    if not sample or not re.fullmatch(r"\d+(x\d+)+", sample):
        return None
    dims = [int(d) for d in sample.split("x")]
    return (dims[-3], dims[-2]) if len(dims) >= 3 else None


def keep_up_verdicts(row: DataRow, step_run: BenchmarkRun) -> list[str]:
    """One line per step row: does the loader deliver the samples/s this model consumes?

    Compared only at the loader's image size; a video sample (frames first) counts as one
    sample, as the step table counts it.
    """
    lines = []
    for step in step_run.rows:
        if not isinstance(step, StepRow):
            continue
        name = f"{step.label():<24} {step.sample or '?':>14}"
        if step.status != "ok" or not step.samples_per_s:
            lines.append(f"{name}  no samples/s in the step results ({step.status})")
            continue
        if _spatial(step.sample) is None:
            lines.append(f"{name}  not compared: its samples are not images")
            continue
        if _spatial(step.sample) != (row.image_size, row.image_size):
            lines.append(
                f"{name}  not compared: the loader ran at {row.image_size} px "
                f"(rerun with --data.image-size to match)"
            )
            continue
        ratio = row.samples_per_s / step.samples_per_s
        verdict = "keeps up" if ratio >= 1 else "starves the model"
        lines.append(
            f"{name}  step {step.samples_per_s:9.1f} samples/s  loader {row.samples_per_s:9.1f}"
            f" samples/s  {verdict} ({ratio:.2f}x)"
        )
    return lines


DatasetChoice = (
    Annotated[OxfordFlowers, tyro.conf.subcommand(OxfordFlowers.name)]
    | Annotated[SyntheticImages, tyro.conf.subcommand(SyntheticImages.name)]
)


@dataclasses.dataclass(frozen=True)
class Args:
    """Time a dataset's input pipeline on its own (no model)."""

    data: DatasetChoice
    batch: int = 8
    steps: int = 100
    """timed batches."""
    warmup: int = 5
    """batches read before timing (the first is timed apart as first_batch_s)."""
    json_out: Path | None = None
    """write the run (schema BenchmarkRun, kind data) here, atomically."""
    overwrite: bool = False
    """replace an existing --json-out (else it is refused: a record is never lost)."""
    against: Path | None = None
    """a step-benchmark results file: print per architecture whether the loader keeps up."""
    repeats: int = 1
    """fresh processes measuring this configuration, one after another; the row is the
    median over them with its 95% interval (1: this process, no child)."""
    idle_check: Literal["error", "warn", "off"] = "warn"
    """sample the host before measuring: refuse (error), warn, or skip the check"""
    case_timeout: float | None = None
    """seconds a repeat's process may take before it is killed and the run fails (a
    repeat in its own process even with --repeats 1); default: 30 min and more for many
    batches (dew.bench.loader.measure.repeat_deadline)"""


def parse_args(argv: list[str], prog: str = PROG) -> Args:
    """tyro's parse of the seed's syntax plus what tyro cannot check; bad input raises
    cli.UsageError (one line, flags spelled as typed)."""
    subcommands = [f"data:{name}" for name in DATASETS]
    for token in argv:  # tyro reports an unknown subcommand as an unrecognized argument
        if token.startswith("data:") and token not in subcommands:
            raise UsageError(f"unknown dataset {token!r}; valid: {', '.join(subcommands)}")
    args = cli.parse(Args, argv, prog=prog, config=(tyro.conf.CascadeSubcommandArgs,))
    for name, value, least in (
        ("batch", args.batch, 1),
        ("steps", args.steps, 1),
        ("warmup", args.warmup, 0),
        ("repeats", args.repeats, 1),
    ):
        cli.check_count(name, value, least)
    if args.case_timeout is not None and not 0 < args.case_timeout < float("inf"):  # NaN too
        raise UsageError(
            f"--case-timeout {args.case_timeout:g} is not a number of seconds; give one above "
            "0, or leave it out for the default deadline (30 min a repeat)"
        )
    try:
        args.data.check()
    except ValueError as error:  # the spec's checks name the flag (--data.image-size)
        raise UsageError(str(error)) from None
    return args


def check_outputs_and_inputs(args: Args) -> BenchmarkRun | None:
    """Before any measurement: --json-out may be written, --against is a step record.
    Returns the step record (None without --against); changes nothing."""
    if args.json_out is not None:
        check_output_file(
            args.json_out, flag="--json-out", overwrite=args.overwrite, inputs=(args.against,)
        )
    if args.against is None:
        return None
    return read_step_record(args.against)


def read_step_record(path: Path) -> BenchmarkRun:
    """The step record --against names, or a UsageError naming the file and the problem."""
    where = f"--against {path}"
    check_input_file(path, flag="--against")
    try:
        text = path.read_bytes().decode()
    except UnicodeDecodeError:
        raise UsageError(f"{where} is not a results record (a binary file, not JSON)") from None
    except OSError as error:
        raise UsageError(f"{where}: {cli.one_line(error)}") from None
    try:
        json.loads(text)
    except ValueError as error:
        raise UsageError(f"{where} is not a results record (not JSON: {error})") from None
    try:
        record = read_run(path)
    except pydantic.ValidationError as error:
        raise UsageError(f"{where} is not a results record: {cli.one_line(error)}") from None
    if record.kind != "step":
        raise UsageError(
            f"{where} is a {record.kind!r} record (tools/benchmark_{record.kind}.py); "
            "give a step record (tools/benchmark_step.py --json-out)"
        )
    return record


def _load_average() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "load average unavailable"
    return f"load average at start {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def run(args: Args, argv: list[str], prog: str = PROG) -> int:
    """Measure, print, write the record, give the verdict; bad input raises UsageError."""
    step_run = check_outputs_and_inputs(args)
    with one_writer(args.json_out, flag="--json-out"):  # one run per record, until written
        return measure_and_write(args, argv, step_run, prog)


def measure_and_write(
    args: Args, argv: list[str], step_run: BenchmarkRun | None, prog: str = PROG
) -> int:
    from dew.bench.runtime import idle
    from dew.data.pipeline import make_source  # grain and JAX: past every check of input

    load = _load_average()
    try:
        make_source(args.data)  # its directory, shards and split: refused before sampling
        check = idle.guard(args.idle_check)
        row = measure_repeats(args)
    except Interrupted as stop:  # the repeats' children are killed on the way out
        stop.message = "interrupted before the row was measured; nothing written"
        raise
    except ValueError as error:  # DataError included: one line naming the file or record
        raise UsageError(str(error)) from None
    except idle.HostNotIdle as refusal:  # one line; nothing measured, nothing written
        cli.say(prog, str(refusal).removeprefix("error: "))
        return cli.EXIT_CHANGED
    except RepeatFailed as error:
        cli.say(prog, str(error))
        return cli.EXIT_CHANGED
    print(result_line(row, load))
    for warning in row.warnings:
        print(f"  warning: {warning}")
    if args.json_out is not None:
        write_record(args, argv, row, load, check)
    if step_run is not None:
        print(f"does the loader keep up? (against {args.against})")
        for line in keep_up_verdicts(row, step_run):
            print("  " + line)
    return cli.EXIT_OK


def result_line(row: DataRow, load: str) -> str:
    """The row in one line; its 95% interval and the number of repeats when more than one."""
    speed = f"{row.samples_per_s:.1f} samples/s"
    if row.repeats and len(row.repeats) > 1 and row.samples_per_s_ci95:
        low, high = row.samples_per_s_ci95
        speed += f" [{low:.1f}, {high:.1f}] (median of {len(row.repeats)} repeats)"
    return (
        f"{row.dataset} batch {row.batch} at {row.image_size} px, workers {row.workers}, "
        f"threads {row.threads}: {speed}, p50 {row.p50_ms:.2f} ms, p95 {row.p95_ms:.2f} ms, "
        f"first batch {row.first_batch_s:.2f} s ({load})"
    )


def write_record(args: Args, argv: list[str], row: DataRow, load: str, check=None) -> None:
    from dew.bench.record.capture import capture

    record = BenchmarkRun(
        schema_version=SCHEMA_VERSION,
        kind="data",
        created=datetime.now(UTC),
        command=shlex.join(["tools/benchmark_data.py", *argv]),
        settings=Settings(
            repeats=args.repeats,
            steps=args.steps,
            warmup=args.warmup,
            loader=args.data.model_dump(mode="json") | {"name": args.data.name},
        ),
        environment=capture(),
        idle_check=check,
        rows=[row],
        note=load,
    )
    try:
        write_run(args.json_out, record)  # atomic: the old file or the new one, never half
    except OSError as error:  # checked writable before the measurement; a full disk is not
        kept = f"{args.json_out} is as it was; the row's figures are on stdout"
        raise WriteFailed(args.json_out, error, kept) from None
    print(f"wrote {args.json_out}")


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """`prog` is the command as typed, in its help, usage and error lines (`dew data`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return faults(prog, lambda: cli.run(prog, lambda: run(parse_args(argv, prog), argv, prog)))


if __name__ == "__main__":
    sys.exit(main())
