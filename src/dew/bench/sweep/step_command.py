"""tools/benchmark_step.py: the step benchmark's command line.

    python tools/benchmark_step.py --preset small --architectures unet --json-out bench.json

Parse (tyro, through dew.bench.common.cli) -> the cases (dew.bench.sweep.presets) -> every check
that
concerns the whole run, before any case starts (dew.bench.sweep.preflight) -> the run
(dew.bench.sweep.run) -> the table (dew.bench.analysis.tables). Exit 0: every case ok; 1: a case
failed, or the record could not be written; 2: bad input, or a --json-out another run holds
(one run per record, dew.bench.common.files.one_writer, held from the checks to the end);
143 / 130: stopped by SIGTERM / SIGINT (dew.bench.common.errors.faults), in one line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import sys
from collections.abc import Sequence
from typing import Any, Literal

from dew import platforms
from dew.bench.common import cli
from dew.bench.common.arguments import check_xla_flags
from dew.bench.common.errors import faults
from dew.bench.common.files import check_apart, check_output_dir, check_output_file, one_writer
from dew.bench.runtime import hostprobe
from dew.bench.sweep import allocator, presets
from dew.bench.sweep.settings import CACHE_OFF, Options, append_xla_flags, case_log_dir

PROG = "tools/benchmark_step.py"  # as typed; `dew step` passes its own


@dataclasses.dataclass(frozen=True)
class Args(Options):
    """Time one compiled training step per architecture: ms/step, p10/p50/p90, GFLOP/step,
    util, peak memory, compile seconds. Exit 0: every case ok; 1: some failed; 2: usage."""

    architectures: tuple[str, ...] | None = None
    """run only the preset's cases of these architectures"""
    cases: str | None = None
    """JSON list of objects of Case fields replacing the preset's cases, e.g.
    '[{"architecture": "causal_transformer", "head_chunks": 1}]'"""
    step: str | None = None
    """MODULE:FACTORY, a training step of your own: FACTORY(batch=8) returns (step, state,
    batch[, state_sharding]), step jax.jit-wrapped; timed like dew's cases, after those
    --architectures or --cases name (alone: the only case; dew.bench.sweep.own_step)"""
    mesh: str | None = None  # type: ignore[assignment]  # JSON on the command line
    """JSON object of MeshSpec fields (data, fsdp, min_shard_size); default: the preset's"""
    json_out: str | None = None
    """the run's record, rewritten atomically after every row; an existing file needs
    --resume or --overwrite"""
    resume: bool = False
    """continue --json-out: keep its rows, run only the cases not ok in it yet"""
    overwrite: bool = False
    """replace an existing --json-out"""
    check_only: bool = False
    """check every flag and case (each model's config builds, a --step factory lowers), print
    the cases, and exit 0 without timing any: `nox -s ab` asks this before any image"""
    format: Literal["auto", "tsv", "md"] = "auto"
    """the table on stdout: auto is aligned to the terminal's width on a terminal (warnings
    as numbered notes) and the seed's tab-separated layout for a file or pipe; or Markdown"""
    idle_check: Literal["error", "warn", "off"] = "warn"
    """sample the host before measuring: refuse (error), warn, or skip the check"""
    lock_clocks: Literal["base", "max", "off"] = "off"
    """NVIDIA GPUs, as root: lock every card's SM and memory clocks (NVML) before the first
    case, to its base (TDP) or max clock, and reset them when the run ends (also on a
    failed write or SIGTERM / SIGINT), for comparing two runs; off: the published tables'
    way (dew.bench.sweep.locked_clocks)"""


