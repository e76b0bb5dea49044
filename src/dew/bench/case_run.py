"""One case of the step benchmark, in this process: build, compile, time, one row.

preset case -> its model config -> Trainer -> ahead-of-time compile (timed) -> FLOPs from
the optimized HLO (dew.telemetry) -> init -> dev.bench.timing's windows -> allocator peak
-> one `StepRow`. Whatever was measured before a failure stays in the row (`figures`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dew.bench.cli import one_line
from dew.bench.presets import Case
from dew.bench.repeats import step_repeat
from dew.bench.schema import StepRow
from dew.bench.settings import CACHE_OFF, Options
from dew.bench.timing import block, time_steps

GIB = 1024**3
LM_OBJECTIVES = ("lm", "block_diffusion")  # cases whose samples are token sequences
PROFILE_STEPS = 3  # extra steps traced with --profile-dir, after the timed windows


@dataclasses.dataclass
class Prepared:
    """A case built and compiled, ready to step."""

    case: Case
    trainer: Any
    state: Any
    batch: Any
    figures: dict[str, Any]  # row fields known after the compile
    tokens_per_sample: int | None


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


def prepare(case: Case, options: Options, figures: dict[str, Any]) -> Prepared:
    """Build the Trainer for a case and compile its step; fills `figures` as it learns them
    (so a failure later in the case still reports what was measured)."""
    from dew.telemetry.instrumentation import cost_analysis_flops
    from dew.telemetry.memory import compiler_memory
    from dew.train.mesh import MeshSpec
    from dew.train.trainer import DEFAULT_CACHE, Trainer

    config = model_config(case, options.preset)
    figures["sample"] = sample_label(config)
    figures["batch"] = case.batch
    # Repeats are fresh compiles (XLA may choose differently each time) unless the user
    # named a cache: then they share one executable, as the user asked.
    cache = options.compilation_cache_dir or (CACHE_OFF if options.repeats > 1 else DEFAULT_CACHE)
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
    tokens = config.seq_len if config.objective in LM_OBJECTIVES else None
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
    figures.update(timings.percentiles())
    repeat = step_repeat(timings.ms_per_step, timings.synced_ms, figures.get("compile_s"))
    figures["repeats"] = [repeat.model_dump()]
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
        directory = Path(options.profile_dir) / profile_name(prepared.case)
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
        return make_row(case, figures, status="failed", error=one_line(error))
    return make_row(case, figures, status="ok")


def make_row(case: Case, figures: dict[str, Any], **status: Any) -> StepRow:
    """The case's row from what was measured; a figure out of range fails the row, saying
    why, and keeps its identity."""
    identity = case.row_fields()
    try:
        return StepRow(**{**identity, **figures, **status})
    except Exception as error:
        return StepRow(**identity, status="failed", error=f"invalid row: {one_line(error)}")


def profile_name(case: Case) -> str:
    """A directory name for the case's trace: its label without spaces or slashes."""
    label = case.label().replace(" (", "-").replace(", ", "-").rstrip(")")
    return label.replace("/", "_").replace(" ", "_")
