"""The step benchmark: one compiled training step per case, timed the way DESIGN.md defines.

For each case: the Trainer -> ahead-of-time compile (timed) -> FLOPs from the optimized
HLO (dew.telemetry) -> warmup -> dispatch window (ms/step: `steps` steps back to back, one
block at the end) -> synced window of the same length (p10/p50/p90: a block after every
step) -> allocator peak -> one `StepRow`. The run record (environment + rows) is validated
and written atomically after every row, so a crash or a `kill -9` loses at most the case
that was running, and `--resume` reruns only what is not `ok` yet.

With `isolate` each case runs in its own child process (`python -m dew.bench.step`): the
allocator peak then belongs to that row alone, and a crash, an abort or RESOURCE_EXHAUSTED
fails that row only. The parent never initialises a JAX backend, so it holds no device
memory the children need.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from dew.bench import cli, report
from dew.bench import presets as presets_module
from dew.bench.cli import UsageError
from dew.bench.presets import Case
from dew.bench.schema import SCHEMA_VERSION, BenchmarkRun, Settings, StepRow, read_run, write_run

GIB = 1024**3
ROW_MARKER = "DEW_STEP_ROW "  # prefix of the line a child prints its row on
COMPILED_MARKER = "DEW_STEP_COMPILED "  # ... and the figures it had after the compile
LM_OBJECTIVES = ("lm", "block_diffusion")  # cases whose samples are token sequences
PROFILE_STEPS = 3  # extra steps traced with --profile-dir, after the timed windows
CACHE_OFF = "off"  # --compilation-cache-dir off: compile every case from scratch


@dataclasses.dataclass(frozen=True)
class Options:
    """Settings shared by every case of a run (the CLI's flags, less the case selection)."""

    preset: str = "small"
    steps: int = 100
    warmup: int = 2
    dtype: Literal["bfloat16", "float32"] = "bfloat16"
    mesh: dict[str, Any] = dataclasses.field(default_factory=dict)
    compile_only: bool = False
    isolate: bool = True
    xla_flags: str | None = None
    compilation_cache_dir: str | None = None
    attention_impl: Literal["xla", "cudnn", "auto"] | None = None
    profile_dir: str | None = None


# --- the timing loop ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Timings:
    ms_per_step: float  # dispatch window: total / steps
    synced_ms: tuple[float, ...]  # synced window: one figure per step


def block(tree: Any) -> Any:
    import jax

    return jax.block_until_ready(tree)


def time_steps(
    step: Callable[[Any, Any], tuple[Any, Any]],
    state: Any,
    batch: Any,
    *,
    steps: int,
    warmup: int,
) -> tuple[Any, Any, Timings]:
    """THE timing loop: warmup, dispatch window, synced window. Returns (state, metrics, t).

    `step(state, batch) -> (state, metrics)` may donate `state`; it is threaded through.
    Nothing but the step call runs inside the dispatch window, so the figure is what a
    training loop that dispatches ahead sees.
    """
    metrics = None
    for _ in range(warmup):
        state, metrics = step(state, batch)
    block((state, metrics))

    start = time.perf_counter()
    for _ in range(steps):
        state, metrics = step(state, batch)
    block((state, metrics))
    ms_per_step = (time.perf_counter() - start) * 1e3 / steps

    synced = []
    for _ in range(steps):
        start = time.perf_counter()
        state, metrics = step(state, batch)
        block((state, metrics))
        synced.append((time.perf_counter() - start) * 1e3)
    return state, metrics, Timings(ms_per_step, tuple(synced))


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method), without numpy."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# --- one case, in this process --------------------------------------------------------------


def row_identity(case: Case) -> dict[str, Any]:
    """The row fields that identify a case (what --resume matches on)."""
    extra: dict[str, Any] = {"batch": case.batch}
    if case.moe:
        extra["moe"] = True
    if case.condition_in_state is not None:
        extra["condition_in_state"] = case.condition_in_state
    for name, value in sorted(case.model.items()):
        extra[f"model.{name}"] = value if _is_scalar(value) else json.dumps(value)
    return {
        "architecture": case.architecture,
        "head_chunks": case.head_chunks,
        "attention_impl": case.attention_impl,
        "case": extra,
    }


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def one_line(error: BaseException) -> str:
    """An error as one line: type and first line of the message (XLA's run to pages)."""
    import pydantic

    if isinstance(error, pydantic.ValidationError) and error.errors():
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        message = first["msg"].removeprefix("Value error, ")  # pydantic's wrapper of a raise
        text = f"invalid {error.title}{'.' + where if where else ''}: {message}"
    else:
        message = str(error).strip().splitlines()
        text = f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
    return text if len(text) <= 400 else text[:397] + "..."