def options_from(args: Args) -> tuple[Options, tuple[presets.Case, ...]]:
    """The run's Options and cases; what tyro cannot check raises UsageError."""
    cli.check_count("steps", args.steps, 1)
    check_repeats(args)
    cli.check_count("warmup", args.warmup, 0)
    check_xla_flags("--xla-flags", args.xla_flags)
    if args.case_timeout is not None and not 0 < args.case_timeout < float("inf"):  # NaN too
        raise cli.UsageError(
            f"--case-timeout {args.case_timeout:g} is not a number of seconds; give one above "
            "0, or leave it out for deadlines per phase (30 min to compile, 10 min to time)"
        )
    if args.compile_jobs is not None and args.compile_jobs < 1:
        raise cli.UsageError(
            f"--compile-jobs {args.compile_jobs} is not a number of parallel compiles; "
            "give 1 or more (1: each case compiled just before it is timed)"
        )
    if args.compile_jobs not in (None, 1) and not args.isolate:
        raise cli.UsageError(
            f"--compile-jobs {args.compile_jobs} needs each case in its own process; "
            "--no-isolate runs them all in this one"
        )
    if args.allocator == "tcmalloc" and not args.isolate:
        raise cli.UsageError(
            "--allocator tcmalloc is preloaded into each case's own process; "
            "--no-isolate runs them all in this one"
        )
    if args.resume and not args.json_out:
        raise cli.UsageError("--resume needs --json-out (the record to continue)")
    if args.resume and args.overwrite:
        raise cli.UsageError("--resume and --overwrite exclude each other")
    try:
        cases = presets.resolve(args.preset, args.architectures, args.cases, args.step)
        presets.check_registered(cases)  # a package that claims one of dew's names, in its line
    except ValueError as error:
        raise cli.UsageError(str(error)) from None
    mesh = dict(presets.get(args.preset).mesh)
    if args.mesh is not None:
        mesh.update(mesh_fields(args.mesh))
    shared = {field.name: getattr(args, field.name) for field in dataclasses.fields(Options)}
    shared["log_dir"] = case_log_dir(args.log_dir, args.json_out)  # beside the record
    return Options(**{**shared, "mesh": mesh}), cases


def check_repeats(args: Args) -> None:
    """--repeats N, or auto with a --target-mde and a cap that can reach a verdict."""
    from dew.bench.analysis.stats import MIN_REPEATS

    if args.repeats != "auto":
        if args.repeats < 1:
            raise cli.UsageError(f"--repeats must be at least 1 or auto (got {args.repeats})")
        cli.check_count("repeats", args.repeats, 1)
        if args.target_mde is not None:
            raise cli.UsageError("--target-mde needs --repeats auto (it decides when to stop)")
        return
    if args.target_mde is None:
        raise cli.UsageError("--repeats auto needs --target-mde PCT (the change to detect)")
    if not 0 < args.target_mde < 1000:  # a NaN fails this too
        raise cli.UsageError(f"--target-mde {args.target_mde:g} is not a percentage in (0, 1000)")
    if not MIN_REPEATS <= args.max_repeats <= 100:
        raise cli.UsageError(
            f"--max-repeats {args.max_repeats} with --repeats auto: give {MIN_REPEATS} to 100 "
            f"(a row is judged from {MIN_REPEATS} repeats on)"
        )
    if args.compile_only:
        raise cli.UsageError("--repeats auto times the cases; --compile-only times nothing")


def mesh_fields(text: str) -> dict[str, Any]:
    import pydantic

    from dew.train.mesh import MeshSpec

    try:
        fields = json.loads(text)
    except json.JSONDecodeError as error:
        raise cli.UsageError(f"--mesh is not valid JSON: {error}") from None
    valid = ", ".join(MeshSpec.model_fields)
    if not isinstance(fields, dict):
        raise cli.UsageError(
            f"--mesh must be a JSON object of MeshSpec fields ({valid}); got {text}"
        )
    for name in fields:
        if name not in MeshSpec.model_fields:
            raise cli.UsageError(f"--mesh: unknown MeshSpec field {name!r}; valid: {valid}")
    try:
        MeshSpec(**fields)
    except pydantic.ValidationError as error:
        raise cli.UsageError(f"--mesh: {cli.one_line(error)}") from None
    return fields


