"""The rows of a record: one step-benchmark case, one loader configuration, their raw
samples (repeats) and the GPU readings of a step row's window."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import pydantic
from pydantic import Field

from dew.bench.record.schema.base import JsonScalar, NonNegFloat, NonNegInt, Record, Timing

# --- rows --------------------------------------------------------------------------------


class _Row(Record):
    """Shared checks; each row declares status, error and note last, after its columns."""

    @pydantic.model_validator(mode="after")
    def _status_matches_error(self) -> _Row:
        if self.status == "failed" and not self.error:
            raise ValueError("a failed row needs its error message in 'error'")
        if self.status == "ok" and self.error:
            raise ValueError("an ok row carries no error; set status to 'failed'")
        return self


Interval = Annotated[list[NonNegFloat], Field(min_length=2, max_length=2)]


PHASES = (
    "imports",  # process start until the case code runs (a fork: the server imported)
    "trace_lower",  # the Trainer built (model traced for its shapes) and the step lowered
    "compile",  # XLA's compile of the step (a real one: not a load from the cache)
    "load",  # the step's executable read from the persistent compilation cache
    "flop_count",  # the FLOP count and fingerprint of the optimized HLO, cost analysis,
    # compiler memory
    "init",  # the initial state (its own jit) and the batch on the devices
    "warmup",
    "timed",  # the dispatch window and the synced window
    "gpu_window",  # the synced window with the NVML sampler (NVIDIA GPUs)
    "profile",  # --profile-dir's traced steps
    "save",  # a chip's case: its executable, initial state and batch saved for the holder
    "open",  # a chip's holder opening the chip (on the first case it times)
    "deserialize",  # a chip's holder loading the saved executable onto the chip (the
    # round's programs side by side, before its first case is timed)
)


class Phase(Record):
    """Where a case's process spent its time: one phase, from its wall-clock start."""

    name: Literal[PHASES]  # type: ignore[valid-type]
    start: NonNegFloat = Field(description="Unix time (s) when the phase began")
    seconds: NonNegFloat
    cpu_seconds: NonNegFloat | None = Field(
        default=None,
        description="the process's CPU time over the phase, every thread's (process_time): "
        "cpu_seconds / seconds is the cores it used; null where the phase shares its "
        "process's CPU with others running beside it (a chip holder's loads, in threads)",
    )


class Fingerprint(Record):
    """What the compiler made of a step case (dew.telemetry.fingerprint): two digests of
    its optimized HLO, so that two compiles can be told apart as another program or the
    same program with other kernels (docs/conventions.md)."""

    program: str = Field(
        description="sha256 (16 hex digits) of the optimized HLO without source locations, "
        "module name and backend configs"
    )
    kernels: str = Field(
        description="sha256 (16 hex digits) of its backend configs in program order: on a "
        "GPU the autotuner's choices (cuBLAS algorithms, Triton tiles, cuDNN plans)"
    )


class StepRepeat(Record):
    """One fresh process of a step case (--repeats): its own compile and both windows."""

    ms_per_step: Timing = Field(description="the dispatch window's total / steps")
    synced_ms: list[NonNegFloat] = Field(description="the synced window, one time per step")
    compile_s: NonNegFloat | None = None
    host_ms: NonNegFloat | None = Field(
        default=None,
        description="the host's time to issue one step: the median, over the synced window, "
        "of a step call's return with the device's queue empty; over ms_per_step it is the "
        "row's dependence on the host (compare's busy gate); null: not measured",
    )
    host_cores: NonNegFloat | None = Field(
        default=None,
        description="the CPU this repeat's process used over the dispatch window, in cores "
        "(its CPU seconds over the window's wall seconds, every thread); null: not measured",
    )
    host_busy: str | None = Field(
        default=None, description="why the idle check before this repeat's round failed"
    )
    host_load_cores: NonNegFloat | None = Field(
        default=None,
        description="the CPU other processes used during that idle check, in cores (100% of "
        "one core is 1); null: not read",
    )
    host_probe_ms: NonNegFloat | None = Field(
        default=None,
        description="the host-speed probe before this repeat's round "
        "(dew.bench.runtime.hostprobe): "
        "ms for a fixed CPU workload; compare reads the drift between two runs from it",
    )
    phases: list[Phase] | None = Field(
        default=None, description="where this repeat's time went (schema 3)"
    )
    fingerprint: Fingerprint | None = Field(
        default=None, description="what this repeat's compile made; null: not recorded"
    )
    log: str | None = Field(
        default=None,
        description="this repeat's process log (stdout and stderr: XLA's, ptxas', cuDNN's "
        "warnings), a file in the record's settings.options.log_dir (an absolute path where "
        "it could not be moved there, e.g. a full disk); null when not kept",
    )