@dataclasses.dataclass
class Prepared:
    """A case built and compiled, ready to step."""

    case: Case
    trainer: Any
    state: Any
    batch: Any
    figures: dict[str, Any]  # row fields known after the compile
    tokens_per_sample: int | None


def model_config(case: Case, options: Options):
    """The case's model config: the config class's preset named like the benchmark preset,
    with the case's settings (ValueError naming a setting that does not apply). The Trainer
    applies dtype and attention_impl itself."""
    from dew.models import registry

    architecture = registry.get(case.architecture)
    fields = architecture.config_cls.model_fields
    unknown = sorted(set(case.model) - set(fields))
    if unknown:
        raise ValueError(
            f"unknown {architecture.config_cls.__name__} field {unknown[0]!r}; "
            f"valid: {', '.join(sorted(fields))}"
        )
    overrides = dict(case.model)
    if case.head_chunks is not None:
        if "head_chunks" not in fields:
            raise ValueError(f"head_chunks does not apply to {case.architecture}")
        overrides["head_chunks"] = case.head_chunks
    if case.moe:
        overrides.update(moe_overrides(case.architecture, architecture.config_cls))
    return architecture.config_cls.preset(options.preset, **overrides)


def moe_overrides(name: str, config_cls) -> dict[str, Any]:
    """The config fields that make an architecture's MoE case (the decoder's: 8 experts,
    top-2, on every second layer), from the config's own `moe_case` when it defines one."""
    settings = getattr(config_cls, "moe_case", None)
    if settings is None:
        raise ValueError(f"{name} has no MoE case (its config defines no moe_case)")
    return dict(settings)


def sample_label(config) -> str:
    """The table's sample column: "64x64x3", "8x64x64x3" or "512 tokens"."""
    seq_len = getattr(config, "seq_len", None)
    if seq_len is not None:
        return f"{seq_len} tokens"
    from dew.train.objectives import sample_shape

    return "x".join(str(n) for n in sample_shape(config))


def prepare(case: Case, options: Options, figures: dict[str, Any]) -> Prepared:
    """Build the Trainer for a case and compile its step; fills `figures` as it learns them
    (so a failure later in the case still reports what was measured)."""
    from dew.telemetry.instrumentation import cost_analysis_flops
    from dew.telemetry.memory import compiler_memory
    from dew.train.mesh import MeshSpec
    from dew.train.trainer import DEFAULT_CACHE, Trainer

    config = model_config(case, options)
    figures["sample"] = sample_label(config)
    figures["batch"] = case.batch
    cache = options.compilation_cache_dir or DEFAULT_CACHE
    trainer = Trainer(
        case.architecture,
        config,
        preset=options.preset,
        dtype=options.dtype,
        mesh=MeshSpec(**options.mesh),
        condition_in_state=bool(case.condition_in_state),
        compilation_cache_dir=None if cache == CACHE_OFF else cache,
        attention_impl=case.attention_impl or options.attention_impl or "xla",
    )
    counts = trainer.param_counts
    figures["params"] = counts["backbone"] + counts["condition"]
    figures["condition_params"] = counts["condition"]
    host_batch = trainer.example_batch(case.batch)
    compiled = trainer.compile(host_batch)
    figures["compile_s"] = trainer.compile_seconds
    figures["gflop_per_step"] = trainer.flops / 1e9
    cost = cost_analysis_flops(compiled)
    figures["cost_analysis_gflop"] = cost / 1e9 if cost is not None else None
    peak = compiler_memory(compiled)["peak_bytes"]
    figures["compiler_peak_gib"] = peak / GIB if peak is not None else None
    tokens = getattr(config, "seq_len", None) if config.objective in LM_OBJECTIVES else None
    if options.compile_only:
        return Prepared(case, trainer, None, None, figures, tokens)
    return Prepared(case, trainer, trainer.init(), trainer.put_batch(host_batch), figures, tokens)


