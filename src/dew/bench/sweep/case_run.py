"""One case of the step benchmark, in this process: build, compile, time, one row.

preset case -> its model config -> Trainer -> ahead-of-time compile (timed) -> FLOPs from
the optimized HLO and its fingerprint (dew.bench.sweep.program_labels) -> init ->
dew.bench.sweep.timing's windows -> the GPU window (below) -> allocator peak -> one
`StepRow`. A step of the user's (`--step`) is built and compiled by dew.bench.sweep.own_step
instead of the Trainer, and timed and labelled the same way. The row is built phase by
phase in a `Figures`, a typed object: a misspelt field fails at the line that writes it,
and whatever was measured before a failure stays in the row.

The GPU window: on NVIDIA GPUs, after the timed windows, one more synced window with
dew.telemetry.nvml's sampler running (clocks, temperature, power, clocks-event reasons)
and the energy counter read at its ends. It runs `steps` steps, more when those take under
MIN_ENERGY_WINDOW_S (the row says so), so the timed figures never run beside the sampler
and the row shows the synced step time without it (p50_ms) and with it (gpu.p50_ms).
--gpu-check decides what a card that slowed itself down does to the row.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pydantic

from dew import platforms
from dew.bench.analysis.repeats import step_repeat
from dew.bench.common.cli import one_line
from dew.bench.common.units import GIB
from dew.bench.record.schema import GPU_NOTE, GpuTelemetry, GpuWindow, StepRepeat, StepRow
from dew.bench.runtime.phases import PhaseClock
from dew.bench.runtime.protocol import says_out_of_memory
from dew.bench.sweep import divergence, own_step
from dew.bench.sweep.presets import Case
from dew.bench.sweep.program_labels import compile_and_label
from dew.bench.sweep.settings import Options, compilation_cache
from dew.bench.sweep.timing import block, percentiles, time_steps
from dew.train import cache_damage

LM_OBJECTIVES = ("lm", "block_diffusion")  # cases whose samples are token sequences
PROFILE_STEPS = 3  # extra steps traced with --profile-dir, after the timed windows
MIN_ENERGY_WINDOW_S = 1.0  # the energy counter moves in steps of ~10-100 ms: 1 s at least
SAMPLE_INTERVAL_S = 0.05  # 20 readings a second of every card


# The StepRow fields a case's phases leave alone: the case's identity (Case.row_fields),
# its status, the published tables' own steps and warmup, and what the run adds once the
# case's process has ended: its repeats' interval and warnings (sweep.run_record), the spread
# of a cluster's processes (multihost.combine), its process's allocator (sweep.case_process).
NOT_MEASURED = frozenset({
    "architecture", "head_chunks", "attention_impl", "case", "status", "error",
    "steps", "warmup",
    "ms_per_step_ci95", "warnings", "process_spread_ms", "xla_preallocate", "xla_mem_fraction",
})  # fmt: skip


class _Figures:
    """The row of a case as its phases measure it: every StepRow field they write (the
    row's other fields are NOT_MEASURED), each None until written (what a failure leaves
    unmeasured). Slots: writing a field that is not here, a misspelling, raises
    AttributeError at that line. The values are validated once, when `row` makes the
    StepRow (an out-of-range one fails the row); what crosses the pipe from a case's
    process is `fields()`, plain JSON (`on_compiled`)."""

    __slots__ = ()  # Figures' own slots are then the only attributes

    def fields(self) -> dict[str, Any]:
        """Every field by name, None where not measured (what `on_compiled` gets)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    def row(self, case: Case, status: Literal["ok", "failed"], error: str | None = None) -> StepRow:
        """The case's row: its identity, these figures and the status. A figure out of
        range fails the row, saying why, and keeps its identity."""
        identity = case.row_fields()
        try:
            return StepRow(**identity, **self.fields(), status=status, error=error)
        except pydantic.ValidationError as invalid:
            return StepRow(**identity, status="failed", error=f"invalid row: {one_line(invalid)}")


Figures = dataclasses.make_dataclass(
    "Figures",
    [
        (name, field.annotation, dataclasses.field(default=None))
        for name, field in StepRow.model_fields.items()
        if name not in NOT_MEASURED
    ],
    bases=(_Figures,),
    slots=True,
)
Figures.__module__ = __name__  # make_dataclass(module=) is Python 3.12's; pickling needs it


@dataclasses.dataclass
class Prepared:
    """A case built and compiled, ready to step."""

    case: Case
    trainer: Any  # what `step(state, batch)` is called on: a Trainer, or own_step.OwnStep
    state: Any
    batch: Any
    figures: Figures  # the row as far as the compile measured it
    tokens_per_sample: int | None
    devices: Sequence[Any] = ()  # every device the step runs on