class DataRepeat(Record):
    """One fresh process of a loader configuration (--repeats)."""

    samples_per_s: Timing
    intervals_ms: list[NonNegFloat] = Field(description="time between batches, one per batch")
    first_batch_s: NonNegFloat | None = None
    host_busy: str | None = None
    host_load_cores: NonNegFloat | None = Field(
        default=None,
        description="the CPU other processes used during the idle check before "
        "this repeat, in cores; null: not read",
    )
    host_probe_ms: NonNegFloat | None = Field(
        default=None, description="the host-speed probe before this repeat (schema 3)"
    )


class GpuWindow(Record):
    """One card over a row's GPU window (NVML, read every `GpuTelemetry.interval_s`)."""

    index: NonNegInt = Field(description="NVML's index (GpuInfo.index)")
    uuid: str | None = None
    readings: NonNegInt
    sm_clock_mhz_min: NonNegFloat | None = None
    sm_clock_mhz_median: NonNegFloat | None = None
    memory_clock_mhz_min: NonNegFloat | None = None
    memory_clock_mhz_median: NonNegFloat | None = None
    temperature_c_max: float | None = None
    power_w_mean: NonNegFloat | None = Field(default=None, description="mean of the readings")
    clocks_event_reasons: list[str] | None = Field(
        default=None, description="every clocks-event (throttle) reason seen, by NVML name"
    )
    energy_j: NonNegFloat | None = Field(
        default=None, description="difference of the energy counter over the window"
    )
    joules_per_step: NonNegFloat | None = None
    samples_per_kj: NonNegFloat | None = None
    energy_watts: NonNegFloat | None = Field(default=None, description="energy_j / window_s")
    energy_note: str | None = Field(default=None, description="why the energy is null")


class GpuTelemetry(Record):
    """A step row's GPU readings: a synced window after the timed ones, with the sampler
    running, at least `steps` steps and one second (for the energy counter)."""

    check: Literal["error", "warn", "off"] | None = Field(
        default=None, description="--gpu-check: what a slowdown does to the row"
    )
    window_steps: Annotated[int, Field(ge=1)] | None = None
    window_s: NonNegFloat | None = None
    interval_s: NonNegFloat | None = Field(default=None, description="between two readings")
    p50_ms: NonNegFloat | None = Field(
        default=None,
        description="median synced step in this window: the step time with "
        "the sampler running (the row's p50_ms is without it)",
    )
    gpus: list[GpuWindow] | None = None
    joules_per_step: NonNegFloat | None = Field(default=None, description="all cards")
    samples_per_kj: NonNegFloat | None = None
    mean_watts: NonNegFloat | None = Field(default=None, description="all cards, from energy")
    slowdowns: list[str] = Field(
        default_factory=list, description="'GPU i: reason' for each slowdown seen (the gate)"
    )
    note: str | None = Field(
        default=None, description="why the readings are null, or how the window was set"
    )


def _check_order(row: Any, names: tuple[str, ...]) -> None:
    values = [(n, getattr(row, n)) for n in names if getattr(row, n) is not None]
    for (lo_name, lo), (hi_name, hi) in zip(values, values[1:], strict=False):
        if lo > hi:
            raise ValueError(f"percentiles out of order: {lo_name}={lo} > {hi_name}={hi}")