def compile_jobs(options: Options, platform: str, cases: int) -> tuple[Options, list[str]]:
    """--compile-jobs resolved for this host (dew.bench.sweep.waves): the platform's default
    (dew.platforms: `compile_jobs`), with a warning where several at once were never
    measured on it."""
    warnings = []
    jobs = options.compile_jobs
    unit = platforms.get(platform)
    if not options.isolate:
        jobs = 1
    elif jobs is None:
        jobs = unit.compile_jobs(hostprobe.cores(), cases)
    elif jobs > 1 and not unit.parallel_compiles:
        warnings.append(
            f"--compile-jobs {jobs} on {platform}: the compiles autotune concurrently on "
            "the one device (kernel choices may differ from a serial compile) and every "
            f"waiting case holds device memory; this was never measured on {unit.title}"
        )
    return dataclasses.replace(options, compile_jobs=jobs), warnings


def malloc(options: Options, platform: str | None) -> Options:
    """--allocator resolved (dew.bench.sweep.allocator): tcmalloc goes into LD_PRELOAD, which
    the case processes inherit and the record's environment flags keep; a run whose cases
    share this process (--no-isolate, a cluster: platform None) keeps the system's."""
    if platform is None and options.allocator == "tcmalloc":
        raise cli.UsageError(
            "--allocator tcmalloc: a multi-process run times the cases in the processes "
            "that joined the cluster; start those with LD_PRELOAD set instead"
        )
    library = None
    if options.isolate and platform is not None:
        try:
            library = allocator.resolve(options.allocator, platform)
        except ValueError as error:
            raise cli.UsageError(str(error)) from None
    if library is not None:
        allocator.preload(os.environ, library)
    return dataclasses.replace(options, allocator="tcmalloc" if library else "system")