def model_config(case: Case, preset: str):
    """The case's model config: the config class's preset named like the benchmark preset,
    with the case's settings. The Trainer applies dtype and attention_impl itself."""
    from dew.models import registry

    config_cls = registry.get(case.architecture).config_cls
    return config_cls.preset(preset, **case.model_overrides(config_cls.model_fields))


def sample_label(config) -> str:
    """The table's sample column: "64x64x3", "8x64x64x3" or "512 tokens"."""
    if config.seq_len is not None:
        return f"{config.seq_len} tokens"
    from dew.train.objectives import sample_shape

    return "x".join(str(n) for n in sample_shape(config))


def prepare(
    case: Case,
    options: Options,
    figures: Figures,
    clock: PhaseClock | None = None,
    devices: Sequence[Any] | None = None,
) -> Prepared:
    """Build the Trainer for a case and compile its step; writes `figures` as it learns them
    (so a failure later in the case still reports what was measured) and times each phase
    on `clock`. `devices`: the mesh's (default jax.devices(); a TPU topology's compiles for
    a chip this process does not hold: dew.bench.sweep.chip)."""
    from dew.train.mesh import MeshSpec
    from dew.train.trainer import Trainer

    clock = clock or PhaseClock()
    if case.step is not None:  # a step of the user's
        built, state, batch, devices = own_step.prepare(case, options, figures, clock)
        return Prepared(case, built, state, batch, figures, None, devices)
    with clock.phase("trace_lower"):
        config = model_config(case, options.preset)
        figures.sample = sample_label(config)
        figures.batch = case.batch
        trainer = Trainer(
            case.architecture,
            config,
            preset=options.preset,
            dtype=options.dtype,
            mesh=MeshSpec(**options.mesh),
            condition_in_state=bool(case.condition_in_state),
            compilation_cache_dir=compilation_cache(options),
            attention_impl=case.attention_impl or options.attention_impl or "xla",
            devices=None if devices is None else list(devices),
        )
        counts = trainer.param_counts
        figures.params = counts["backbone"] + counts["condition"]
        figures.condition_params = counts["condition"]
        host_batch = trainer.example_batch(case.batch)
        lowered = trainer.lower(host_batch)
    # compile_s is the real compile's (whole seconds when the executable came from the cache)
    compile_and_label(
        lambda: (trainer.compile_lowered(lowered), trainer.compile_seconds, trainer.load_seconds),
        figures,
        clock,
    )
    tokens = config.seq_len if config.objective in LM_OBJECTIVES else None
    devices = list(trainer.mesh.devices.flat)
    if options.compile_only:
        return Prepared(case, trainer, None, None, figures, tokens, devices)
    with clock.phase("init"):
        state, batch = block((trainer.init(), trainer.put_batch(host_batch)))
    return Prepared(case, trainer, state, batch, figures, tokens, devices)


def measure(
    prepared: Prepared, options: Options, figures: Figures, clock: PhaseClock | None = None
) -> tuple[StepRepeat, str | None]:
    """Time a prepared case, writing the row's measured fields on `figures` as it goes;
    its phases (warmup, timed, GPU window, profile) go on `clock`. Returns the row's repeat
    (run_case adds the phases to it) and the error that fails the row when its loss became
    NaN or inf (dew.bench.sweep.divergence; None: the row stands)."""
    import jax

    from dew.telemetry.instrumentation import mfu
    from dew.telemetry.memory import peak_bytes_in_use
    from dew.telemetry.peaks import no_peak_reason

    clock = clock or PhaseClock()
    losses: list[Any] = []  # each step's, as the step returned it: read after the windows
    state, metrics, timings = time_steps(
        prepared.trainer.step,
        prepared.state,
        prepared.batch,
        steps=options.steps,
        warmup=options.warmup,
        clock=clock,
        on_step=lambda metrics: losses.append(divergence.loss_leaf(metrics)),
    )
    batch = prepared.case.batch
    step_s = timings.ms_per_step / 1e3
    figures.ms_per_step = timings.ms_per_step
    spread = timings.percentiles()
    figures.p10_ms, figures.p50_ms = spread["p10_ms"], spread["p50_ms"]
    figures.p90_ms = spread["p90_ms"]
    repeat = step_repeat(
        timings.ms_per_step, timings.synced_ms, figures.compile_s, timings.host_ms,
        timings.host_cores,
    )  # fmt: skip
    repeat.fingerprint = figures.fingerprint  # what its compile made (validated here)
    figures.repeats = [repeat]
    figures.samples_per_s = batch / step_s
    if prepared.tokens_per_sample:
        figures.tokens_per_s = batch * prepared.tokens_per_sample / step_s
    devices = list(prepared.devices)
    flops = figures.gflop_per_step  # per device, like the peak it is divided by
    kind = devices[0].device_kind
    figures.util = mfu(flops * 1e9 if flops is not None else None, step_s, kind)
    work = figures.work_gflop_per_step
    figures.work_util = mfu(work * 1e9 if work is not None else None, step_s, kind)
    # a MIG slice: util null, and why; a platform dew does not know: what its row lacks
    figures.note = join(figures.note, no_peak_reason(kind), platforms.of_devices(devices).lacks)
    local = [d for d in devices if d.process_index == jax.process_index()]
    peaks = [peak_bytes_in_use(d) for d in local]
    figures.peak_gib = max(peaks) / GIB if None not in peaks else None
    began, start, cpu = time.time(), time.perf_counter(), time.process_time()
    state, gpu = gpu_window(prepared, state, options, local)
    figures.gpu = gpu
    if gpu.window_steps:  # a window ran (an NVIDIA GPU)
        clock.add("gpu_window", began, time.perf_counter() - start, time.process_time() - cpu)
    loss = final_loss(metrics)
    if loss is not None:  # a step of the user's may report none
        figures.loss = loss if math.isfinite(loss) else None
        figures.loss_finite = math.isfinite(loss)
    diverged, note = divergence.verdict(losses, may_diverge=options.loss_may_diverge)
    figures.note = join(figures.note, note)

    if options.profile_dir:
        directory = Path(options.profile_dir) / profile_name(prepared.case)
        with clock.phase("profile"), jax.profiler.trace(str(directory)):
            for _ in range(PROFILE_STEPS):
                state, metrics = prepared.trainer.step(state, prepared.batch)
            block((state, metrics))
    prepared.state = state
    return repeat, diverged