def measure(prepared: Prepared, options: Options, figures: dict[str, Any]) -> dict[str, Any]:
    """Time a prepared case and return the row's measured fields (merged into `figures`)."""
    import jax

    from dew.telemetry.instrumentation import mfu
    from dew.telemetry.memory import peak_bytes_in_use

    state, metrics, timings = time_steps(
        prepared.trainer.step,
        prepared.state,
        prepared.batch,
        steps=options.steps,
        warmup=options.warmup,
    )
    batch = prepared.case.batch
    step_s = timings.ms_per_step / 1e3
    figures["ms_per_step"] = timings.ms_per_step
    figures["p10_ms"] = percentile(timings.synced_ms, 10)
    figures["p50_ms"] = percentile(timings.synced_ms, 50)
    figures["p90_ms"] = percentile(timings.synced_ms, 90)
    figures["samples_per_s"] = batch / step_s
    if prepared.tokens_per_sample:
        figures["tokens_per_s"] = batch * prepared.tokens_per_sample / step_s
    devices = list(prepared.trainer.mesh.devices.flat)
    flops = figures.get("gflop_per_step")  # per device, like the peak it is divided by
    kind = devices[0].device_kind
    figures["util"] = mfu(flops * 1e9 if flops is not None else None, step_s, kind)
    peaks = [peak_bytes_in_use(d) for d in devices if d.process_index == jax.process_index()]
    figures["peak_gib"] = max(peaks) / GIB if None not in peaks else None
    loss = float(metrics["train/loss"])
    figures["loss"] = loss if math.isfinite(loss) else None
    figures["loss_finite"] = math.isfinite(loss)
    if not math.isfinite(loss):  # the timing stands; the row says the model diverged
        figures["note"] = f"the final loss is {loss}"

    if options.profile_dir:
        directory = Path(options.profile_dir) / _case_label(prepared.case)
        with jax.profiler.trace(str(directory)):
            for _ in range(PROFILE_STEPS):
                state, metrics = prepared.trainer.step(state, prepared.batch)
            block((state, metrics))
    prepared.state = state
    return figures


def run_case(
    case: Case, options: Options, on_compiled: Callable[[dict[str, Any]], None] | None = None
) -> StepRow:
    """One case in this process: a row, `ok` or `failed` with a one-line error.

    `on_compiled(figures)` is called once the step is compiled, with what is known then.
    """
    figures: dict[str, Any] = {}
    try:
        prepared = prepare(case, options, figures)
        if on_compiled is not None:
            on_compiled(dict(figures))
        if not options.compile_only:
            measure(prepared, options, figures)
    except Exception as error:
        return _row(case, figures, status="failed", error=one_line(error))
    return _row(case, figures, status="ok")


def _row(case: Case, figures: dict[str, Any], **status: Any) -> StepRow:
    fields = {**row_identity(case), **figures, **status}
    try:
        return StepRow(**fields)
    except Exception as error:  # a figure out of range: keep the row, say why
        keep = {k: v for k, v in fields.items() if k in row_identity(case)}
        return StepRow(**keep, status="failed", error=f"invalid row: {one_line(error)}")


def _case_label(case: Case) -> str:
    parts = [case.architecture]
    parts += [f"{k}={v}" for k, v in sorted(row_identity(case)["case"].items()) if k != "batch"]
    if case.head_chunks:
        parts.append(f"head_chunks={case.head_chunks}")
    if case.attention_impl:
        parts.append(case.attention_impl)
    return "-".join(str(p).replace("/", "_") for p in parts)


# --- one case, in a child process -----------------------------------------------------------


def child_environment(options: Options) -> dict[str, str]:
    env = dict(os.environ)
    if options.xla_flags:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {options.xla_flags}".strip()
    return env