class StepRow(_Row):
    """One architecture (one case) of the step benchmark: the table's columns."""

    architecture: str
    # Case settings that tell two rows of one architecture apart; null = preset default.
    head_chunks: Annotated[int, Field(ge=1)] | None = None
    attention_impl: str | None = None
    case: dict[str, JsonScalar] | None = Field(
        default=None, description="other case fields set for this row (e.g. MoE settings)"
    )
    sample: str | None = None
    batch: Annotated[int, Field(ge=1)] | None = None
    params: NonNegInt | None = None
    condition_params: NonNegInt | None = Field(
        default=None, description="parameters of the condition encoder, included in params"
    )
    steps: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="measured steps when this row differs from the settings"
    )
    warmup: NonNegInt | None = None
    ms_per_step: Timing | None = None
    p10_ms: Timing | None = None
    p50_ms: Timing | None = None
    p90_ms: Timing | None = None
    samples_per_s: Timing | None = None
    tokens_per_s: NonNegFloat | None = None
    gflop_per_step: NonNegFloat | None = None
    cost_analysis_gflop: NonNegFloat | None = None
    util: Annotated[float, Field(ge=0, le=1.5)] | None = None
    work_gflop_per_step: NonNegFloat | None = Field(
        default=None,
        description="the work count: gflop_per_step's walk with each ragged dot counted by "
        "its groups (the rows routed, not every group's) and a Mosaic call "
        "(tpu_custom_call) from the cost it states; null when not counted",
    )
    work_util: Annotated[float, Field(ge=0, le=1.5)] | None = Field(
        default=None, description="util on work_gflop_per_step"
    )
    work_uncounted_custom_calls: dict[str, NonNegInt] | None = Field(
        default=None,
        description="custom-call target -> executions per step that the work count could "
        "not count (counted as 0); {} when there are none, null when not counted",
    )
    peak_gib: NonNegFloat | None = None
    compiler_peak_gib: NonNegFloat | None = None
    compile_s: NonNegFloat | None = Field(
        default=None,
        description="XLA's compile of the step; when it came from the persistent cache, the "
        "original compile's time as the cache keeps it (JAX stores whole seconds, truncated)",
    )
    load_s: NonNegFloat | None = Field(
        default=None,
        description="seconds to read the step from the persistent cache; null when compiled",
    )
    program_bytes: NonNegInt | None = Field(
        default=None,
        description="the size of the step's serialized executable where it was compiled in "
        "one process and run in another (the held-chip path: what the holder loads); null "
        "where the step ran in the process that compiled it",
    )
    loss: float | None = None
    loss_finite: bool | None = None
    process_spread_ms: NonNegFloat | None = Field(
        default=None, description="slowest minus fastest process ms/step (multi-process runs)"
    )
    ms_per_step_ci95: Interval | None = Field(
        default=None, description="95% interval of the median ms/step over repeats and steps"
    )
    repeats: list[StepRepeat] | None = Field(
        default=None, description="the raw samples: every repeat's windows (schema 2)"
    )
    uncounted_custom_calls: dict[str, NonNegInt] | None = Field(
        default=None,
        description="custom-call target -> executions per step that the FLOP count could "
        "not count (counted as 0); {} when there are none, null when not counted",
    )
    flops_error: str | None = Field(
        default=None,
        description="why gflop_per_step, cost_analysis_gflop or the fingerprint is null: "
        "its count failed on this program ('FLOP count failed: ...'); the row was still timed",
    )
    fingerprint: Fingerprint | None = Field(
        default=None,
        description="the compiled program's fingerprint when every repeat shares it; null "
        "when they differ (each repeat has its own) or it was not recorded",
    )
    gpu: GpuTelemetry | None = Field(
        default=None,
        description="NVML readings; null fields with the reason in gpu.note off an NVIDIA GPU",
    )
    xla_preallocate: bool | None = Field(
        default=None,
        description="whether XLA's GPU client took its memory fraction up front in the "
        "case's process (XLA_PYTHON_CLIENT_PREALLOCATE as that process had it; unset is "
        "true); the CPU client ignores it; null when not read (in-process cases)",
    )
    xla_mem_fraction: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None,
        description="XLA_PYTHON_CLIENT_MEM_FRACTION (or XLA_CLIENT_MEM_FRACTION) in the "
        "case's process; null when unset (XLA's default, 0.75) or not read",
    )
    warnings: list[str] = Field(default_factory=list, description="noise warnings")
    status: Literal["ok", "failed"]
    error: str | None = None
    note: str | None = None

    @pydantic.model_validator(mode="after")
    def _percentiles_ordered(self) -> StepRow:
        _check_order(self, ("p10_ms", "p50_ms", "p90_ms"))
        if self.condition_params is not None and self.params is not None:
            if self.condition_params > self.params:
                raise ValueError(
                    f"condition_params={self.condition_params} exceeds params={self.params}"
                )
        if self.loss is not None and self.loss_finite is not None:
            if math.isfinite(self.loss) != self.loss_finite:
                raise ValueError(f"loss={self.loss} contradicts loss_finite={self.loss_finite}")
        return self

    # --- the identity of a case: the one place it is spelled ------------------------------

    def key(self) -> tuple:
        """What identifies this row's case: architecture, batch and the case settings.

        The batch is read from either place a record keeps it (the column, or the case
        settings of a row that failed before its figures), so a published row and a new one
        of the same case match. --resume, compare and the report all match on this."""
        case = dict(self.case or {})
        batch = self.batch if self.batch is not None else case.get("batch")
        case.pop("batch", None)
        settings = tuple(sorted(case.items(), key=lambda kv: kv[0]))
        return (self.architecture, batch, self.head_chunks, self.attention_impl, settings)

    def label(self) -> str:
        """The architecture and the settings that tell its rows apart (batch has a column):
        `causal_transformer (moe)`, `causal_transformer (head_chunks=1)`."""
        parts = []
        if self.head_chunks is not None:
            parts.append(f"head_chunks={self.head_chunks}")
        if self.attention_impl is not None:
            parts.append(f"attention_impl={self.attention_impl}")
        for name, value in sorted((self.case or {}).items()):
            if name != "batch":
                parts.append(name if value is True else f"{name}={value}")
        return self.architecture + (f" ({', '.join(parts)})" if parts else "")