def check_outputs(args: Args) -> list[str]:
    """Every path the run writes, before any work (an empty one is refused, not skipped);
    returns what to say once the record is this run's (its lock held)."""
    said = []
    if args.resume and args.json_out is not None and not os.path.lexists(args.json_out):
        # pyperf's --append and asv's continue the same way (a missing file is begun), so
        # a script may pass --resume every time; but the user hears it, never silently
        said.append(f"--resume: {args.json_out} does not exist yet; starting a new record there")
    if args.resume and args.json_out is not None and os.path.lexists(args.json_out):
        from dew.bench.sweep.run import read_previous

        read_previous(args.json_out)  # what --resume continues is a record: --check-only too
    if args.json_out is not None:
        check_output_file(
            args.json_out,
            flag="--json-out",
            overwrite=args.overwrite,
            resume=args.resume,
            may_resume=True,
        )
    if args.profile_dir is not None:
        check_output_dir(args.profile_dir, flag="--profile-dir")
    if args.compilation_cache_dir is not None and args.compilation_cache_dir != CACHE_OFF:
        check_output_dir(args.compilation_cache_dir, flag="--compilation-cache-dir")
    if args.log_dir == "":
        check_output_dir(args.log_dir, flag="--log-dir")
    logs = case_log_dir(args.log_dir, args.json_out)
    if logs:  # a rerun (--resume) adds its logs beside the earlier ones
        check_output_dir(logs, flag="--log-dir")
    cache = args.compilation_cache_dir if args.compilation_cache_dir != CACHE_OFF else None
    check_apart([
        ("--json-out", args.json_out, "file"),
        ("--log-dir", logs, "dir"),
        ("--profile-dir", args.profile_dir, "dir"),
        ("--compilation-cache-dir", cache, "dir"),
    ])  # fmt: skip
    return said


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """The CLI: parse, check, run every case, print the table; returns the exit code. `prog`
    is the command as typed, in its help, usage and error lines (`dew step`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    with contextlib.ExitStack() as held:  # the record's lock, released however the run ends
        return faults(prog, lambda: cli.run(prog, lambda: _main(argv, held, prog)))


def _main(argv: list[str], held: contextlib.ExitStack, prog: str) -> int:
    from dew.bench.analysis import tables as report
    from dew.bench.runtime import sockets
    from dew.bench.runtime.idle import HostNotIdle
    from dew.bench.runtime.progress import Progress
    from dew.bench.sweep import locked_clocks, own_step, preflight
    from dew.bench.sweep import run as step
    from dew.bench.sweep.run_record import RecordNotWritten
    from dew.train import distributed

    args = cli.parse(Args, argv, prog=prog)
    fmt = report.for_terminal(args.format)
    options, cases = options_from(args)
    said = check_outputs(args)
    preflight.check_cases(cases, options.preset)
    warnings: list[str] = []
    try:
        in_cluster = distributed.detect() is not None
    except distributed.DistributedSetupError as error:
        raise cli.UsageError(str(error)) from None
    locked_clocks.check(args.lock_clocks, in_cluster=in_cluster)

    def hold_record() -> None:
        """The record is this run's (its lock), then what check_outputs had to say of it."""
        held.enter_context(one_writer(args.json_out, flag="--json-out"))
        for line in said:
            log(line)

    if not in_cluster:  # one run per record; in a cluster process 0 locks it once joined
        hold_record()
    platform = identity = None  # a cluster's devices are known only once it is joined
    if not in_cluster:
        if options.isolate:  # no folder for the forkserver's socket: refused before any case
            sockets.for_multiprocessing()
        devices, warnings = preflight.prepare_environment(options, cases, log)
        own_step.check(cases, options)  # a wrong factory: refused before any case
        platform, identity = devices.platform, devices.for_record()
        options, more = compile_jobs(options, platform, len(cases))
        warnings += more
    if args.check_only:  # every check above passed: nothing is run
        print(f"{len(cases)} cases, each checked: {', '.join(case.label() for case in cases)}")
        return cli.EXIT_OK
    options = malloc(options, platform)
    if not options.isolate and options.xla_flags:
        # In-process cases: XLA reads its flags when the backend starts, which is later.
        append_xla_flags(os.environ, options.xla_flags)
    try:  # join the cluster the environment describes, before the backend starts
        cluster = distributed.initialize()
    except distributed.DistributedSetupError as error:
        raise cli.UsageError(str(error)) from None
    if cluster is not None:
        # A child per case cannot rejoin the runtime: cases run in the processes that joined.
        if options.isolate and options.xla_flags:
            append_xla_flags(os.environ, options.xla_flags)
        options = dataclasses.replace(options, isolate=False, compile_jobs=1)
    for line in warnings:
        log(f"warning: {line}")
    leader = distributed.process_index() == 0
    if in_cluster and leader:
        hold_record()
    # Only process 0 of a multi-process run draws; the others write nothing.
    progress = Progress([case.label() for case in cases]) if leader else None
    lock = locked_clocks.held(args.lock_clocks, platform, json_out=args.json_out, log=log)
    try:
        with lock as clocks, progress or contextlib.nullcontext():
            record = step.run(
                options,
                cases,
                json_out=args.json_out,
                resume=args.resume,
                command=shlex.join(["python", "tools/benchmark_step.py", *argv]),
                idle_check=args.idle_check,
                warnings=warnings,
                log=progress.note if progress else log,
                progress=progress,
                locked_clocks=clocks,
                identity=identity,
            )
    except HostNotIdle as refusal:  # its text begins "error: ", which say() writes itself
        cli.say(prog, str(refusal).removeprefix("error: "))
        return cli.EXIT_CHANGED
    except RecordNotWritten as failure:  # what the record could not take: on stdout
        print(report.step_table(failure.rows, fmt, compile_only=options.compile_only), end="")
        raise
    if leader:  # process 0 prints the table for the run
        rows = [row for row in record.rows if row.key() in {case.key() for case in cases}]
        print(report.step_table(rows, fmt, compile_only=options.compile_only), end="")
        print(report.phase_totals(rows, "md" if fmt == "terminal" else fmt), end="")
    return step.exit_code(record, cases)