def _die_with_parent(parent_pid: int) -> None:
    """A `kill -9` of the sweep must not leave a child computing (and holding the GPU).

    Called by the child itself, first thing: no preexec_fn, which would fork a parent that
    may already run threads.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the child outlives a killed parent
        return
    if os.getppid() != parent_pid:  # the parent died before the call above
        os._exit(1)


def run_case_isolated(case: Case, options: Options) -> StepRow:
    """One case in a child process; a crash of the child is a failed row, not a failed run."""
    job = json.dumps(
        {
            "case": case.model_dump(),
            "options": dataclasses.asdict(options),
            "parent_pid": os.getpid(),
        }
    )
    process = subprocess.run(
        [sys.executable, "-m", "dew.bench.step"],
        input=job,
        capture_output=True,
        text=True,
        env=child_environment(options),
    )
    compiled: dict[str, Any] = {}
    for line in process.stdout.splitlines():
        if line.startswith(ROW_MARKER):
            return StepRow.model_validate_json(line[len(ROW_MARKER) :])
        if line.startswith(COMPILED_MARKER):
            compiled = json.loads(line[len(COMPILED_MARKER) :])
    if process.returncode < 0:
        error = f"the case's process died of {signal.Signals(-process.returncode).name}"
    else:
        error = f"the case's process exited {process.returncode}"
    last = [line for line in process.stderr.splitlines() if line.strip()]
    if last:
        error += f": {last[-1].strip()[:300]}"
    # The process died mid-case: keep what it measured before (params, GFLOP, compile s).
    return _row(case, compiled, status="failed", error=error)


def child_main() -> int:
    """Entry of the child process: a job on stdin, the row on stdout after ROW_MARKER."""
    job = json.loads(sys.stdin.read())
    _die_with_parent(job["parent_pid"])
    options = Options(**job["options"])
    if options.xla_flags and options.xla_flags not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {options.xla_flags}"

    def report_compiled(figures: dict[str, Any]) -> None:
        sys.stdout.write("\n" + COMPILED_MARKER + json.dumps(figures) + "\n")
        sys.stdout.flush()

    row = run_case(Case.model_validate(job["case"]), options, on_compiled=report_compiled)
    sys.stdout.write("\n" + ROW_MARKER + row.model_dump_json() + "\n")
    sys.stdout.flush()
    return 0


# --- the run ---------------------------------------------------------------------------------


def settings_record(options: Options, cases: Sequence[Case]) -> Settings:
    return Settings(
        preset=options.preset,
        architectures=sorted({case.architecture for case in cases}),
        cases=[case.model_dump(exclude_defaults=True) for case in cases],
        steps=options.steps,
        warmup=options.warmup,
        dtype=options.dtype,
        mesh=options.mesh,
        optimizer="adam",
        isolate=options.isolate,
        compile_only=options.compile_only,
        options={
            "xla_flags": options.xla_flags,
            "compilation_cache_dir": options.compilation_cache_dir,
            "attention_impl": options.attention_impl,
            "profile_dir": options.profile_dir,
        },
    )


def check_idle(mode: str, *, skip: bool):
    """The idle-host readings (dew.bench.idle); raises HostNotIdle in mode "error".

    A compile-only run measures no time, so it does not wait for the host to be quiet.
    """
    from dew.bench import idle

    return idle.guard("off" if skip else mode)


def previous_rows(json_out: str | None) -> dict[tuple, StepRow]:
    """The `ok` rows of an earlier run written to `json_out` (for --resume), by case key."""
    if not json_out or not Path(json_out).exists():
        return {}
    record = read_run(json_out)
    return {row.case_key(): row for row in record.rows if row.status == "ok"}


def progress_line(index: int, total: int, row: StepRow, seconds: float) -> str:
    head = f"[{index}/{total}] {report.case_label(row)}: {row.status}"
    if row.status != "ok":
        return f"{head} ({seconds:.1f} s): {row.error}"
    parts = []
    if row.ms_per_step is not None:
        parts.append(f"{report.num(row.ms_per_step, 2)} ms/step")
    if row.gflop_per_step is not None:
        parts.append(f"{report.num(row.gflop_per_step)} GFLOP")
    if row.compile_s is not None:
        parts.append(f"compile {row.compile_s:.1f} s")
    return f"{head} ({seconds:.1f} s) " + ", ".join(parts)


def run(
    options: Options,
    cases: Sequence[Case],
    *,
    json_out: str | None = None,
    resume: bool = False,
    command: str | None = None,
    idle_check: str = "off",
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> BenchmarkRun:
    """Run every case; write the record after every row; return the final record."""
    done = previous_rows(json_out) if resume else {}
    from dew.bench import multihost
    from dew.bench.environment import capture
    from dew.train.distributed import process_count, process_index

    # Several processes (dew.train.distributed): every one runs every case in-process and
    # times it; rows combine across processes; only process 0 writes and logs.
    processes = process_count()
    leader = process_index() == 0
    environment = capture(processes=multihost.process_table() if processes > 1 else None)
    idle = check_idle(idle_check, skip=options.compile_only)
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "step",
        "created": datetime.now(UTC),
        "command": command,
        "settings": settings_record(options, cases),
        "environment": environment,
        "idle_check": idle,
        "rows": [],
    }
    rows: list[StepRow] = []
    for index, case in enumerate(cases, start=1):
        key = StepRow(**row_identity(case), status="ok").case_key()
        start = time.perf_counter()
        if key in done:
            row = done[key]
        else:
            row = run_case_isolated(case, options) if options.isolate else run_case(case, options)
            if processes > 1:
                row = multihost.gather_row(row, f"row/{index}")
        rows.append(row)
        record["rows"] = rows
        if processes > 1:  # a run cut short by a dead process must not read as complete
            partial = multihost.PARTIAL_NOTE.format(done=index, total=len(cases))
            record["note"] = None if index == len(cases) else partial
        if json_out and leader:  # on disk before anything else can go wrong
            write_run(json_out, record)
        if not leader:
            continue
        if key in done:
            log(f"[{index}/{len(cases)}] {report.case_label(row)}: ok in {json_out}, skipped")
        else:
            log(progress_line(index, len(cases), row, time.perf_counter() - start))
    return BenchmarkRun.model_validate(record)


def exit_code(record: BenchmarkRun) -> int:
    return 0 if all(row.status == "ok" for row in record.rows) else 1


def command_line(argv: Sequence[str]) -> str:
    return shlex.join(["python", *argv])


def resolve_cases(
    preset_name: str, architectures: Sequence[str], cases_json: str | None
) -> tuple[Case, ...]:
    """The cases a run covers, from --preset, --architectures and --cases (ValueError: usage)."""
    preset = presets_module.get(preset_name)
    if cases_json is not None:
        try:
            objects = json.loads(cases_json)
        except json.JSONDecodeError as error:
            raise ValueError(f"--cases is not valid JSON: {error}") from None
        cases = presets_module.merge_cases(preset, objects)
        if architectures:
            keep = set(presets_module.select(preset, list(architectures)))
            keep_names = {case.architecture for case in keep}
            cases = tuple(case for case in cases if case.architecture in keep_names)
        return cases
    if architectures:
        return presets_module.select(preset, list(architectures))
    return preset.cases


# --- the command line -------------------------------------------------------------------------


@dataclasses.dataclass
class Args:
    """Time one compiled training step per architecture: ms/step, p10/p50/p90, GFLOP/step,
    util, peak memory, compile seconds. Exit 0: every case ok; 1: some failed; 2: usage."""

    preset: Literal["small", "cpu-smoke"] = "small"
    """which cases to run (dew.bench.presets)"""
    architectures: tuple[str, ...] = ()
    """run only the preset's cases of these architectures"""
    cases: str | None = None
    """JSON list of objects of Case fields replacing the preset's cases, e.g.
    '[{"architecture": "causal_transformer", "head_chunks": 1}]'"""
    steps: int = 100
    """steps in each timed window (>= 1)"""
    warmup: int = 2
    """untimed steps before the windows"""
    dtype: Literal["bfloat16", "float32"] = "bfloat16"
    """compute dtype (parameters and optimizer state stay float32)"""
    mesh: str | None = None
    """JSON object of MeshSpec fields (data, fsdp, min_shard_size); default: the preset's"""
    json_out: str | None = None
    """the run's record, rewritten atomically after every row"""
    compile_only: bool = False
    """params, GFLOP, cost_analysis GFLOP, compile s and the compiler's memory estimate only"""
    isolate: bool = True
    """each case in its own process (its own peak memory; a crash fails that row only)"""
    resume: bool = False
    """skip the cases already ok in --json-out"""
    xla_flags: str | None = None
    """appended to XLA_FLAGS for the cases"""
    compilation_cache_dir: str | None = None
    """JAX's persistent compilation cache: a second run does not pay the compile again"""
    attention_impl: Literal["xla", "cudnn", "auto"] | None = None
    """attention implementation for every case that does not set its own"""
    profile_dir: str | None = None
    """write a jax.profiler trace of a few extra steps per case here"""
    format: Literal["tsv", "md"] = "tsv"
    """the table on stdout: the seed's tab-separated layout or Markdown"""
    idle_check: Literal["error", "warn", "off"] = "warn"
    """sample the host before measuring: refuse (error), warn, or skip the check"""