class DataRow(_Row):
    """One loader configuration of the data benchmark."""

    dataset: str
    batch: Annotated[int, Field(ge=1)]
    image_size: Annotated[int, Field(ge=1)] | None = None
    workers: NonNegInt | None = None
    threads: NonNegInt | None = None
    steps: Annotated[int, Field(ge=1)] | None = None
    warmup: NonNegInt | None = None
    samples_per_s: Timing | None = None
    p50_ms: Timing | None = None
    p95_ms: Timing | None = None
    first_batch_s: NonNegFloat | None = None
    process_spread_ms: NonNegFloat | None = None
    samples_per_s_ci95: Interval | None = Field(
        default=None, description="95% interval of the median samples/s over repeats"
    )
    repeats: list[DataRepeat] | None = Field(
        default=None, description="the raw samples: every repeat's batch intervals (schema 2)"
    )
    warnings: list[str] = Field(default_factory=list, description="noise warnings")
    status: Literal["ok", "failed"]
    error: str | None = None
    note: str | None = None

    @pydantic.model_validator(mode="after")
    def _percentiles_ordered(self) -> DataRow:
        _check_order(self, ("p50_ms", "p95_ms"))
        return self

    def key(self) -> tuple:
        """What identifies this row's loader configuration."""
        return (self.dataset, self.batch, self.image_size, self.workers, self.threads)

    def label(self) -> str:
        return f"{self.dataset} (workers={self.workers}, threads={self.threads})"