def final_loss(metrics: Any) -> float | None:
    """The last step's loss: dew's "train/loss", or a step of the user's "loss" when it is
    one number; None when its metrics hold neither."""
    return divergence.as_number(divergence.loss_leaf(metrics))


def join(*notes: str | None) -> str | None:
    """Notes in one, "; " between; None when there are none."""
    return "; ".join(filter(None, notes)) or None


def gpu_window(
    prepared: Prepared, state: Any, options: Options, devices: Sequence[Any]
) -> tuple[Any, GpuTelemetry]:
    """The GPU window (module docstring): the state after it and the row's `gpu`. Off an
    NVIDIA GPU, or with --gpu-check off, no step runs and every figure is null, with why."""
    from dew.telemetry import nvml

    mode = options.gpu_check
    if mode == "off":
        return state, GpuTelemetry(check=mode, note="GPU readings turned off (--gpu-check off)")
    platform = platforms.of_devices(devices) if devices else platforms.unknown("none")
    if not platform.nvml:  # a ROCm GPU too: NVML is NVIDIA's
        return state, GpuTelemetry(check=mode, note=f"{GPU_NOTE}{platform.name}")
    with nvml.session() as gpus:
        if not gpus:
            return state, GpuTelemetry(check=mode, note=f"no NVIDIA GPU: {gpus.why}")
        uuids = gpus.uuids()
        visible, why = nvml.visible_indices(os.environ.get("CUDA_VISIBLE_DEVICES"), uuids)
        ordinals = [_ordinal(d) for d in devices]
        if visible is None or any(o is None or o >= len(visible) for o in ordinals):
            why = why or f"devices {ordinals} are not among CUDA's {visible}"
            return state, GpuTelemetry(check=mode, note=f"cannot tell which card is which: {why}")
        indices = [visible[o] for o in ordinals]
        sampler = nvml.WindowSampler(gpus.nv, [gpus.handles[i] for i in indices], SAMPLE_INTERVAL_S)
        state, synced = _sampled_steps(prepared, state, options.steps, sampler)
        windows = sampler.windows(len(synced), prepared.case.batch)
    telemetry = gpu_telemetry(
        mode,
        indices,
        [uuids[i] for i in indices],
        windows,
        synced,
        options.steps,
        batch=prepared.case.batch,
        window_s=sampler.window_s,
    )
    return state, telemetry


def _sampled_steps(prepared: Prepared, state: Any, steps: int, sampler) -> tuple[Any, list]:
    """Synced steps with the sampler running: `steps`, and more until the window spans
    MIN_ENERGY_WINDOW_S. Returns the state and each step's ms."""
    synced: list[float] = []
    sampler.start()
    try:
        began = time.perf_counter()
        while len(synced) < steps or time.perf_counter() - began < MIN_ENERGY_WINDOW_S:
            start = time.perf_counter()
            state, metrics = prepared.trainer.step(state, prepared.batch)
            block((state, metrics))
            synced.append((time.perf_counter() - start) * 1e3)
    finally:
        sampler.stop()
    return state, synced


def _ordinal(device: Any) -> int | None:
    """The CUDA ordinal of a jax GPU device (its index among the visible devices)."""
    ordinal = getattr(device, "local_hardware_id", None)
    return device.id if ordinal is None else ordinal