def parse_args(argv: Sequence[str]) -> Args:
    """tyro's parse, with its error boxes turned into one line (raises UsageError)."""
    return cli.parse(Args, argv, prog="tools/benchmark_step.py")


def options_from(args: Args) -> tuple[Options, tuple[Case, ...]]:
    """Validate what tyro cannot (raises UsageError naming the bad value and the valid ones)."""
    if args.steps < 1:
        raise UsageError(f"--steps must be at least 1 (got {args.steps})")
    if args.warmup < 0:
        raise UsageError(f"--warmup must be at least 0 (got {args.warmup})")
    if args.resume and not args.json_out:
        raise UsageError("--resume needs --json-out (the record whose ok rows are skipped)")
    try:
        cases = resolve_cases(args.preset, args.architectures, args.cases)
    except ValueError as error:
        raise UsageError(str(error)) from None
    mesh = dict(presets_module.get(args.preset).mesh)
    if args.mesh is not None:
        mesh.update(_mesh_fields(args.mesh))
    options = Options(
        preset=args.preset,
        steps=args.steps,
        warmup=args.warmup,
        dtype=args.dtype,
        mesh=mesh,
        compile_only=args.compile_only,
        isolate=args.isolate,
        xla_flags=args.xla_flags,
        compilation_cache_dir=args.compilation_cache_dir,
        attention_impl=args.attention_impl,
        profile_dir=args.profile_dir,
    )
    return options, cases