def gpu_telemetry(
    mode: str,
    indices: Sequence[int],
    uuids: Sequence[str | None],
    windows: Sequence[dict[str, Any]],
    synced_ms: Sequence[float],
    steps: int,
    *,
    batch: int | None,
    window_s: float,
) -> GpuTelemetry:
    """The row's `gpu` from every card's summary (dew.telemetry.nvml.summarize)."""
    from dew.telemetry.nvml import slowdowns

    cards = [
        GpuWindow(index=index, uuid=uuid, **window)
        for index, uuid, window in zip(indices, uuids, windows, strict=True)
    ]
    per_step = [card.joules_per_step for card in cards]
    joules = sum(per_step) if cards and None not in per_step else None  # type: ignore[arg-type]
    watts = [card.energy_watts for card in cards]
    seen = [
        f"GPU {card.index}: {reason}"
        for card in cards
        for reason in slowdowns(card.clocks_event_reasons or [])
    ]
    note = None
    if len(synced_ms) > steps:
        note = (
            f"window lengthened from {steps} to {len(synced_ms)} synced steps to span "
            f"{MIN_ENERGY_WINDOW_S:g} s for the energy counter"
        )
    return GpuTelemetry(
        check=mode,
        window_steps=len(synced_ms),
        window_s=round(window_s, 4),
        interval_s=SAMPLE_INTERVAL_S,
        p50_ms=percentiles(synced_ms)["p50_ms"] if synced_ms else None,
        gpus=cards,
        joules_per_step=joules,
        samples_per_kj=batch / joules * 1e3 if joules and batch else None,
        mean_watts=sum(watts) if cards and None not in watts else None,  # type: ignore[arg-type]
        slowdowns=seen,
        note=note,
    )


def gpu_verdict(telemetry: GpuTelemetry | None) -> str | None:
    """The error that fails a row under --gpu-check error, or None (the gate)."""
    if telemetry is None or telemetry.check != "error" or not telemetry.slowdowns:
        return None
    return (
        f"the GPU slowed itself down during the GPU window ({'; '.join(telemetry.slowdowns)}); "
        "its times measure the card's state: rerun on a cool GPU, or pass --gpu-check warn "
        "to keep the row with a warning"
    )


def run_case(
    case: Case,
    options: Options,
    on_compiled: Callable[[dict[str, Any]], None] | None = None,
    clock: PhaseClock | None = None,
) -> StepRow:
    """One case in this process: a row, `ok` or `failed` with a one-line error.

    `on_compiled(fields)` is called once the step is compiled and the state initialised,
    with what is known then (`Figures.fields`: a plain dict, it crosses a pipe); it may
    block (a child waits there for its turn to be timed). The row's repeat carries the
    phases timed on `clock`.
    """
    figures = Figures()
    clock = clock or PhaseClock()
    error = diverged = None
    with cache_damage.watch() as damaged:  # a damaged cache entry: recompiled, said
        try:
            prepared = prepare(case, options, figures, clock)
            if on_compiled is not None:
                on_compiled(figures.fields())
            if not options.compile_only:
                repeat, diverged = measure(prepared, options, figures, clock)
                repeat.phases = list(clock.phases)
        except Exception as failed:
            error = failure(failed)
    figures.note = join(figures.note, *damaged)
    return final_row(case, figures, error, diverged)


def final_row(case: Case, figures: Figures, error: str | None, diverged: str | None) -> StepRow:
    """The row once its case ended: failed with its error, or with its divergence (the times
    stay in the row; they are not a benchmark), or by --gpu-check error's gate; else ok."""
    refused = error or diverged or gpu_verdict(figures.gpu)
    if refused:
        return figures.row(case, status="failed", error=refused)
    return figures.row(case, status="ok")


def failure(error: Exception) -> str:
    """A failed case's error in one line; "out of memory: " first when an allocation
    failed (host or device: MemoryError, XLA's RESOURCE_EXHAUSTED, std::bad_alloc)."""
    line = one_line(error)
    if isinstance(error, MemoryError) or says_out_of_memory(line):
        return f"out of memory: {line}"
    return line


def make_row(case: Case, figures: Figures | Mapping[str, Any], **status: Any) -> StepRow:
    """`Figures.row` of what was measured, given as a Figures or as its fields by name (what
    `on_compiled` got: a name that is not a field raises TypeError here)."""
    if not isinstance(figures, Figures):
        figures = Figures(**figures)
    return figures.row(case, **status)


def profile_name(case: Case) -> str:
    """A directory name for the case's trace: its label without spaces or slashes."""
    label = case.label().replace(" (", "-").replace(", ", "-").rstrip(")")
    return label.replace("/", "_").replace(" ", "_").replace(":", "_")