def _mesh_fields(text: str) -> dict[str, Any]:
    import pydantic

    from dew.train.mesh import MeshSpec

    try:
        fields = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"--mesh is not valid JSON: {error}") from None
    valid = ", ".join(MeshSpec.model_fields)
    if not isinstance(fields, dict):
        raise UsageError(f"--mesh must be a JSON object of MeshSpec fields ({valid}); got {text}")
    for name in fields:
        if name not in MeshSpec.model_fields:
            raise UsageError(f"--mesh: unknown MeshSpec field {name!r}; valid: {valid}")
    try:
        MeshSpec(**fields)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        raise UsageError(f"--mesh.{first['loc'][0]}: {first['msg']}") from None
    return fields


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI: parse, run every case, print the table; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parse_args(argv)
        options, cases = options_from(args)
    except UsageError as error:
        print(f"benchmark_step: {error}", file=sys.stderr)
        return 2
    except SystemExit as stop:  # --help
        return int(stop.code or 0)
    if options.xla_flags and not options.isolate:
        # In-process cases: XLA reads its flags when the backend starts, which is later.
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {options.xla_flags}"
    from dew.train import distributed

    try:  # join the cluster the environment describes, before the backend starts
        cluster = distributed.initialize()
    except distributed.DistributedSetupError as error:
        print(f"benchmark_step: {error}", file=sys.stderr)
        return 2
    if cluster is not None and options.isolate:
        # A child per case cannot rejoin the runtime: cases run in the processes that joined.
        options = dataclasses.replace(options, isolate=False)
        if options.xla_flags:
            os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {options.xla_flags}"
    from dew.bench.idle import HostNotIdle

    try:
        record = run(
            options,
            cases,
            json_out=args.json_out,
            resume=args.resume,
            command=command_line(["tools/benchmark_step.py", *argv]),
            idle_check=args.idle_check,
        )
    except HostNotIdle as refusal:
        print(f"benchmark_step: {refusal}", file=sys.stderr)
        return 1
    if distributed.process_index() != 0:  # process 0 prints the table for the run
        return exit_code(record)
    print(report.step_table(record.rows, args.format, compile_only=options.compile_only), end="")
    return exit_code(record)


if __name__ == "__main__":
    sys.exit(child_main())
